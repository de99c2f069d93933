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
#include "tessera/exec/device.h"
#include "tessera/graph/box.h"

namespace tessera::gpu {

// The kernel of one BoxCopyArgs (exec/device.h): thread i copies element
// first + i of the region, in row-major order. A side that holds a box finds
// it by the element's coordinates; a packed side at i. The innermost
// dimension is contiguous in a box, so neighbouring threads touch
// neighbouring bytes.
struct BoxCopy {
    static constexpr int kMaxRank = 8;
    int rank = 0;
    int elem = 4;
    bool src_packed = false, dst_packed = false;
    int64_t first = 0;
    int64_t extent[kMaxRank] = {};                                 // the region's extents
    int64_t src_stride[kMaxRank] = {}, dst_stride[kMaxRank] = {};  // elements
    const std::byte *src = nullptr;  // a box side: the region's first element; a packed side: the run
    std::byte *dst = nullptr;

    TESSERA_HD void operator()(int64_t i) const {
        int64_t s = 0, d = 0, rest = first + i;
        for (int k = rank - 1; k >= 0; k--) {
            const int64_t at = rest % extent[k];
            rest /= extent[k];
            s += at * src_stride[k];
            d += at * dst_stride[k];
        }
        if (src_packed) s = i;
        if (dst_packed) d = i;
        if (elem == 8) *reinterpret_cast<int64_t *>(dst + d * 8) = *reinterpret_cast<const int64_t *>(src + s * 8);
        else *reinterpret_cast<int32_t *>(dst + d * 4) = *reinterpret_cast<const int32_t *>(src + s * 4);
    }
};

inline BoxCopy box_copy(const BoxCopyArgs &a) {
    const Box &region = a.region;
    const int r = region.rank();
    TESSERA_INTERNAL_ASSERT((a.src_packed || a.from.rank() == r) && (a.dst_packed || a.to.rank() == r) &&
                                r <= BoxCopy::kMaxRank,
                            "box_copy: ranks ", a.from.rank(), ", ", a.to.rank(), " and ", r, " (at most ",
                            BoxCopy::kMaxRank, ")");
    TESSERA_INTERNAL_ASSERT((a.src_packed || a.from.contains(region)) && (a.dst_packed || a.to.contains(region)),
                            "box_copy: region ", region.str(), " is not inside ", a.from.str(), " and ", a.to.str());
    TESSERA_INTERNAL_ASSERT(a.elem == 4 || a.elem == 8, "box_copy: elements of ", a.elem, " bytes");
    TESSERA_INTERNAL_ASSERT(a.first >= 0 && a.count >= 0 && a.first + a.count <= region.elements(),
                            "box_copy: elements [", a.first, ", +", a.count, ") of a region of ", region.elements());
    BoxCopy k;
    k.rank = r;
    k.elem = static_cast<int>(a.elem);
    k.src_packed = a.src_packed;
    k.dst_packed = a.dst_packed;
    k.first = a.first;
    int64_t fs = 1, ts = 1, s0 = 0, d0 = 0;
    for (int d = r - 1; d >= 0; d--) {
        k.extent[d] = region.hi[d] - region.lo[d];
        k.src_stride[d] = fs;
        k.dst_stride[d] = ts;
        if (!a.src_packed) {
            s0 += (region.lo[d] - a.from.lo[d]) * fs;
            fs *= a.from.hi[d] - a.from.lo[d];
        }
        if (!a.dst_packed) {
            d0 += (region.lo[d] - a.to.lo[d]) * ts;
            ts *= a.to.hi[d] - a.to.lo[d];
        }
    }
    k.src = static_cast<const std::byte *>(a.src) + s0 * static_cast<int64_t>(a.elem);
    k.dst = static_cast<std::byte *>(a.dst) + d0 * static_cast<int64_t>(a.elem);
    return k;
}

}  // namespace tessera::gpu
