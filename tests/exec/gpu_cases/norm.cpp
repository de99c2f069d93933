// Cases for the norm family: layer norm at every rank the CPU kernel folds to
// [rows, D] (1 to 4, D = 1 and odd widths), batch norm in both layouts, and a
// non-default eps. Rows and channels of a few hundred elements sum in float in
// slightly different orders on the two sides (the CPU kernel vectorises its
// sums; the GPU's batch norm sums in lanes), hence the looser tolerances. A
// test below runs batch norm through a workspace too small for all its
// channels, so that they are processed in chunks.
#include <cmath>

#include <gtest/gtest.h>

#include "cases.h"
#include "gpu/ops_norm.h"

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
        v.push_back(norm_case(p + " more rows than lanes", k, {70, 9}, -1));  // 32 lanes
        v.push_back(norm_case(p + " a column lane every 32 rows", k, {3000, 5}, -1));  // 93 lanes
    }
    for (OpKind k : {OpKind::BatchNorm, OpKind::BatchNormGrad}) {
        const std::string p = op_name(k);
        v.push_back(norm_case(p + " nc", k, {7, 5}, 1));
        v.push_back(norm_case(p + " nc eps", k, {33, 3}, 1, 0.25));
        v.push_back(norm_case(p + " nchw", k, {3, 4, 5, 7}, 1));
        v.push_back(norm_case(p + " nchw small planes", k, {2, 3, 14, 14}, 1));
        v.push_back(norm_case(p + " nchw one per channel", k, {1, 3, 1, 1}, 1));
        v.push_back(norm_case(p + " nchw odd", k, {5, 1, 3, 9}, 1, 0.01));
        // More values per channel than lanes (256): each lane adds several.
        v.push_back(norm_case(p + " nchw many per lane", k, {4, 3, 20, 20}, 1));
        v.push_back(norm_case(p + " nc many per lane", k, {600, 2}, 1));
        // The lanes' walk across planes larger and smaller than the 256
        // lanes (a lane steps 4 planes at a time in the second).
        v.push_back(norm_case(p + " nchw planes wider than the lanes", k, {4, 2, 64, 80}, 1));
        v.push_back(norm_case(p + " nchw more lanes than a plane", k, {300, 2, 8, 8}, 1));
    }
    // The running statistics: the last case has one value per channel (M = 1).
    for (const Shape &x : std::vector<Shape>{{7, 5}, {3, 4, 5, 7}, {2, 3, 14, 14}, {1, 3, 1, 1}, {4, 3, 20, 20}}) {
        OpCall call{OpKind::BatchNormStats, "batch_norm_stats " + shape_str(x), {{"momentum", 0.25}}};
        const TensorType f{DType::F32, {x[1]}};
        v.push_back(GpuCase{call.name, call, {{DType::F32, x}, f, f}, {}, 1e-4, 1e-5});
    }
    return v;
}

