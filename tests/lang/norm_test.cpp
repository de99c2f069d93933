// layer_norm and batch_norm against plain double loops; their backward operators
// (all three outputs) against central finite differences of those loops.
#include <cmath>
#include <cstring>

#include "test_util.h"

namespace tessera::test {
namespace {

using Vec = std::vector<double>;

// y = (x - mean) / sqrt(var + eps) * gamma + beta, where each group of elements
// shares one mean and one (biased) variance and group_of(k) names element k's
// group, feature_of(k) its gamma/beta entry.
struct Groups {
    int64_t elements, groups;
    std::function<int64_t(int64_t)> group_of, feature_of;
};

Vec ref_norm(const Groups &g, const Vec &x, const Vec &gamma, const Vec &beta, double eps) {
    Vec sum(g.groups, 0.0), sq(g.groups, 0.0), count(g.groups, 0.0);
    for (int64_t k = 0; k < g.elements; k++) {
        sum[g.group_of(k)] += x[k];
        count[g.group_of(k)] += 1;
    }
    for (int64_t k = 0; k < g.elements; k++) {
        double d = x[k] - sum[g.group_of(k)] / count[g.group_of(k)];
        sq[g.group_of(k)] += d * d;
    }
    Vec y(g.elements);
    for (int64_t k = 0; k < g.elements; k++) {
        int64_t j = g.group_of(k), f = g.feature_of(k);
        double mean = sum[j] / count[j], var = sq[j] / count[j];
        y[k] = (x[k] - mean) / std::sqrt(var + eps) * gamma[f] + beta[f];
    }
    return y;
}

// Layer norm: rows of the last axis.
Groups layer_groups(const Shape &s) {
    int64_t D = s.back(), n = num_elements(s);
    return {n, n / D, [D](int64_t k) { return k / D; }, [D](int64_t k) { return k % D; }};
}

// Batch norm: one group per channel (dim 1).
Groups batch_groups(const Shape &s) {
    int64_t C = s[1], inner = s.size() == 4 ? s[2] * s[3] : 1, n = num_elements(s);
    auto ch = [C, inner](int64_t k) { return (k / inner) % C; };
    return {n, C, ch, ch};
}

OpCall with_eps(OpKind k, double eps) { return {k, "norm", {{"eps", eps}}}; }

// The forward op against the loop, over the given shapes and two values of eps.
void check_forward(OpKind k, const std::vector<Shape> &shapes, Groups (*groups)(const Shape &), int64_t dim) {
    for (const Shape &s : shapes)
        for (double eps : {1e-5, 0.25}) {
            int64_t F = s[dim < 0 ? s.size() - 1 : dim];
            std::vector<HostTensor> in = {random_tensor(s, 1, -2, 2), random_tensor({F}, 2, 0.5, 1.5),
                                          random_tensor({F}, 3)};
            OpCall c = eps == 1e-5 ? OpCall{k, "", {}} : with_eps(k, eps);  // the default, then an explicit eps
            auto y = run(c, in);
            ASSERT_EQ(y[0].type.shape, s);
            Vec want = ref_norm(groups(s), to_double(in[0].f), to_double(in[1].f), to_double(in[2].f), eps);
            expect_near(y[0].f, want, 2e-5, 1e-4, op_name(k));
        }
}

// The backward op's dx, dgamma and dbeta against finite differences of
// loss = dot(dy, forward(x, gamma, beta)).
void check_backward(OpKind bwd, const Shape &s, Groups (*groups)(const Shape &), int64_t dim) {
    const double eps = 1e-3;
    int64_t F = s[dim < 0 ? s.size() - 1 : dim];
    HostTensor x = random_tensor(s, 11, -2, 2), gamma = random_tensor({F}, 12, 0.5, 1.5),
               beta = random_tensor({F}, 13), dy = random_tensor(s, 14);
    std::vector<HostTensor> in = {dy, x, gamma};
    auto out = run(with_eps(bwd, eps), in);
    ASSERT_EQ(out.size(), 3u);
    ASSERT_EQ(out[0].type.shape, s);
    ASSERT_EQ(out[1].type.shape, Shape{F});
    ASSERT_EQ(out[2].type.shape, Shape{F});
    Groups g = groups(s);
    Vec dyd = to_double(dy.f), xd = to_double(x.f), gd = to_double(gamma.f), bd = to_double(beta.f);
    auto fx = [&](const Vec &v) { return dot(dyd, ref_norm(g, v, gd, bd, eps)); };
    auto fg = [&](const Vec &v) { return dot(dyd, ref_norm(g, xd, v, bd, eps)); };
    auto fb = [&](const Vec &v) { return dot(dyd, ref_norm(g, xd, gd, v, eps)); };
    std::string what = std::string(op_name(bwd)) + " " + shape_str(s);
    expect_near(out[0].f, finite_diff(fx, xd), 1e-4, 1e-3, (what + " dx").c_str());
    expect_near(out[1].f, finite_diff(fg, gd), 1e-4, 1e-3, (what + " dgamma").c_str());
    expect_near(out[2].f, finite_diff(fb, bd), 1e-4, 1e-3, (what + " dbeta").c_str());
}


TEST(LayerNorm, ForwardMatchesLoops) {
    check_forward(OpKind::LayerNorm, {{1}, {9}, {1, 1}, {4, 1}, {3, 5}, {2, 3, 7}, {2, 1, 3, 4}, {9, 257}},
                  layer_groups, -1);
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
    for (const Shape &s : std::vector<Shape>{{1, 1}, {3, 1}, {3, 5}, {2, 3, 4}, {2, 1, 2, 3}, {1, 17}, {3, 70}})
        check_backward(OpKind::LayerNormGrad, s, layer_groups, -1);
}

TEST(BatchNorm, ForwardMatchesLoops) {
    // Rank 4 sums and writes rows in vectors of 16, 8 or 4 lanes (AVX-512), or one
    // lane at a time below that: widths 28, 17, 14, 11, 7, 5, 3, 1 cover them.
    check_forward(OpKind::BatchNorm,
                  {{1, 1}, {4, 3}, {1, 5}, {33, 17}, {2, 3, 5, 7}, {3, 2, 1, 1}, {1, 4, 3, 3}, {4, 5, 9, 11},
                   {3, 4, 6, 28}, {2, 3, 4, 17}, {3, 2, 14, 14}, {2, 3, 2, 5}},
                  batch_groups, 1);
}

TEST(BatchNorm, BackwardMatchesFiniteDifferences) {
    for (const Shape &s : std::vector<Shape>{{1, 1}, {5, 3}, {2, 9}, {3, 70}, {2, 3, 3, 2}, {1, 2, 1, 5}, {3, 1, 2, 1},
                                             {2, 2, 1, 19}, {2, 2, 2, 14}, {1, 3, 2, 7}, {2, 1, 1, 28}})
        check_backward(OpKind::BatchNormGrad, s, batch_groups, 1);
}

// batch_norm_stats: running' = momentum * batch + (1 - momentum) * running,
// the batch's variance unbiased (over M - 1; over 1 when M is 1), as
// PyTorch's BatchNorm updates its buffers.
TEST(BatchNormStats, MatchesLoops) {
    for (const Shape &s : std::vector<Shape>{{1, 1}, {4, 3}, {33, 17}, {2, 3, 5, 7}, {1, 2, 1, 1}, {3, 4, 6, 28},
                                             {2, 3, 14, 14}})
        for (double momentum : {0.1, 1.0, 0.37}) {
            const int64_t C = s[1];
            std::vector<HostTensor> in = {random_tensor(s, 21, -2, 3), random_tensor({C}, 22),
                                          random_tensor({C}, 23, 0.5, 2)};
            OpCall c = momentum == 0.1 ? OpCall{OpKind::BatchNormStats, "", {}}  // the default
                                       : OpCall{OpKind::BatchNormStats, "", {{"momentum", momentum}}};
            std::vector<HostTensor> out = run(c, in);
            ASSERT_EQ(out.size(), 2u);
            Groups g = batch_groups(s);
            Vec sum(C, 0.0), sq(C, 0.0), count(C, 0.0);
            for (int64_t k = 0; k < g.elements; k++) {
                sum[g.group_of(k)] += in[0].f[k];
                count[g.group_of(k)] += 1;
            }
            for (int64_t k = 0; k < g.elements; k++) {
                const double d = in[0].f[k] - sum[g.group_of(k)] / count[g.group_of(k)];
                sq[g.group_of(k)] += d * d;
            }
            Vec mean(C), var(C);
            for (int64_t ch = 0; ch < C; ch++) {
                mean[ch] = momentum * sum[ch] / count[ch] + (1 - momentum) * in[1].f[ch];
                var[ch] = momentum * sq[ch] / std::max(count[ch] - 1, 1.0) + (1 - momentum) * in[2].f[ch];
            }
            const std::string what = "batch_norm_stats " + shape_str(s) + " momentum " + std::to_string(momentum);
            expect_near(out[0].f, mean, 1e-5, 1e-5, (what + " mean").c_str());
            expect_near(out[1].f, var, 1e-5, 1e-5, (what + " var").c_str());
        }
}

TEST(Norm, DefaultsFillEps) {
    OpCall c = with_defaults({OpKind::LayerNorm, "ln", {}});
    EXPECT_EQ(c.attrs.get_float("ln", "eps"), 1e-5);
    OpCall kept = with_defaults(with_eps(OpKind::BatchNorm, 0.5));
    EXPECT_EQ(kept.attrs.get_float("norm", "eps"), 0.5);
}

TEST(Norm, KernelsAcceptUnalignedBuffers) {
    for (const Shape &s : std::vector<Shape>{{3, 37}, {2, 70}, {2, 3, 70}, {4, 19, 1, 1}, {2, 3, 5, 37}}) {
        bool batch_ok = s.size() == 2 || s.size() == 4;
        for (bool batch : {false, true}) {
            if (batch && !batch_ok) continue;
            int64_t F = batch ? s[1] : s.back();
            std::vector<HostTensor> fwd = {random_tensor(s, 30), random_tensor({F}, 31), random_tensor({F}, 32)};
            std::vector<HostTensor> bwd = {random_tensor(s, 33), random_tensor(s, 34), random_tensor({F}, 35)};
            expect_same_unaligned({batch ? OpKind::BatchNorm : OpKind::LayerNorm, "", {}}, fwd);
            expect_same_unaligned({batch ? OpKind::BatchNormGrad : OpKind::LayerNormGrad, "", {}}, bwd);
        }
    }
}

// ---- User errors -------------------------------------------------------------------

std::vector<TensorType> f32(std::vector<Shape> shapes) {
    std::vector<TensorType> t;
    for (auto &s : shapes) t.push_back({DType::F32, s});
    return t;
}

TEST(NormErrors, BatchNormStatsMomentum) {
    for (double m : {0.0, -0.5, 1.5, std::nan("")})
        expect_error([&] {
            infer_types({OpKind::BatchNormStats, "bn.stats", {{"momentum", m}}}, f32({{4, 3}, {3}, {3}}));
        }, "batch_norm_stats 'bn.stats': attribute 'momentum' = ");
}

TEST(NormErrors, BatchNormStatsRunningLength) {
    expect_error([] { infer_types({OpKind::BatchNormStats, "bn.stats", {}}, f32({{4, 3, 2, 2}, {3}, {4}})); },
                 "batch_norm_stats 'bn.stats': running_var [4] must have shape [3], one element per channel (dim 1)");
}

TEST(NormErrors, BatchNormRank) {
    expect_error([] { infer_types({OpKind::BatchNorm, "bn1", {}}, f32({{8, 4, 5}, {4}, {4}})); },
                 "batch_norm 'bn1': input 0 (x) must have rank 2 ([N, C]) or 4 ([N, C, H, W]), got shape [8, 4, 5]");
}

TEST(NormErrors, BatchNormGradRank) {
    expect_error([] { infer_types({OpKind::BatchNormGrad, "bn1", {}}, f32({{8}, {8}, {8}})); },
                 "batch_norm_grad 'bn1': input 1 (x) must have rank 2 ([N, C]) or 4 ([N, C, H, W]), got shape [8]");
}

TEST(NormErrors, BatchNormGammaLength) {
    expect_error([] { infer_types({OpKind::BatchNorm, "bn1", {}}, f32({{8, 4, 5, 5}, {3}, {4}})); },
                 "batch_norm 'bn1': gamma [3] must have shape [4], one element per channel (dim 1) of x [8, 4, 5, 5]");
}

TEST(NormErrors, BatchNormBetaLength) {
    expect_error([] { infer_types({OpKind::BatchNorm, "bn1", {}}, f32({{8, 4}, {4}, {4, 1}})); },
                 "batch_norm 'bn1': beta [4, 1] must have shape [4], one element per channel (dim 1) of x [8, 4]");
}

TEST(NormErrors, LayerNormGammaLength) {
    expect_error([] { infer_types({OpKind::LayerNorm, "ln1", {}}, f32({{8, 16, 64}, {32}, {64}})); },
                 "layer_norm 'ln1': gamma [32] must have shape [64], one element per element of the last axis of x "
                 "[8, 16, 64]");
}

TEST(NormErrors, LayerNormGradGammaLength) {
    expect_error([] { infer_types({OpKind::LayerNormGrad, "ln1", {}}, f32({{8, 64}, {8, 64}, {8}})); },
                 "layer_norm_grad 'ln1': gamma [8] must have shape [64]");
}

TEST(NormErrors, LayerNormScalar) {
    expect_error([] { infer_types({OpKind::LayerNorm, "ln", {}}, f32({{}, {1}, {1}})); },
                 "layer_norm 'ln': input 0 (x) must have rank at least 1 (it is normalised over its last axis), got a "
                 "scalar");
}

TEST(NormErrors, GradShapesDiffer) {
    expect_error([] { infer_types({OpKind::LayerNormGrad, "ln", {}}, f32({{4, 8}, {4, 9}, {9}})); },
                 "layer_norm_grad 'ln': input 0 has shape [4, 8] but input 1 has shape [4, 9]; they must match");
}

TEST(NormErrors, NonPositiveEps) {
    for (double eps : {0.0, -1.0})
        expect_error([&] { infer_types(with_eps(OpKind::BatchNorm, eps), f32({{2, 3}, {3}, {3}})); },
                     "attribute 'eps' = " + std::string(eps == 0 ? "0" : "-1") +
                         " must be a positive number (it keeps 1/sqrt(variance + eps) finite); the default is 1e-05");
}

TEST(NormErrors, NonFiniteEps) {
    expect_error([] { infer_types(with_eps(OpKind::LayerNorm, NAN), f32({{2, 3}, {3}, {3}})); },
                 "layer_norm 'norm': attribute 'eps' = nan must be a positive number");
}

TEST(NormErrors, EpsNotANumber) {
    OpCall c{OpKind::LayerNorm, "ln", {{"eps", std::string("small")}}};
    expect_error([&] { infer_types(c, f32({{2, 3}, {3}, {3}})); }, "layer_norm 'ln': attribute 'eps' must be a number");
}

TEST(NormErrors, IntegerInput) {
    expect_error(
        [] {
            infer_types({OpKind::BatchNormGrad, "bn", {}},
                        {{DType::I32, {2, 3}}, {DType::F32, {2, 3}}, {DType::F32, {3}}});
        },
        "batch_norm_grad 'bn': input 0 (dy) must be f32, got i32[2, 3]");
}

TEST(NormErrors, IntegerGamma) {
    expect_error(
        [] { infer_types({OpKind::LayerNorm, "ln", {}}, {{DType::F32, {2, 3}}, {DType::I32, {3}}, {DType::F32, {3}}}); },
        "layer_norm 'ln': input 1 (gamma) must be f32, got i32[3]");
}

}  // namespace
}  // namespace tessera::test
