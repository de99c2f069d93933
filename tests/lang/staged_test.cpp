// Staged operators (tessera/lang/staged.h) against the plain kernel: the whole
// input is cut into blocks along one index variable, exactly as a partition
// strategy from the table cuts it; each block runs the phases, the test
// combines each crossing stage over the blocks (a sum, or a max) with a plain
// loop, and the blocks' outputs, put back together, must equal the operator
// run whole. The plain kernels are themselves tested against double loops
// (norm_test, softmax_test, conv_test).
#include <algorithm>
#include <cmath>
#include <random>

#include "tessera/lang/staged.h"
#include "tessera/lang/strategy.h"
#include "test_util.h"

namespace tessera::test {
namespace {

// Elements [lo, hi) of dimension d of a row-major tensor, and the inverse.
HostTensor slice(const HostTensor &t, int d, int64_t lo, int64_t hi) {
    Shape s = t.type.shape;
    const int64_t outer = num_elements(Shape(s.begin(), s.begin() + d)),
                  inner = num_elements(Shape(s.begin() + d + 1, s.end())), ext = s[d];
    s[d] = hi - lo;
    HostTensor r(s, t.type.dtype);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t x = lo; x < hi; x++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t from = (o * ext + x) * inner + i, to = (o * (hi - lo) + (x - lo)) * inner + i;
                if (t.type.dtype == DType::F32) r.f[to] = t.f[from];
                else r.i[to] = t.i[from];
            }
    return r;
}

void paste(HostTensor &whole, const HostTensor &part, int d, int64_t lo) {
    const Shape &s = whole.type.shape;
    const int64_t outer = num_elements(Shape(s.begin(), s.begin() + d)),
                  inner = num_elements(Shape(s.begin() + d + 1, s.end())), ext = s[d], n = part.type.shape[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t x = 0; x < n; x++)
            for (int64_t i = 0; i < inner; i++) whole.f[(o * ext + lo + x) * inner + i] = part.f[(o * n + x) * inner + i];
}

const Strategy &strategy_of(const OpCall &call, const std::vector<TensorType> &in, const std::string &var) {
    const OpStrategies *table = strategies_for(call, in);
    EXPECT_NE(table, nullptr) << call.who();
    for (const Strategy &s : table->strategies)
        if (s.var == var) return s;
    ADD_FAILURE() << call.who() << " has no strategy '" << var << "'";
    return table->strategies.front();
}

// Every block's stage becomes the blocks' sum (or max), in block order.
template <typename T>
void combine_blocks(std::vector<HostTensor> &got, std::vector<T> HostTensor::*values, const std::string &reduce) {
    for (size_t e = 0; e < (got[0].*values).size(); e++) {
        T v = (got[0].*values)[e];
        for (size_t b = 1; b < got.size(); b++)
            v = reduce == "max" ? std::max(v, (got[b].*values)[e]) : v + (got[b].*values)[e];
        for (HostTensor &t : got) (t.*values)[e] = v;
    }
}

// Runs `call` staged over `k` equal blocks of index variable `var` and
// returns the outputs put back together. `combine`: false leaves every
// block's stages as they are (to check that the test can fail).
std::vector<HostTensor> run_blocked(const OpCall &call, std::vector<HostTensor> &inputs, const std::string &var,
                                    int k, bool combine = true) {
    std::vector<TensorType> types;
    for (const HostTensor &t : inputs) types.push_back(t.type);
    const Strategy &s = strategy_of(call, types, var);
    EXPECT_FALSE(s.reductions.empty()) << call.who() << " splitting " << var;
    const std::vector<std::string> stages = op_stages(call, types);
    std::vector<std::vector<HostTensor>> block_in(k);
    std::vector<Shape> whole;
    std::vector<std::vector<Shape>> origin(k);
    for (const HostTensor &t : inputs) whole.push_back(t.type.shape);
    for (int b = 0; b < k; b++)
        for (size_t i = 0; i < inputs.size(); i++) {
            Shape o(inputs[i].type.shape.size(), 0);
            if (s.inputs[i].kind != NeedKind::Split) {
                block_in[b].push_back(inputs[i]);
            } else {
                int d = s.inputs[i].dim;
                int64_t part = inputs[i].type.shape[d] / k;
                block_in[b].push_back(slice(inputs[i], d, b * part, (b + 1) * part));
                o[d] = b * part;
            }
            origin[b].push_back(o);
        }
    for (size_t p = 0; p < stages.size(); p++) {
        std::vector<HostTensor> got;
        for (int b = 0; b < k; b++)
            got.push_back(run(staged_call(call, static_cast<int>(p), whole, origin[b]), block_in[b])[0]);
        auto red = std::find_if(s.reductions.begin(), s.reductions.end(),
                                [&](const StageReduction &r) { return r.stage == stages[p]; });
        if (combine && red != s.reductions.end()) {
            if (got[0].type.dtype == DType::F64) combine_blocks(got, &HostTensor::d, red->reduce);
            else combine_blocks(got, &HostTensor::f, red->reduce);
        }
        for (int b = 0; b < k; b++) block_in[b].push_back(got[b]);
    }
    std::vector<HostTensor> outs;
    for (const TensorType &t : infer_types(call, types)) outs.emplace_back(t.shape, t.dtype);
    for (int b = 0; b < k; b++) {
        std::vector<HostTensor> part = run(staged_call(call, static_cast<int>(stages.size()), whole, origin[b]),
                                           block_in[b]);
        for (size_t j = 0; j < outs.size(); j++) {
            if (s.outputs[j].kind == OutKind::Split) {
                int d = s.outputs[j].dim;
                paste(outs[j], part[j], d, b * part[j].type.shape[d]);
            } else if (b == 0) {
                outs[j] = part[j];
            } else {
                EXPECT_EQ(outs[j].f, part[j].f) << call.who() << ": replicated output " << j << " of block " << b;
            }
        }
    }
    return outs;
}

void expect_blocked_equals_whole(const OpCall &call, std::vector<HostTensor> inputs, const std::string &var, int k) {
    SCOPED_TRACE(call.who() + " split " + var + " " + std::to_string(k) + " ways");
    std::vector<HostTensor> want = run(call, inputs);
    std::vector<HostTensor> got = run_blocked(call, inputs, var, k);
    ASSERT_EQ(got.size(), want.size());
    for (size_t j = 0; j < want.size(); j++) expect_near(got[j].f, to_double(want[j].f), 1e-5, 1e-4, "output");
}

OpCall op(OpKind k) { return with_defaults(OpCall{k, "op", {}}); }

TEST(Staged, BatchNormOverTheBatchAndSpace) {
    std::vector<HostTensor> in = {random_tensor({6, 3, 5, 4}, 1, -2, 3), random_tensor({3}, 2, 0.5, 1.5),
                                  random_tensor({3}, 3)};
    for (const char *var : {"n", "h"}) expect_blocked_equals_whole(op(OpKind::BatchNorm), in, var, var[0] == 'n' ? 3 : 5);
    std::vector<HostTensor> dy_x_g = {random_tensor({6, 3, 5, 4}, 4), in[0], in[1]};
    expect_blocked_equals_whole(op(OpKind::BatchNormGrad), dy_x_g, "n", 2);
    expect_blocked_equals_whole(op(OpKind::BatchNormGrad), dy_x_g, "w", 4);
    std::vector<HostTensor> nc = {random_tensor({8, 5}, 5, -2, 3), random_tensor({5}, 6, 0.5, 1.5), random_tensor({5}, 7)};
    expect_blocked_equals_whole(op(OpKind::BatchNorm), nc, "n", 4);
    expect_blocked_equals_whole(op(OpKind::BatchNormGrad), {random_tensor({8, 5}, 8), nc[0], nc[1]}, "n", 4);
}

TEST(Staged, BatchNormStatsOverTheBatchAndSpace) {
    const std::vector<HostTensor> nchw = {random_tensor({6, 3, 5, 4}, 31, -2, 3), random_tensor({3}, 32),
                                          random_tensor({3}, 33, 0.5, 2)};
    expect_blocked_equals_whole(op(OpKind::BatchNormStats), nchw, "n", 3);
    expect_blocked_equals_whole(op(OpKind::BatchNormStats), nchw, "w", 4);
    const std::vector<HostTensor> nc = {random_tensor({8, 5}, 34, -2, 3), random_tensor({5}, 35),
                                        random_tensor({5}, 36, 0.5, 2)};
    expect_blocked_equals_whole(op(OpKind::BatchNormStats), nc, "n", 4);
}

TEST(Staged, SoftmaxFamilyOverTheClasses) {
    HostTensor x = random_tensor({3, 4, 12}, 9, -4, 4), dy = random_tensor({3, 4, 12}, 10);
    expect_blocked_equals_whole(op(OpKind::Softmax), {x}, "d2", 3);
    expect_blocked_equals_whole(op(OpKind::LogSoftmax), {x}, "d2", 4);
    std::vector<HostTensor> xs = {x};
    HostTensor y = run(op(OpKind::Softmax), xs)[0];
    expect_blocked_equals_whole(op(OpKind::SoftmaxGrad), {dy, y}, "d2", 2);
    HostTensor ly = run(op(OpKind::LogSoftmax), xs)[0];
    expect_blocked_equals_whole(op(OpKind::LogSoftmaxGrad), {dy, ly}, "d2", 6);
}

TEST(Staged, CrossEntropyOverTheClassesFindsEveryLabel) {
    // Labels in every block, so each block's origin decides which one picks them.
    HostTensor logits = random_tensor({5, 12}, 11, -3, 3), labels = random_ints({5}, 12, 0, 11);
    labels.i = {0, 11, 5, 6, 3};
    expect_blocked_equals_whole(op(OpKind::SoftmaxXent), {logits, labels}, "c", 3);
    HostTensor dloss = random_tensor({}, 13, 0.5, 1.5);
    expect_blocked_equals_whole(op(OpKind::SoftmaxXentGrad), {logits, labels, dloss}, "c", 4);
}

TEST(Staged, LayerNormOverTheFeatures) {
    HostTensor x = random_tensor({2, 3, 8}, 14, -2, 3), g = random_tensor({8}, 15, 0.5, 1.5), b = random_tensor({8}, 16);
    expect_blocked_equals_whole(op(OpKind::LayerNorm), {x, g, b}, "d2", 4);
    expect_blocked_equals_whole(op(OpKind::LayerNormGrad), {random_tensor({2, 3, 8}, 17), x, g}, "d2", 2);
}

TEST(Staged, GlobalAveragePoolOverSpace) {
    HostTensor x = random_tensor({2, 3, 6, 4}, 18);
    expect_blocked_equals_whole(op(OpKind::GlobalAvgPool), {x}, "h", 3);
    expect_blocked_equals_whole(op(OpKind::GlobalAvgPool), {x}, "w", 2);
}

// Batch norm's gradient on image-like data (README, findings on synchronised
// batch norm): 60% of each channel one background value, the gradient sparse
// as after a max pool. Both the whole kernel and the staged one over 4 batch
// blocks must match a double-precision evaluation of the closed form to float
// rounding, relative to each output's largest element.
TEST(Staged, BatchNormGradOnImageLikeDataMatchesDoubles) {
    const int64_t N = 24, C = 32, HW = 28 * 28, M = N * HW;
    HostTensor x = random_tensor({N, C, 28, 28}, 21, -1, 1), dy = random_tensor({N, C, 28, 28}, 22, -1e-3, 1e-3),
               gamma = random_tensor({C}, 23, 0.5, 1.5);
    std::mt19937 rng(7);
    auto ch = [&](size_t e) { return static_cast<int64_t>(e / HW) % C; };
    for (size_t e = 0; e < x.f.size(); e++) {
        if (rng() % 10 < 6) x.f[e] = -0.5f + 0.01f * static_cast<float>(ch(e));
        if (rng() % 4 != 0) dy.f[e] = 0;
    }
    OpCall call = op(OpKind::BatchNormGrad);
    const double eps = call.attrs.get_float("bn", "eps");
    std::vector<double> mean(C), var(C), sum_dy(C), sum_dy_dev(C);
    for (size_t e = 0; e < x.f.size(); e++) mean[ch(e)] += x.f[e] / double(M);
    for (size_t e = 0; e < x.f.size(); e++) var[ch(e)] += std::pow(x.f[e] - mean[ch(e)], 2) / double(M);
    for (size_t e = 0; e < x.f.size(); e++) {
        sum_dy[ch(e)] += dy.f[e];
        sum_dy_dev[ch(e)] += dy.f[e] * (x.f[e] - mean[ch(e)]);
    }
    std::vector<std::vector<double>> want(3);
    for (size_t e = 0; e < x.f.size(); e++) {
        const int64_t c = ch(e);
        const double rstd = 1 / std::sqrt(var[c] + eps), xhat = (x.f[e] - mean[c]) * rstd;
        want[0].push_back(gamma.f[c] * rstd * (dy.f[e] - (sum_dy[c] + xhat * sum_dy_dev[c] * rstd) / double(M)));
    }
    for (int64_t c = 0; c < C; c++) {
        want[1].push_back(sum_dy_dev[c] / std::sqrt(var[c] + eps));
        want[2].push_back(sum_dy[c]);
    }
    std::vector<HostTensor> in = {dy, x, gamma};
    std::vector<HostTensor> whole = run(call, in), staged = run_blocked(call, in, "n", 4);
    for (int o = 0; o < 3; o++) {
        double largest = 0;
        for (double v : want[o]) largest = std::max(largest, std::abs(v));
        expect_near(whole[o].f, want[o], 5e-5 * largest, 0, "whole kernel");
        expect_near(staged[o].f, want[o], 5e-5 * largest, 0, "staged over 4 batch blocks");
    }
}

// Batch norm's statistics are summed in double and rounded once to float, so
// the float every block reads does not depend on how the sum was split: on
// image-like data (a shared background value per channel, whose normalised
// value a ReLU or a max pool compares), the staged outputs over 2, 3, 4 and 6
// batch blocks and over height equal the whole kernel's bit for bit.
TEST(Staged, BatchNormOutputsDoNotDependOnTheSplit) {
    const int64_t N = 24, C = 4, HW = 12 * 12;
    HostTensor x = random_tensor({N, C, 12, 12}, 31, -1, 1), dy = random_tensor({N, C, 12, 12}, 32);
    std::mt19937 rng(9);
    for (size_t e = 0; e < x.f.size(); e++)
        if (rng() % 10 < 6) x.f[e] = 0.3f + 0.01f * static_cast<float>((e / HW) % C);
    std::vector<HostTensor> fwd = {x, random_tensor({C}, 33, 0.5, 1.5), random_tensor({C}, 34)};
    std::vector<HostTensor> bwd = {dy, x, fwd[1]};
    const std::vector<HostTensor> y = run(op(OpKind::BatchNorm), fwd), grads = run(op(OpKind::BatchNormGrad), bwd);
    for (auto [var, k] : std::vector<std::pair<const char *, int>>{{"n", 2}, {"n", 3}, {"n", 4}, {"n", 6}, {"h", 3}}) {
        SCOPED_TRACE(std::string(var) + " split " + std::to_string(k) + " ways");
        EXPECT_EQ(run_blocked(op(OpKind::BatchNorm), fwd, var, k)[0].f, y[0].f);
        const std::vector<HostTensor> got = run_blocked(op(OpKind::BatchNormGrad), bwd, var, k);
        for (int o = 0; o < 3; o++) EXPECT_EQ(got[o].f, grads[o].f) << "output " << o;
    }
    // Every plane width WResNet's stages reach, and a width no vector divides.
    for (int64_t hw : {1, 2, 4, 8, 16, 7}) {
        std::vector<HostTensor> f2 = {random_tensor({24, C, hw, hw}, 40 + hw, -1, 1), fwd[1], fwd[2]};
        std::vector<HostTensor> b2 = {random_tensor({24, C, hw, hw}, 50 + hw), f2[0], fwd[1]};
        const std::vector<HostTensor> y3 = run(op(OpKind::BatchNorm), f2), g3 = run(op(OpKind::BatchNormGrad), b2);
        for (int k : {2, 3, 4, 8}) {
            SCOPED_TRACE(std::to_string(hw) + "x" + std::to_string(hw) + " planes, split n " + std::to_string(k) + " ways");
            EXPECT_EQ(run_blocked(op(OpKind::BatchNorm), f2, "n", k)[0].f, y3[0].f);
            const std::vector<HostTensor> got = run_blocked(op(OpKind::BatchNormGrad), b2, "n", k);
            for (int o = 0; o < 3; o++) EXPECT_EQ(got[o].f, g3[o].f) << "output " << o;
        }
    }
    // [N, C] (after a fully connected layer): its own schedule.
    std::vector<HostTensor> nc = {random_tensor({24, 7}, 35, -1, 1), random_tensor({7}, 37, 0.5, 1.5),
                                  random_tensor({7}, 38)};
    std::vector<HostTensor> nc_bwd = {random_tensor({24, 7}, 36), nc[0], nc[1]};
    const std::vector<HostTensor> y2 = run(op(OpKind::BatchNorm), nc), g2 = run(op(OpKind::BatchNormGrad), nc_bwd);
    for (int k : {2, 3, 4, 6}) {
        SCOPED_TRACE("[N, C] split n " + std::to_string(k) + " ways");
        EXPECT_EQ(run_blocked(op(OpKind::BatchNorm), nc, "n", k)[0].f, y2[0].f);
        const std::vector<HostTensor> got = run_blocked(op(OpKind::BatchNormGrad), nc_bwd, "n", k);
        for (int o = 0; o < 3; o++) EXPECT_EQ(got[o].f, g2[o].f) << "output " << o;
    }
}

// Without combining the stages each block normalises by its own statistics:
// the comparison above must see that.
TEST(Staged, UncombinedStagesDiffer) {
    std::vector<HostTensor> in = {random_tensor({6, 3, 5, 4}, 1, -2, 3), random_tensor({3}, 2, 0.5, 1.5),
                                  random_tensor({3}, 3)};
    HostTensor want = run(op(OpKind::BatchNorm), in)[0];
    HostTensor got = run_blocked(op(OpKind::BatchNorm), in, "n", 3, false)[0];
    double worst = 0;
    for (size_t e = 0; e < want.f.size(); e++) worst = std::max(worst, double(std::abs(want.f[e] - got.f[e])));
    EXPECT_GT(worst, 1e-2);
}

TEST(Staged, BadStagedCallsAreRefused) {
    OpCall bn = op(OpKind::BatchNorm);
    std::vector<TensorType> in = {{DType::F32, {4, 3}}, {DType::F32, {3}}, {DType::F32, {3}}};
    std::vector<Shape> whole = {{8, 3}, {3}, {3}}, origin = {{4, 0}, {0}, {0}};
    EXPECT_EQ(op_stages(bn, in), (std::vector<std::string>{"sum_x", "sum_sq_dev"}));
    EXPECT_EQ(infer_types(staged_call(bn, 0, whole, origin), in)[0], (TensorType{DType::F64, {3}}));
    expect_error([&] { infer_types(staged_call(bn, 1, whole, origin), in); }, "phase 1 takes the operator's 3 inputs and 1 stage inputs, got 3");
    std::vector<TensorType> with_bad_stage = in;
    with_bad_stage.push_back({DType::F32, {3}});
    expect_error([&] { infer_types(staged_call(bn, 1, whole, origin), with_bad_stage); }, "stage input 0 must be f64[3]");
    expect_error([&] { infer_types(staged_call(bn, 0, {{6, 3}, {3}, {3}}, {{4, 0}, {0}, {0}}), in); },
                 "lies outside its whole shape");
    std::vector<TensorType> three_stages = in;
    for (int s = 0; s < 3; s++) three_stages.push_back({DType::F64, {3}});
    expect_error([&] { infer_types(staged_call(bn, 3, whole, origin), three_stages); }, "phase 3 of an operator with 2 stages");
}

}  // namespace
}  // namespace tessera::test
