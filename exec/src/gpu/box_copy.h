// Internal to exec/: a box copy as a GPU kernel body, the device side of a
// collective's packing and unpacking (graph/box.h's copy_box on the host).
// Like every kernel of exec/src/gpu/ it is a functor over the execution
// context (exec.h): one thread per element of the region, so the host test
// runs the same body in a loop and compares it with copy_box.
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec.h"
#include "tessera/error.h"
#include "tessera/graph/box.h"

namespace tessera::gpu {

// Copies `region` from a dense row-major buffer holding box `from` into one
// holding box `to` (copy_box's arguments), elements of 4 or 8 bytes. Element
// i is the region's i-th in row-major order; the innermost dimension is
// contiguous in both buffers, so neighbouring threads touch neighbouring
// bytes.
struct BoxCopy {
    static constexpr int kMaxRank = 8;
    int rank = 0;
    int elem = 4;
    int64_t extent[kMaxRank] = {};                    // the region's extents
    int64_t src_stride[kMaxRank] = {}, dst_stride[kMaxRank] = {};  // elements
    const std::byte *src = nullptr;                   // the region's first element in each buffer
    std::byte *dst = nullptr;

    TESSERA_HD void operator()(int64_t i) const {
        int64_t s = 0, d = 0;
        for (int k = rank - 1; k >= 0; k--) {
            const int64_t at = i % extent[k];
            i /= extent[k];
            s += at * src_stride[k];
            d += at * dst_stride[k];
        }
        if (elem == 8) *reinterpret_cast<int64_t *>(dst + d * 8) = *reinterpret_cast<const int64_t *>(src + s * 8);
        else *reinterpret_cast<int32_t *>(dst + d * 4) = *reinterpret_cast<const int32_t *>(src + s * 4);
    }
};

// The kernel for copy_box(src, from, dst, to, region, elem) and its element
// count (0 for an empty region: nothing to launch).
inline BoxCopy box_copy(const void *src, const Box &from, void *dst, const Box &to, const Box &region, size_t elem,
                        int64_t *count) {
    const int r = region.rank();
    TESSERA_INTERNAL_ASSERT(from.rank() == r && to.rank() == r && r <= BoxCopy::kMaxRank, "box_copy: ranks ",
                            from.rank(), ", ", to.rank(), " and ", r, " (at most ", BoxCopy::kMaxRank, ")");
    TESSERA_INTERNAL_ASSERT(from.contains(region) && to.contains(region), "box_copy: region ", region.str(),
                            " is not inside ", from.str(), " and ", to.str());
    TESSERA_INTERNAL_ASSERT(elem == 4 || elem == 8, "box_copy: elements of ", elem, " bytes");
    BoxCopy k;
    k.rank = r;
    k.elem = static_cast<int>(elem);
    int64_t fs = 1, ts = 1, s0 = 0, d0 = 0;
    for (int d = r - 1; d >= 0; d--) {
        k.extent[d] = region.hi[d] - region.lo[d];
        k.src_stride[d] = fs;
        k.dst_stride[d] = ts;
        s0 += (region.lo[d] - from.lo[d]) * fs;
        d0 += (region.lo[d] - to.lo[d]) * ts;
        fs *= from.hi[d] - from.lo[d];
        ts *= to.hi[d] - to.lo[d];
    }
    k.src = static_cast<const std::byte *>(src) + s0 * static_cast<int64_t>(elem);
    k.dst = static_cast<std::byte *>(dst) + d0 * static_cast<int64_t>(elem);
    *count = region.elements();
    return k;
}

}  // namespace tessera::gpu