// Batch norm with 5 channels of 297 values each (more than the 256 lanes),
// through workspaces that hold 1 to 4 channels' statistics and partial sums:
// every output equals the one-chunk run exactly (a channel's sums do not
// depend on the chunk it is in) and the CPU kernel within the tolerances.
TEST(GpuKernelsHostNorm, SmallWorkspaceChunksTheChannels) {
    const Shape shape{3, 5, 9, 11};
    const TensorType x_type{DType::F32, shape}, c_type{DType::F32, {5}};
    std::vector<float> x(x_type.elements()), dy(x_type.elements()), gamma(5), beta(5), mean(5), var(5);
    spread(x, 0, -2.0f, 3.0f);
    spread(dy, 1, -1.0f, 1.0f);
    spread(gamma, 2, 0.5f, 1.5f);
    spread(beta, 3, -0.5f, 0.5f);
    spread(mean, 4, -0.1f, 0.1f);
    spread(var, 5, 0.5f, 1.5f);
    const TensorRef X{x.data(), x_type}, DY{dy.data(), x_type}, G{gamma.data(), c_type}, B{beta.data(), c_type},
        MEAN{mean.data(), c_type}, VAR{var.data(), c_type};
    struct Run {
        OpCall call;
        std::vector<TensorRef> in;
    };
    const Run runs[] = {{{OpKind::BatchNorm, "bn", {}}, {X, G, B}},
                        {{OpKind::BatchNormGrad, "bn_grad", {}}, {DY, X, G}},
                        {{OpKind::BatchNormStats, "bn_stats", {{"momentum", 0.25}}}, {X, MEAN, VAR}}};
    for (const Run &r : runs) {
        SCOPED_TRACE(r.call.name);
        std::vector<TensorType> types;
        for (const TensorRef &t : r.in) types.push_back(t.type);
        const std::vector<TensorType> outs = infer_types(r.call, types);
        auto run = [&](auto &&kernel) {
            std::vector<std::vector<float>> bufs;
            std::vector<TensorRef> refs;
            for (const TensorType &t : outs) bufs.emplace_back(t.elements(), std::nanf(""));
            for (size_t o = 0; o < outs.size(); o++) refs.push_back({bufs[o].data(), outs[o]});
            kernel(refs);
            return bufs;
        };
        const auto want = run([&](const std::vector<TensorRef> &o) { run_op(r.call, r.in, o); });
        const auto whole = run([&](const std::vector<TensorRef> &o) {
            gpu::HostExec ex;
            gpu::run_norm(ex, r.call, r.in, o);
        });
        for (size_t floats : {600, 1100, 1300}) {  // 2 to 4 channels, 1 or 2 with two sums
            SCOPED_TRACE(floats);
            const auto got = run([&](const std::vector<TensorRef> &o) {
                gpu::HostExec ex(floats * sizeof(float));
                gpu::run_norm(ex, r.call, r.in, o);
            });
            for (size_t o = 0; o < outs.size(); o++)
                for (size_t e = 0; e < got[o].size(); e++) {
                    ASSERT_EQ(got[o][e], whole[o][e]) << "output " << o << " element " << e;
                    EXPECT_NEAR(got[o][e], want[o][e], 1e-4 + 1e-4 * std::fabs(want[o][e]))
                        << "output " << o << " element " << e;
                }
        }
    }
}

// Layer norm's backward, 70 rows of 9, through workspaces that hold the 32
// lanes' column sums and 1 to 31 rows' statistics and row lanes (68 floats a
// row): the rows are processed in chunks, each adding to dgamma and dbeta,
// within the tolerances of the CPU.
TEST(GpuKernelsHostNorm, SmallWorkspaceChunksTheRowsOfTheLayerNormGradient) {
    const TensorType x_type{DType::F32, {70, 9}}, g_type{DType::F32, {9}};
    std::vector<float> x(x_type.elements()), dy(x_type.elements()), gamma(9);
    spread(x, 0, -2.0f, 3.0f);
    spread(dy, 1, -1.0f, 1.0f);
    spread(gamma, 2, 0.5f, 1.5f);
    const OpCall call{OpKind::LayerNormGrad, "ln_grad", {}};
    const std::vector<TensorRef> in{{dy.data(), x_type}, {x.data(), x_type}, {gamma.data(), g_type}};
    const std::vector<TensorType> outs{x_type, g_type, g_type};
    std::vector<std::vector<float>> want;
    std::vector<TensorRef> want_refs;
    for (const TensorType &t : outs) want.emplace_back(t.elements());
    for (size_t o = 0; o < outs.size(); o++) want_refs.push_back({want[o].data(), outs[o]});
    run_op(call, in, want_refs);
    for (size_t floats : {650, 2690, 5400}) {  // 576 + 68 a row: 1, 31 and all 70 rows a chunk
        SCOPED_TRACE(floats);
        std::vector<std::vector<float>> got;
        std::vector<TensorRef> refs;
        for (const TensorType &t : outs) got.emplace_back(t.elements(), std::nanf(""));
        for (size_t o = 0; o < outs.size(); o++) refs.push_back({got[o].data(), outs[o]});
        gpu::HostExec ex(floats * sizeof(float));
        gpu::run_norm(ex, call, in, refs);
        for (size_t o = 0; o < outs.size(); o++)
            for (size_t e = 0; e < got[o].size(); e++)
                EXPECT_NEAR(got[o][e], want[o][e], 1e-4 + 1e-4 * std::fabs(want[o][e]))
                    << "output " << o << " element " << e;
    }
}

}  // namespace tessera::test
