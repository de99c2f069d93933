// Cases for the norm family: layer norm at every rank the CPU kernel folds to
// [rows, D] (1 to 4, D = 1 and odd widths), batch norm in both layouts, and a
// non-default eps. Rows and channels of a few hundred elements sum in float in
// slightly different orders on the two sides (the CPU kernel vectorises its
// sums), hence the looser tolerances.
#include "cases.h"

namespace tessera::test {

namespace {

GpuCase norm_case(const std::string &label, OpKind k, const Shape &x, int feature_dim, double eps = 0) {
    OpCall call{k, label, {}};
    if (eps > 0) call.attrs.set("eps", eps);
    const int64_t F = x[feature_dim < 0 ? x.size() - 1 : feature_dim];
    const bool grad = k == OpKind::LayerNormGrad || k == OpKind::BatchNormGrad;
    std::vector<TensorType> in = grad ? std::vector<TensorType>{{DType::F32, x}, {DType::F32, x}, {DType::F32, {F}}}
                                      : std::vector<TensorType>{{DType::F32, x}, {DType::F32, {F}}, {DType::F32, {F}}};
    GpuCase c{label, call, in, {}, 1e-4, 1e-5};
    // The backward's dx subtracts nearly equal terms; its absolute error
    // follows the magnitude of the terms, not of the result.
    if (grad) c.atol = 1e-4;
    return c;
}

}  // namespace

std::vector<GpuCase> gpu_cases_norm() {
    std::vector<GpuCase> v;
    for (OpKind k : {OpKind::LayerNorm, OpKind::LayerNormGrad}) {
        const std::string p = op_name(k);
        v.push_back(norm_case(p + " rank1", k, {37}, -1));
        v.push_back(norm_case(p + " rank2", k, {5, 37}, -1));
        v.push_back(norm_case(p + " rank3 eps", k, {2, 3, 33}, -1, 0.25));
        v.push_back(norm_case(p + " rank4 size-1 dim", k, {2, 1, 3, 17}, -1));
        v.push_back(norm_case(p + " D=1", k, {6, 1}, -1));
        v.push_back(norm_case(p + " long rows", k, {3, 301}, -1));
    }
    for (OpKind k : {OpKind::BatchNorm, OpKind::BatchNormGrad}) {
        const std::string p = op_name(k);
        v.push_back(norm_case(p + " nc", k, {7, 5}, 1));
        v.push_back(norm_case(p + " nc eps", k, {33, 3}, 1, 0.25));
        v.push_back(norm_case(p + " nchw", k, {3, 4, 5, 7}, 1));
        v.push_back(norm_case(p + " nchw small planes", k, {2, 3, 14, 14}, 1));
        v.push_back(norm_case(p + " nchw one per channel", k, {1, 3, 1, 1}, 1));
        v.push_back(norm_case(p + " nchw odd", k, {5, 1, 3, 9}, 1, 0.01));
    }
    // The running statistics: the last case has one value per channel (M = 1).
    for (const Shape &x : std::vector<Shape>{{7, 5}, {3, 4, 5, 7}, {2, 3, 14, 14}, {1, 3, 1, 1}}) {
        OpCall call{OpKind::BatchNormStats, "batch_norm_stats " + shape_str(x), {{"momentum", 0.25}}};
        const TensorType f{DType::F32, {x[1]}};
        v.push_back(GpuCase{call.name, call, {{DType::F32, x}, f, f}, {}, 1e-4, 1e-5});
    }
    return v;
}

}  // namespace tessera::test
