// Element-wise operators and bias broadcast against plain loops; backward
// operators against central finite differences of double-precision loops.
#include <algorithm>
#include <cmath>

#include "test_util.h"

namespace tessera::test {
namespace {

const std::vector<Shape> kShapes = {{1}, {7}, {3, 5}, {1, 1, 1}, {2, 3, 5, 7}, {4099}};

double gelu(double x) { return 0.5 * x * (1 + std::tanh(kGeluC * (x + kGeluA * x * x * x))); }
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

struct Unary {
    OpKind fwd, grad;
    std::function<double(double)> f;
    bool grad_takes_output;  // tanh_grad / sigmoid_grad take y, the others x
};

const std::vector<Unary> kUnary = {
    {OpKind::Relu, OpKind::ReluGrad, [](double x) { return x > 0 ? x : 0.0; }, false},
    {OpKind::Gelu, OpKind::GeluGrad, gelu, false},
    {OpKind::Tanh, OpKind::TanhGrad, [](double x) { return std::tanh(x); }, true},
    {OpKind::Sigmoid, OpKind::SigmoidGrad, sigmoid, true},
    {OpKind::Erf, OpKind::ErfGrad, [](double x) { return std::erf(x); }, false},
};

TEST(Elementwise, UnaryForward) {
    for (const Unary &u : kUnary)
        for (const Shape &s : kShapes) {
            std::vector<HostTensor> in = {random_tensor(s, 11, -3, 3)};
            auto out = run({u.fwd, "act", {}}, in);
            std::vector<double> want;
            for (float v : in[0].f) want.push_back(u.f(v));
            expect_near(out[0].f, want, 1e-6, 1e-5, op_name(u.fwd));
        }
}

TEST(Elementwise, UnaryBackwardMatchesFiniteDifferences) {
    for (const Unary &u : kUnary) {
        Shape s = {3, 7};
        HostTensor x = random_tensor(s, 12, -3, 3);
        for (float &v : x.f)  // keep relu's kink away from the difference step
            if (std::abs(v) < 1e-2) v = 0.5f;
        HostTensor dy = random_tensor(s, 13);
        std::vector<HostTensor> fwd_in = {x};
        HostTensor y = run({u.fwd, "act", {}}, fwd_in)[0];
        std::vector<HostTensor> in = {dy, u.grad_takes_output ? y : x};
        auto dx = run({u.grad, "act", {}}, in);
        std::vector<double> dyd = to_double(dy.f);
        auto loss = [&](const std::vector<double> &xs) {
            std::vector<double> ys;
            for (double v : xs) ys.push_back(u.f(v));
            return dot(dyd, ys);
        };
        expect_near(dx[0].f, finite_diff(loss, to_double(x.f)), 1e-5, 1e-4, op_name(u.grad));
    }
}

TEST(Elementwise, BinaryAndScale) {
    for (const Shape &s : kShapes) {
        std::vector<HostTensor> in = {random_tensor(s, 21), random_tensor(s, 22)};
        auto add = run({OpKind::Add, "", {}}, in);
        auto sub = run({OpKind::Sub, "", {}}, in);
        auto mul = run({OpKind::Mul, "", {}}, in);
        std::vector<HostTensor> one = {in[0]};
        auto sc = run({OpKind::Scale, "", {{"alpha", -2.5}}}, one);
        std::vector<double> wa, ws, wm, wsc;
        for (int64_t k = 0; k < in[0].size(); k++) {
            double a = in[0].f[k], b = in[1].f[k];
            wa.push_back(a + b);
            ws.push_back(a - b);
            wm.push_back(a * b);
            wsc.push_back(-2.5 * a);
        }
        expect_near(add[0].f, wa, 1e-6, 1e-6, "add");
        expect_near(sub[0].f, ws, 1e-6, 1e-6, "sub");
        expect_near(mul[0].f, wm, 1e-6, 1e-6, "mul");
        expect_near(sc[0].f, wsc, 1e-6, 1e-6, "scale");
    }
}

// Backward of add/sub/mul/scale are themselves element-wise ops: check them
// against finite differences of the forward loops.
TEST(Elementwise, BinaryBackwardMatchesFiniteDifferences) {
    Shape s = {4, 3};
    HostTensor a = random_tensor(s, 31), b = random_tensor(s, 32), dy = random_tensor(s, 33);
    std::vector<double> dyd = to_double(dy.f), ad = to_double(a.f), bd = to_double(b.f);
    std::vector<HostTensor> db_in = {dy, b}, da_in = {dy, a}, dy_in = {dy};
    auto dmul_a = run({OpKind::Mul, "", {}}, db_in);       // d(a*b)/da = dy*b
    auto dsub_b = run({OpKind::Scale, "", {{"alpha", -1.0}}}, dy_in);  // d(a-b)/db = -dy
    auto loss_mul = [&](const std::vector<double> &x) {
        std::vector<double> y;
        for (size_t k = 0; k < x.size(); k++) y.push_back(x[k] * bd[k]);
        return dot(dyd, y);
    };
    auto loss_sub = [&](const std::vector<double> &x) {
        std::vector<double> y;
        for (size_t k = 0; k < x.size(); k++) y.push_back(ad[k] - x[k]);
        return dot(dyd, y);
    };
    expect_near(dmul_a[0].f, finite_diff(loss_mul, ad), 1e-5, 1e-4, "d mul");
    expect_near(dsub_b[0].f, finite_diff(loss_sub, bd), 1e-5, 1e-4, "d sub");
}

struct BiasCase {
    Shape x;
    int axis;
};

TEST(Elementwise, BiasAddAndGrad) {
    for (BiasCase bc : std::vector<BiasCase>{{{5}, 0}, {{3, 7}, -1}, {{2, 3, 5, 7}, 1}, {{1, 1, 1}, 2}, {{4, 9, 2}, 0}}) {
        int rank = int(bc.x.size());
        int axis = bc.axis < 0 ? bc.axis + rank : bc.axis;
        int64_t C = bc.x[axis], inner = 1, outer = 1;
        for (int t = axis + 1; t < rank; t++) inner *= bc.x[t];
        for (int t = 0; t < axis; t++) outer *= bc.x[t];
        OpCall c{OpKind::BiasAdd, "bias", {{"axis", int64_t(bc.axis)}}};
        std::vector<HostTensor> in = {random_tensor(bc.x, 41), random_tensor({C}, 42)};
        auto y = run(c, in);
        std::vector<double> want(in[0].size());
        for (int64_t o = 0; o < outer; o++)
            for (int64_t ch = 0; ch < C; ch++)
                for (int64_t i = 0; i < inner; i++) {
                    int64_t k = (o * C + ch) * inner + i;
                    want[k] = double(in[0].f[k]) + in[1].f[ch];
                }
        expect_near(y[0].f, want, 1e-6, 1e-6, "bias_add");

        // Gradient with respect to the bias, against finite differences.
        HostTensor dy = random_tensor(bc.x, 43);
        std::vector<HostTensor> gin = {dy};
        auto db = run({OpKind::BiasAddGrad, "bias", {{"axis", int64_t(bc.axis)}}}, gin);
        std::vector<double> dyd = to_double(dy.f), xd = to_double(in[0].f);
        auto loss = [&](const std::vector<double> &b) {
            std::vector<double> ys(xd.size());
            for (int64_t o = 0; o < outer; o++)
                for (int64_t ch = 0; ch < C; ch++)
                    for (int64_t i = 0; i < inner; i++) {
                        int64_t k = (o * C + ch) * inner + i;
                        ys[k] = xd[k] + b[ch];
                    }
            return dot(dyd, ys);
        };
        expect_near(db[0].f, finite_diff(loss, to_double(in[1].f)), 1e-5, 1e-4, "bias_add_grad");
    }
}

TEST(ElementwiseErrors, ShapeMismatch) {
    expect_error([] { infer_types({OpKind::Add, "res", {}}, {{DType::F32, {2, 3}}, {DType::F32, {3, 2}}}); },
                 "add 'res': input 0 has shape [2, 3] but input 1 has shape [3, 2]");
}

// The swap planner lets an element-wise operator's output take the slot of an
// input it reads for the last time (op_may_overwrite_input). With the output
// written over that input, every such operator must give the same bits as
// into fresh memory: shapes long enough for the parallel split (8192-element
// blocks) and a vector tail, and rank 4 for the other schedule.
TEST(Elementwise, OutputOverwritingItsInputGivesTheSameBits) {
    struct Case {
        OpKind kind;
        Attrs attrs;
        std::vector<Shape> inputs;
    };
    const Shape flat = {40009}, rank4 = {3, 5, 7, 129};
    std::vector<Case> cases = {{OpKind::BiasAdd, {{"axis", int64_t{3}}}, {rank4, {129}}},
                               {OpKind::Scale, {{"alpha", -2.5}}, {flat}},
                               {OpKind::Dropout, {{"rate", 0.3}, {"seed", int64_t{7}}}, {flat}}};
    for (OpKind k : {OpKind::Relu, OpKind::Gelu, OpKind::Tanh, OpKind::Sigmoid, OpKind::Erf}) {
        cases.push_back({k, {}, {flat}});
        cases.push_back({k, {}, {rank4}});
    }
    for (OpKind k : {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::ReluGrad, OpKind::GeluGrad, OpKind::TanhGrad,
                     OpKind::SigmoidGrad, OpKind::ErfGrad}) {
        cases.push_back({k, {}, {flat, flat}});
        cases.push_back({k, {}, {rank4, rank4}});
    }
    int checked = 0;
    for (const Case &c : cases) {
        const OpCall call{c.kind, op_name(c.kind), c.attrs};
        std::vector<HostTensor> in;
        for (size_t k = 0; k < c.inputs.size(); k++) in.push_back(random_tensor(c.inputs[k], 60 + k, -3, 3));
        const std::vector<float> want = run(call, in)[0].f;
        for (int k = 0; k < static_cast<int>(in.size()); k++) {
            const bool may = op_may_overwrite_input(c.kind, k);
            EXPECT_EQ(may, !(c.kind == OpKind::BiasAdd && k == 1)) << call.who() << " input " << k;
            if (!may) continue;
            std::vector<HostTensor> aliased = in;
            std::vector<TensorRef> refs;
            for (HostTensor &t : aliased) refs.push_back(t.ref());
            run_op(call, refs, {refs[static_cast<size_t>(k)]});
            EXPECT_EQ(aliased[static_cast<size_t>(k)].f, want) << call.who() << " written over input " << k;
            checked++;
        }
    }
    EXPECT_EQ(checked, 3 + 10 + 32);
    // Every operator that may overwrite an input is one checked above.
    for (const OpInfo &op : all_ops()) {
        const bool listed = std::any_of(cases.begin(), cases.end(), [&](const Case &c) { return c.kind == op.kind; });
        for (int k = 0; k < op.max_inputs; k++)
            EXPECT_TRUE(listed || !op_may_overwrite_input(op.kind, k)) << op.name << " input " << k << " is not checked";
    }
    for (OpKind k : {OpKind::BiasAddGrad, OpKind::Softmax, OpKind::Matmul, OpKind::LayerNorm, OpKind::Reshape})
        EXPECT_FALSE(op_may_overwrite_input(k, 0)) << op_name(k);
}

TEST(ElementwiseErrors, BiasWrongLength) {
    expect_error(
        [] { infer_types({OpKind::BiasAdd, "fc1.bias", {{"axis", int64_t(1)}}}, {{DType::F32, {8, 64}}, {DType::F32, {32}}}); },
        "bias_add 'fc1.bias': x [8, 64] has 64 elements along axis 1 but the bias has 32");
}

TEST(ElementwiseErrors, AxisOutOfRange) {
    expect_error([] { infer_types({OpKind::BiasAdd, "b", {{"axis", int64_t(3)}}}, {{DType::F32, {8, 64}}, {DType::F32, {64}}}); },
                 "attribute 'axis' = 3 is out of range for rank 2");
}

TEST(ElementwiseErrors, ScaleNeedsAlpha) {
    expect_error([] { infer_types({OpKind::Scale, "s", {}}, {{DType::F32, {2}}}); }, "missing attribute 'alpha'");
}

}  // namespace
}  // namespace tessera::test
