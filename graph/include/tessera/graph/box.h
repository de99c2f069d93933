// A box of a tensor: [lo[d], hi[d]) along each dimension, in the whole
// tensor's coordinates. Lowering describes what each rank holds of a tensor as
// a box; the executor and the trainer move boxes between dense buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/types.h"

namespace tessera {

struct Box {
    std::vector<int64_t> lo, hi;
    static Box whole(const Shape &s);
    int rank() const { return static_cast<int>(lo.size()); }
    int64_t elements() const;  // 0 when empty
    Shape extents() const;
    bool empty() const;
    bool contains(const Box &b) const;
    Box intersect(const Box &b) const;  // may be empty
    Box shifted(const Box &origin) const;  // relative to origin.lo
    // Part `part` of `k` along `dim` (see block_lo): blocks of ceil and floor
    // size, the longer ones first. Throws tessera::Error when `k` exceeds the extent.
    Box part(int dim, int k, int part) const;
    std::string str() const;               // "[0:4, 0:10]"
    bool operator==(const Box &) const = default;
};

// How an extent is split k ways: block p starts at block_lo(extent, k, p)
// and holds block_size(extent, k, p) elements; the first extent % k blocks
// hold one more than the rest (32 split 7 ways: 5,5,5,5,4,4,4).
int64_t block_lo(int64_t extent, int k, int p);
int64_t block_size(int64_t extent, int k, int p);

// Copies `region` (inside both boxes) from a dense row-major buffer holding
// box `from` into one holding box `to`; elements of `elem` bytes.
void copy_box(const void *src, const Box &from, void *dst, const Box &to, const Box &region, size_t elem);

// Flattened [lo..., hi...] for attributes, and back.
std::vector<int64_t> box_ints(const Box &b);
Box box_from_ints(const std::vector<int64_t> &v, size_t at, int rank);

}  // namespace tessera
