// The GPU box copy's kernel body (exec/src/gpu/box_copy.h), run on the host
// through the execution context, against graph/box.h's copy_box: random
// boxes of every rank up to 5, elements of 4 and 8 bytes, regions at every
// corner; and a scalar (rank 0).
#include "gpu/box_copy.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace tessera {
namespace {

Box random_box_inside(const Box &outer, std::mt19937 &rng) {
    Box b = outer;
    for (int d = 0; d < outer.rank(); d++) {
        std::uniform_int_distribution<int64_t> at(outer.lo[d], outer.hi[d] - 1);
        int64_t a = at(rng), c = at(rng);
        b.lo[d] = std::min(a, c);
        b.hi[d] = std::max(a, c) + 1;
    }
    return b;
}

void check_copy(const Box &from, const Box &to, const Box &region, size_t elem, std::mt19937 &rng) {
    std::vector<std::byte> src(static_cast<size_t>(from.elements()) * elem), want(to.elements() * elem),
        got(to.elements() * elem);
    for (std::byte &b : src) b = static_cast<std::byte>(rng());
    for (size_t i = 0; i < want.size(); i++) want[i] = got[i] = static_cast<std::byte>(i * 7);
    copy_box(src.data(), from, want.data(), to, region, elem);
    int64_t n = -1;
    const gpu::BoxCopy k = gpu::box_copy(src.data(), from, got.data(), to, region, elem, &n);
    EXPECT_EQ(n, region.elements());
    gpu::HostExec ex(0);
    ex.for_each(n, k);
    EXPECT_EQ(got, want) << "from " << from.str() << " to " << to.str() << " region " << region.str() << ", "
                         << elem << "-byte elements";
}

TEST(GpuBoxCopy, MatchesCopyBoxOnRandomBoxes) {
    std::mt19937 rng(7);
    for (int rank = 1; rank <= 5; rank++)
        for (int trial = 0; trial < 40; trial++) {
            Box space = Box::whole(Shape(static_cast<size_t>(rank), 9));
            Box from = random_box_inside(space, rng), to = random_box_inside(space, rng);
            Box common = from.intersect(to);
            if (common.empty()) continue;
            Box region = random_box_inside(common, rng);
            check_copy(from, to, region, trial % 2 ? 8 : 4, rng);
        }
}

TEST(GpuBoxCopy, WholeBuffersAndAScalar) {
    std::mt19937 rng(3);
    Box whole = Box::whole({4, 5, 6});
    check_copy(whole, whole, whole, 4, rng);
    Box scalar = Box::whole({});
    check_copy(scalar, scalar, scalar, 8, rng);
    int64_t n = -1;
    Box empty = whole;
    empty.hi[1] = empty.lo[1];
    gpu::box_copy(nullptr, whole, nullptr, whole, empty, 4, &n);
    EXPECT_EQ(n, 0);
}

}  // namespace
}  // namespace tessera
