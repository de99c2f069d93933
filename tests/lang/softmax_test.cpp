// softmax, log_softmax and softmax cross-entropy against plain double loops;
// their backward operators against central finite differences of those loops.
#include <cmath>
#include <cstring>

#include "test_util.h"

namespace tessera::test {
namespace {

// Rows of the last axis, in double: softmax or log_softmax of each.
std::vector<double> ref_softmax(const std::vector<double> &x, int64_t classes, bool log_space) {
    std::vector<double> y(x.size());
    for (size_t base = 0; base < x.size(); base += classes) {
        double mx = -INFINITY, s = 0;
        for (int64_t k = 0; k < classes; k++) mx = std::max(mx, x[base + k]);
        for (int64_t k = 0; k < classes; k++) s += std::exp(x[base + k] - mx);
        for (int64_t k = 0; k < classes; k++)
            y[base + k] = log_space ? x[base + k] - mx - std::log(s) : std::exp(x[base + k] - mx) / s;
    }
    return y;
}

// Mean over the batch of -log_softmax(logits)[label].
double ref_xent(const std::vector<double> &logits, const std::vector<int32_t> &labels, int64_t C) {
    int64_t N = static_cast<int64_t>(labels.size());
    std::vector<double> ls = ref_softmax(logits, C, true);
    double loss = 0;
    for (int64_t n = 0; n < N; n++) loss -= ls[n * C + labels[n]];
    return loss / N;
}


const std::vector<Shape> kShapes = {{1}, {7}, {1, 1}, {3, 5}, {4, 1}, {2, 3, 5}, {2, 1, 3, 4}, {9, 257}, {3, 1000}};

TEST(Softmax, ForwardMatchesLoops) {
    for (const Shape &s : kShapes)
        for (bool log_space : {false, true}) {
            std::vector<HostTensor> in = {random_tensor(s, 1, -4, 4)};
            OpKind k = log_space ? OpKind::LogSoftmax : OpKind::Softmax;
            auto y = run({k, "sm", {}}, in);
            ASSERT_EQ(y[0].type.shape, s);
            expect_near(y[0].f, ref_softmax(to_double(in[0].f), s.back(), log_space), 1e-6, 1e-5, op_name(k));
        }
}

// Logits far from zero would overflow exp() without the maximum subtracted.
TEST(Softmax, LargeLogitsStayFinite) {
    HostTensor x = random_tensor({4, 33}, 2, -5, 5);
    for (size_t k = 0; k < x.f.size(); k++) x.f[k] += (k % 2 ? 1000.0f : -1000.0f) * float(k / 33 + 1);
    for (bool log_space : {false, true}) {
        std::vector<HostTensor> in = {x};
        auto y = run({log_space ? OpKind::LogSoftmax : OpKind::Softmax, "", {}}, in);
        for (float v : y[0].f) ASSERT_TRUE(std::isfinite(v));
        expect_near(y[0].f, ref_softmax(to_double(x.f), 33, log_space), 1e-5, 1e-5, "large logits");
    }
}

TEST(Softmax, BackwardMatchesFiniteDifferences) {
    for (const Shape &s : std::vector<Shape>{{1}, {6}, {3, 5}, {2, 3, 4}, {2, 1, 1, 3}})
        for (bool log_space : {false, true}) {
            HostTensor x = random_tensor(s, 3, -2, 2), dy = random_tensor(s, 4);
            std::vector<HostTensor> fwd = {x};
            HostTensor y = run({log_space ? OpKind::LogSoftmax : OpKind::Softmax, "", {}}, fwd)[0];
            std::vector<HostTensor> in = {dy, y};
            OpKind gk = log_space ? OpKind::LogSoftmaxGrad : OpKind::SoftmaxGrad;
            auto dx = run({gk, "", {}}, in);
            std::vector<double> dyd = to_double(dy.f);
            auto loss = [&](const std::vector<double> &xs) { return dot(dyd, ref_softmax(xs, s.back(), log_space)); };
            expect_near(dx[0].f, finite_diff(loss, to_double(x.f)), 1e-5, 1e-4, op_name(gk));
        }
}

struct XentCase {
    int64_t N, C;
};

const std::vector<XentCase> kXent = {{1, 1}, {1, 7}, {5, 1}, {8, 10}, {33, 129}, {3, 1000}};

TEST(SoftmaxXent, ForwardMatchesLoops) {
    for (XentCase xc : kXent) {
        std::vector<HostTensor> in = {random_tensor({xc.N, xc.C}, 5, -3, 3),
                                      random_ints({xc.N}, 6, 0, int(xc.C - 1))};
        in[1].i[0] = int32_t(xc.C - 1);  // both ends of the class range
        if (xc.N > 1) in[1].i[1] = 0;
        auto loss = run({OpKind::SoftmaxXent, "loss", {}}, in);
        ASSERT_EQ(loss[0].type.shape, Shape{});
        expect_near(loss[0].f, {ref_xent(to_double(in[0].f), in[1].i, xc.C)}, 1e-5, 1e-5, "softmax_xent");
    }
}

TEST(SoftmaxXent, LargeLogitsStayAccurate) {
    const int64_t N = 4, C = 9;
    std::vector<HostTensor> in = {random_tensor({N, C}, 10, -3, 3), random_ints({N}, 11, 0, int(C - 1))};
    for (size_t k = 0; k < in[0].f.size(); k++) in[0].f[k] += 3000.0f * float(k / C % 2 ? 1 : -1);
    auto loss = run({OpKind::SoftmaxXent, "", {}}, in);
    expect_near(loss[0].f, {ref_xent(to_double(in[0].f), in[1].i, C)}, 1e-5, 1e-5, "large logits");
}

TEST(SoftmaxXent, BackwardMatchesFiniteDifferences) {
    for (XentCase xc : std::vector<XentCase>{{1, 1}, {1, 5}, {4, 1}, {6, 7}, {3, 33}}) {
        HostTensor logits = random_tensor({xc.N, xc.C}, 7, -2, 2);
        HostTensor labels = random_ints({xc.N}, 8, 0, int(xc.C - 1));
        HostTensor dloss(Shape{});
        dloss.f[0] = 0.7f;
        std::vector<HostTensor> in = {logits, labels, dloss};
        auto dlogits = run({OpKind::SoftmaxXentGrad, "loss", {}}, in);
        ASSERT_EQ(dlogits[0].type.shape, (Shape{xc.N, xc.C}));
        auto loss = [&](const std::vector<double> &l) { return 0.7 * ref_xent(l, labels.i, xc.C); };
        expect_near(dlogits[0].f, finite_diff(loss, to_double(logits.f)), 1e-5, 1e-4, "softmax_xent_grad");
    }
}

// Labels are data, so a bad one cannot be refused from shapes: it is clamped into
// [0, C) rather than read out of bounds.
TEST(SoftmaxXent, OutOfRangeLabelsAreClamped) {
    const int64_t N = 3, C = 6;
    HostTensor logits = random_tensor({N, C}, 9, -2, 2);
    HostTensor bad({N}, DType::I32), clamped({N}, DType::I32);
    bad.i = {-4, 2, 1000};
    clamped.i = {0, 2, int32_t(C - 1)};
    HostTensor dloss(Shape{});
    dloss.f[0] = 1.0f;
    std::vector<HostTensor> a = {logits, bad}, b = {logits, clamped};
    EXPECT_EQ(run({OpKind::SoftmaxXent, "", {}}, a)[0].f, run({OpKind::SoftmaxXent, "", {}}, b)[0].f);
    std::vector<HostTensor> ga = {logits, bad, dloss}, gb = {logits, clamped, dloss};
    EXPECT_EQ(run({OpKind::SoftmaxXentGrad, "", {}}, ga)[0].f, run({OpKind::SoftmaxXentGrad, "", {}}, gb)[0].f);
}

TEST(SoftmaxFamily, KernelsAcceptUnalignedBuffers) {
    for (const Shape &s : std::vector<Shape>{{5}, {3, 37}, {2, 2, 70}}) {
        std::vector<HostTensor> x = {random_tensor(s, 20, -3, 3)}, grad = {random_tensor(s, 21), random_tensor(s, 22)};
        for (OpKind k : {OpKind::Softmax, OpKind::LogSoftmax}) expect_same_unaligned({k, "", {}}, x);
        for (OpKind k : {OpKind::SoftmaxGrad, OpKind::LogSoftmaxGrad}) expect_same_unaligned({k, "", {}}, grad);
    }
    HostTensor dloss(Shape{});
    dloss.f[0] = 1.5f;
    std::vector<HostTensor> xent = {random_tensor({6, 37}, 23), random_ints({6}, 24, 0, 36), dloss};
    expect_same_unaligned({OpKind::SoftmaxXentGrad, "", {}}, xent);
    xent.pop_back();
    expect_same_unaligned({OpKind::SoftmaxXent, "", {}}, xent);
}

// ---- User errors -------------------------------------------------------------------

std::vector<TensorType> types(std::vector<TensorType> t) { return t; }

TEST(SoftmaxErrors, ScalarInput) {
    expect_error([] { infer_types({OpKind::Softmax, "attn", {}}, types({{DType::F32, {}}})); },
                 "softmax 'attn': input 0 (x) must have rank at least 1 (the classes are its last axis), got a scalar");
}

TEST(SoftmaxErrors, IntegerInput) {
    expect_error([] { infer_types({OpKind::LogSoftmax, "ls", {}}, types({{DType::I32, {2, 3}}})); },
                 "log_softmax 'ls': input 0 (x) must be f32, got i32[2, 3]");
}

TEST(SoftmaxErrors, GradShapesDiffer) {
    expect_error(
        [] { infer_types({OpKind::SoftmaxGrad, "sm", {}}, types({{DType::F32, {2, 3}}, {DType::F32, {2, 4}}})); },
        "softmax_grad 'sm': input 0 has shape [2, 3] but input 1 has shape [2, 4]; they must match");
}

TEST(SoftmaxErrors, GradIntegerOutput) {
    expect_error(
        [] { infer_types({OpKind::LogSoftmaxGrad, "", {}}, types({{DType::F32, {3}}, {DType::I32, {3}}})); },
        "log_softmax_grad: input 1 (y) must be f32");
}

TEST(SoftmaxErrors, GradScalar) {
    expect_error([] { infer_types({OpKind::SoftmaxGrad, "", {}}, types({{DType::F32, {}}, {DType::F32, {}}})); },
                 "input 0 (dy) must have rank at least 1");
}

TEST(SoftmaxXentErrors, LogitsNotMatrix) {
    expect_error(
        [] { infer_types({OpKind::SoftmaxXent, "loss", {}}, types({{DType::F32, {2, 3, 4}}, {DType::I32, {2}}})); },
        "softmax_xent 'loss': input 0 (logits) must have rank 2, got shape [2, 3, 4]");
}

TEST(SoftmaxXentErrors, FloatLabels) {
    expect_error(
        [] { infer_types({OpKind::SoftmaxXent, "loss", {}}, types({{DType::F32, {2, 3}}, {DType::F32, {2}}})); },
        "softmax_xent 'loss': input 1 (labels) must be i32, got f32[2]");
}

TEST(SoftmaxXentErrors, LabelsNotVector) {
    expect_error(
        [] { infer_types({OpKind::SoftmaxXent, "loss", {}}, types({{DType::F32, {2, 3}}, {DType::I32, {2, 1}}})); },
        "input 1 (labels) must have rank 1, got shape [2, 1]");
}

TEST(SoftmaxXentErrors, LabelCountMismatch) {
    expect_error(
        [] { infer_types({OpKind::SoftmaxXent, "loss", {}}, types({{DType::F32, {8, 10}}, {DType::I32, {7}}})); },
        "softmax_xent 'loss': labels [7] have 7 entries but logits [8, 10] have a batch of 8; expected one label per row");
}

TEST(SoftmaxXentErrors, GradLossNotScalar) {
    expect_error(
        [] {
            infer_types({OpKind::SoftmaxXentGrad, "loss", {}},
                        types({{DType::F32, {8, 10}}, {DType::I32, {8}}, {DType::F32, {1}}}));
        },
        "softmax_xent_grad 'loss': input 2 (dloss) must be a scalar of shape [], got shape [1]");
}

TEST(SoftmaxXentErrors, GradLossNotFloat) {
    expect_error(
        [] {
            infer_types({OpKind::SoftmaxXentGrad, "loss", {}},
                        types({{DType::F32, {8, 10}}, {DType::I32, {8}}, {DType::I32, {}}}));
        },
        "input 2 (dloss) must be f32");
}

}  // namespace
}  // namespace tessera::test
