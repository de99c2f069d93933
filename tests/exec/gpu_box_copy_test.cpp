// The GPU box copy's kernel body (exec/src/gpu/box_copy.h), run on the host
// through the execution context, against graph/box.h's copy_box: random
// boxes of every rank up to 5, elements of 4 and 8 bytes, regions at every
// corner; and a scalar (rank 0).
#include "gpu/box_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
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
    BoxCopyArgs a{src.data(), from, false, got.data(), to, false, region, elem, 0, region.elements()};
    gpu::HostExec ex(0);
    ex.for_each(a.count, gpu::box_copy(a));
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
}

// Chunks of a region packed into a dense run and unpacked again, as a
// collective's send and receive do: the run holds the region's elements in
// row-major order, and unpacking every chunk rebuilds copy_box's result.
TEST(GpuBoxCopy, ChunksPackAndUnpackInRegionOrder) {
    std::mt19937 rng(11);
    const Box from = Box::whole({5, 6, 7}), to{{1, 0, 2}, {6, 4, 9}};
    const Box region{{1, 1, 2}, {5, 4, 7}};
    std::vector<float> src(static_cast<size_t>(from.elements())), want(static_cast<size_t>(to.elements()), -1.0f);
    for (float &v : src) v = static_cast<float>(rng() % 1000);
    std::vector<float> got = want, packed_whole(static_cast<size_t>(region.elements()));
    copy_box(src.data(), from, want.data(), to, region, 4);
    copy_box(src.data(), from, packed_whole.data(), region, region, 4);
    gpu::HostExec ex(0);
    const int64_t n = region.elements(), chunk = 7;
    for (int64_t first = 0; first < n; first += chunk) {
        const int64_t count = std::min(chunk, n - first);
        std::vector<float> run(static_cast<size_t>(count));
        BoxCopyArgs pack{src.data(), from, false, run.data(), Box{}, true, region, 4, first, count};
        ex.for_each(count, gpu::box_copy(pack));
        EXPECT_EQ(run, std::vector<float>(packed_whole.begin() + first, packed_whole.begin() + first + count));
        BoxCopyArgs unpack{run.data(), Box{}, true, got.data(), to, false, region, 4, first, count};
        ex.for_each(count, gpu::box_copy(unpack));
    }
    EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace tessera
