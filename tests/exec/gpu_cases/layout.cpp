// Cases for the layout family: every axis of small tensors with odd extents,
// negative axes, size-1 dimensions, and permutations that the kernels reduce
// (dropped extent-1 dimensions, merged runs) as well as ones they keep whole.
#include "cases.h"

namespace tessera::test {

namespace {

using Ints = std::vector<int64_t>;

TensorType f32(const Shape &s) { return {DType::F32, s}; }

GpuCase one(const std::string &label, OpKind k, Attrs attrs, std::vector<TensorType> in, double tol = 0) {
    GpuCase c{label, {k, label, std::move(attrs)}, std::move(in), {}, tol, tol};
    return c;
}

}  // namespace

std::vector<GpuCase> gpu_cases_layout() {
    std::vector<GpuCase> v;
    // Data movement is exact.
    auto permute = [&](const Shape &s, const Ints &perm, const std::string &what) {
        v.push_back(one("permute " + what, OpKind::Permute, {{"perm", perm}}, {f32(s)}));
    };
    permute({9}, {0}, "rank1");
    permute({5, 7}, {1, 0}, "transpose");
    permute({3, 4, 5}, {0, 1, 2}, "identity");
    permute({3, 4, 5}, {2, 0, 1}, "201");
    permute({3, 4, 5}, {1, 2, 0}, "120 (merged run)");
    permute({3, 4, 5}, {0, 2, 1}, "021");
    permute({3, 4, 5}, {2, 1, 0}, "210");
    permute({2, 3, 4, 5}, {0, 2, 3, 1}, "nchw->nhwc");
    permute({2, 3, 4, 5}, {3, 1, 2, 0}, "3120");
    permute({2, 3, 4, 5}, {1, 3, 0, 2}, "1302 four blocks");
    permute({3, 1, 4, 1, 5}, {4, 2, 0, 1, 3}, "size-1 dims");
    permute({1, 1, 6}, {2, 1, 0}, "only one real dim");
    permute({2, 3, 1, 4, 5, 6}, {0, 1, 2, 5, 3, 4}, "rank6 reduced to two blocks");

    v.push_back(one("reshape 3d->2d", OpKind::Reshape, {{"shape", Ints{12, -1}}}, {f32({3, 4, 5})}));
    v.push_back(one("reshape 1d->3d", OpKind::Reshape, {{"shape", Ints{3, 4, 5}}}, {f32({60})}));

    v.push_back(one("concat axis0", OpKind::Concat, {{"axis", int64_t{0}}}, {f32({2, 5}), f32({3, 5})}));
    v.push_back(one("concat rank1", OpKind::Concat, {{"axis", int64_t{0}}}, {f32({7}), f32({1}), f32({4})}));
    v.push_back(one("concat axis1 three", OpKind::Concat, {{"axis", int64_t{1}}},
                    {f32({3, 2, 5}), f32({3, 4, 5}), f32({3, 1, 5})}));
    v.push_back(one("concat axis-1 four", OpKind::Concat, {{"axis", int64_t{-1}}},
                    {f32({2, 3, 1}), f32({2, 3, 7}), f32({2, 3, 2}), f32({2, 3, 5})}));

    v.push_back(one("slice rank1", OpKind::Slice, {{"axis", int64_t{0}}, {"start", int64_t{3}}, {"end", int64_t{8}}},
                    {f32({11})}));
    v.push_back(one("slice axis0", OpKind::Slice, {{"axis", int64_t{0}}, {"start", int64_t{1}}, {"end", int64_t{3}}},
                    {f32({4, 3, 5})}));
    v.push_back(one("slice axis1", OpKind::Slice, {{"axis", int64_t{1}}, {"start", int64_t{2}}, {"end", int64_t{5}}},
                    {f32({3, 7, 5})}));
    v.push_back(one("slice axis-1 one element", OpKind::Slice,
                    {{"axis", int64_t{-1}}, {"start", int64_t{6}}, {"end", int64_t{7}}}, {f32({3, 2, 7})}));

    v.push_back(one("slice_grad rank1", OpKind::SliceGrad,
                    {{"axis", int64_t{0}}, {"start", int64_t{3}}, {"extent", int64_t{11}}}, {f32({5})}));
    v.push_back(one("slice_grad axis1", OpKind::SliceGrad,
                    {{"axis", int64_t{1}}, {"start", int64_t{2}}, {"extent", int64_t{9}}}, {f32({3, 4, 5})}));
    v.push_back(one("slice_grad axis-1 at the end", OpKind::SliceGrad,
                    {{"axis", int64_t{-1}}, {"start", int64_t{4}}, {"extent", int64_t{7}}}, {f32({2, 3, 3})}));
    v.push_back(one("slice_grad axis0 whole", OpKind::SliceGrad,
                    {{"axis", int64_t{0}}, {"start", int64_t{0}}, {"extent", int64_t{3}}}, {f32({3, 5})}));

    // Sums: the CPU kernel sums along the innermost axis in vector lanes, so
    // the order differs there.
    const double sum_tol = 1e-5;
    auto reduce = [&](const Shape &s, int64_t axis, int64_t keep, const std::string &what) {
        Attrs a{{"axis", axis}};
        if (keep >= 0) a.set("keepdims", keep);
        v.push_back(one("reduce_sum " + what, OpKind::ReduceSum, a, {f32(s)}, sum_tol));
    };
    reduce({13}, 0, -1, "rank1");
    reduce({3, 4, 5}, 0, -1, "axis0");
    reduce({3, 4, 5}, 1, 0, "axis1");
    reduce({3, 4, 5}, 2, -1, "axis2 innermost");
    reduce({3, 4, 5}, -2, 1, "axis-2 keepdims");
    reduce({3, 4, 5}, 2, 1, "innermost keepdims");
    reduce({2, 3, 1, 301}, -1, -1, "long rows");
    reduce({2, 301, 3}, 1, -1, "long columns");
    reduce({4, 1, 6}, 1, -1, "size-1 axis");

    auto bcast = [&](const Shape &s, int64_t axis, int64_t extent, const std::string &what) {
        v.push_back(one("broadcast " + what, OpKind::Broadcast, {{"axis", axis}, {"extent", extent}}, {f32(s)}));
    };
    bcast({}, 0, 5, "scalar");
    bcast({7}, 0, 3, "rank1 axis0");
    bcast({7}, 1, 3, "rank1 axis1");
    bcast({3, 5}, 0, 4, "axis0");
    bcast({3, 5}, 1, 4, "axis1");
    bcast({3, 5}, 2, 4, "axis2 innermost");
    bcast({2, 3, 5}, -1, 1, "axis-1 extent1");
    bcast({2, 3, 5}, -2, 6, "axis-2");
    return v;
}

}  // namespace tessera::test
