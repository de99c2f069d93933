// Optimiser updates against plain double loops over several steps, including
// updates done in place (outputs aliasing their inputs).
#include <cmath>
#include <random>

#include "tessera/lang/strategy.h"
#include "test_util.h"

namespace tessera::test {
namespace {

const std::vector<Shape> kShapes = {{1}, {7}, {3, 5}, {1, 1, 1}, {2, 3, 5, 7}, {4099}};

std::vector<TensorType> types_of(const std::vector<HostTensor> &in) {
    std::vector<TensorType> t;
    for (const auto &h : in) t.push_back(h.type);
    return t;
}

struct Sgd {
    double lr, momentum = 0.9, weight_decay = 0.0;
};

void ref_sgd(std::vector<double> &w, const std::vector<double> &g, std::vector<double> &v, const Sgd &h) {
    for (size_t k = 0; k < w.size(); k++) {
        v[k] = h.momentum * v[k] + g[k] + h.weight_decay * w[k];
        w[k] -= h.lr * v[k];
    }
}

OpCall sgd_call(const Sgd &h, bool defaults) {
    OpCall c{OpKind::SgdMomentum, "opt", {{"lr", h.lr}}};
    if (!defaults) c.attrs.set("momentum", h.momentum).set("weight_decay", h.weight_decay);
    return c;
}

TEST(SgdMomentum, SeveralStepsMatchTheLoop) {
    for (const Shape &s : kShapes)
        for (bool defaults : {true, false}) {
            Sgd h = defaults ? Sgd{0.1} : Sgd{0.05, 0.8, 0.01};
            HostTensor w = random_tensor(s, 1), v(s);
            std::vector<double> wd = to_double(w.f), vd(w.size(), 0.0);
            for (int step = 0; step < 5; step++) {
                HostTensor g = random_tensor(s, 100 + step);
                std::vector<HostTensor> in = {w, g, v};
                auto out = run(sgd_call(h, defaults), in);
                ref_sgd(wd, to_double(g.f), vd, h);
                expect_near(out[0].f, wd, 1e-5, 1e-5, "sgd w");
                expect_near(out[1].f, vd, 1e-5, 1e-5, "sgd v");
                w = out[0];
                v = out[1];
                EXPECT_NE(strategies_for(sgd_call(h, defaults), types_of(in)), nullptr);
            }
        }
}

struct Adam {
    double lr, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

void ref_adam(std::vector<double> &w, const std::vector<double> &g, std::vector<double> &m, std::vector<double> &v,
              int step, const Adam &h) {
    double t = std::max(step, 1);
    for (size_t k = 0; k < w.size(); k++) {
        m[k] = h.beta1 * m[k] + (1 - h.beta1) * g[k];
        v[k] = h.beta2 * v[k] + (1 - h.beta2) * g[k] * g[k];
        double mhat = m[k] / (1 - std::pow(h.beta1, t)), vhat = v[k] / (1 - std::pow(h.beta2, t));
        w[k] -= h.lr * (mhat / (std::sqrt(vhat) + h.eps) + h.weight_decay * w[k]);
    }
}

OpCall adam_call(const Adam &h, bool defaults) {
    OpCall c{OpKind::Adam, "opt", {{"lr", h.lr}}};
    if (!defaults)
        c.attrs.set("beta1", h.beta1).set("beta2", h.beta2).set("eps", h.eps).set("weight_decay", h.weight_decay);
    return c;
}

HostTensor step_tensor(int step) {
    HostTensor t(Shape{}, DType::I32);
    t.i[0] = step;
    return t;
}

TEST(Adam, SeveralStepsMatchTheLoop) {
    for (const Shape &s : kShapes)
        for (bool defaults : {true, false}) {
            Adam h = defaults ? Adam{1e-3} : Adam{1e-2, 0.8, 0.99, 1e-6, 0.1};
            HostTensor w = random_tensor(s, 2), m(s), v(s);
            std::vector<double> wd = to_double(w.f), md(w.size(), 0.0), vd(w.size(), 0.0);
            for (int step = 1; step <= 6; step++) {
                HostTensor g = random_tensor(s, 200 + step);
                std::vector<HostTensor> in = {w, g, m, v, step_tensor(step)};
                auto out = run(adam_call(h, defaults), in);
                ref_adam(wd, to_double(g.f), md, vd, step, h);
                expect_near(out[0].f, wd, 1e-5, 1e-4, "adam w");
                expect_near(out[1].f, md, 1e-6, 1e-5, "adam m");
                expect_near(out[2].f, vd, 1e-7, 1e-5, "adam v");
                w = out[0];
                m = out[1];
                v = out[2];
                EXPECT_NE(strategies_for(adam_call(h, defaults), types_of(in)), nullptr);
            }
        }
}

// Loss scaling's inputs: the scale (a scalar) and the step's non-finite count.
HostTensor f32_scalar(float v) {
    HostTensor t(Shape{});
    t.f[0] = v;
    return t;
}

std::vector<double> unscaled(const HostTensor &g, double scale) {
    std::vector<double> d = to_double(g.f);
    for (double &x : d) x /= scale;
    return d;
}

// A count of 0 unscales the gradient and updates; any other count leaves
// weight and state as they were, bit for bit, even with inf and NaN in g.
TEST(SgdMomentum, LossScaledUpdatesUnscaleOrSkip) {
    for (const Shape &s : kShapes) {
        const Sgd h{0.05, 0.8, 0.01};
        HostTensor w = random_tensor(s, 3), v = random_tensor(s, 4);
        std::vector<double> wd = to_double(w.f), vd = to_double(v.f);
        for (int step = 0; step < 4; step++) {
            const bool overflow = step % 2 == 1;
            HostTensor g = random_tensor(s, 300 + step);
            for (float &x : g.f) x *= 1024;
            if (overflow) g.f[g.f.size() / 2] = step == 1 ? INFINITY : NAN;
            std::vector<HostTensor> in = {w, g, v, f32_scalar(1024), f32_scalar(overflow ? 1 : 0)};
            auto out = run(sgd_call(h, false), in);
            if (overflow) {
                EXPECT_EQ(out[0].f, w.f);
                EXPECT_EQ(out[1].f, v.f);
            } else {
                ref_sgd(wd, unscaled(g, 1024), vd, h);
                expect_near(out[0].f, wd, 1e-5, 1e-5, "scaled sgd w");
                expect_near(out[1].f, vd, 1e-5, 1e-5, "scaled sgd v");
            }
            w = out[0];
            v = out[1];
        }
    }
}

TEST(Adam, LossScaledUpdatesUnscaleOrSkip) {
    for (const Shape &s : kShapes) {
        const Adam h{1e-2, 0.8, 0.99, 1e-6, 0.1};
        HostTensor w = random_tensor(s, 5), m(s), v(s);
        std::vector<double> wd = to_double(w.f), md(w.size(), 0.0), vd(w.size(), 0.0);
        int applied = 0;
        for (int step = 0; step < 5; step++) {
            const bool overflow = step == 1 || step == 2;
            HostTensor g = random_tensor(s, 400 + step);
            for (float &x : g.f) x *= 0.125f;
            if (overflow) g.f[0] = -INFINITY;
            std::vector<HostTensor> in = {w, g, m, v, step_tensor(applied + 1), f32_scalar(0.125f),
                                          f32_scalar(overflow ? 7 : 0)};
            auto out = run(adam_call(h, false), in);
            if (overflow) {
                EXPECT_EQ(out[0].f, w.f);
                EXPECT_EQ(out[1].f, m.f);
                EXPECT_EQ(out[2].f, v.f);
            } else {
                ref_adam(wd, unscaled(g, 0.125), md, vd, ++applied, h);
                expect_near(out[0].f, wd, 1e-5, 1e-4, "scaled adam w");
                expect_near(out[1].f, md, 1e-6, 1e-5, "scaled adam m");
            }
            w = out[0];
            m = out[1];
            v = out[2];
        }
    }
}

// The count against a plain loop, with infinities and NaNs at random places.
TEST(NonfiniteCount, CountsInfAndNanLikeTheLoop) {
    for (const Shape &s : kShapes)
        for (int seed = 0; seed < 4; seed++) {
            HostTensor x = random_tensor(s, 500 + seed);
            std::mt19937 rng(static_cast<uint32_t>(seed));
            const float specials[] = {INFINITY, -INFINITY, NAN};
            for (int k = 0; k < seed * 3; k++) x.f[rng() % x.f.size()] = specials[rng() % 3];
            int64_t expect = 0;
            for (float v : x.f) expect += !std::isfinite(v);
            OpCall c{OpKind::NonfiniteCount, "count", {}};
            std::vector<HostTensor> in = {x};
            auto out = run(c, in);
            ASSERT_EQ(out[0].type, (TensorType{DType::F32, {}}));
            EXPECT_EQ(out[0].f[0], static_cast<float>(expect)) << shape_str(s) << " seed " << seed;
            // Split along any dimension, each block's count is a partial sum.
            EXPECT_NE(strategies_for(c, {x.type}), nullptr);
        }
}

// step is data; a step below 1 is treated as 1 (the bias corrections stay finite).
TEST(Adam, StepBelowOneIsClampedToOne) {
    Shape s = {9};
    Adam h{1e-2};
    HostTensor w = random_tensor(s, 3), g = random_tensor(s, 4), m(s), v(s);
    std::vector<HostTensor> zero = {w, g, m, v, step_tensor(0)}, one = {w, g, m, v, step_tensor(1)};
    auto a = run(adam_call(h, true), zero), b = run(adam_call(h, true), one);
    for (int k = 0; k < 3; k++) EXPECT_EQ(a[k].f, b[k].f);
    for (float x : a[0].f) EXPECT_TRUE(std::isfinite(x));
}

// Outputs may alias their inputs: each element is read before it is written.
TEST(Optim, InPlaceUpdatesMatch) {
    Shape s = {3, 37};
    HostTensor w = random_tensor(s, 5), g = random_tensor(s, 6), m = random_tensor(s, 7, 0, 0.1f),
               v = random_tensor(s, 8, 0, 0.1f), st = step_tensor(3);
    std::vector<HostTensor> in = {w, g, m, v, st};
    auto fresh = run(adam_call(Adam{1e-2}, true), in);
    run_op(adam_call(Adam{1e-2}, true), {w.ref(), g.ref(), m.ref(), v.ref(), st.ref()}, {w.ref(), m.ref(), v.ref()});
    EXPECT_EQ(w.f, fresh[0].f);
    EXPECT_EQ(m.f, fresh[1].f);
    EXPECT_EQ(v.f, fresh[2].f);

    HostTensor w2 = random_tensor(s, 9), v2 = random_tensor(s, 10);
    std::vector<HostTensor> sin = {w2, g, v2};
    auto sfresh = run(sgd_call(Sgd{0.1}, true), sin);
    run_op(sgd_call(Sgd{0.1}, true), {w2.ref(), g.ref(), v2.ref()}, {w2.ref(), v2.ref()});
    EXPECT_EQ(w2.f, sfresh[0].f);
    EXPECT_EQ(v2.f, sfresh[1].f);
}

TEST(Optim, DefaultsAreFilled) {
    OpCall a = with_defaults(adam_call(Adam{1e-3}, true));
    EXPECT_EQ(a.attrs.get_float("", "beta1"), 0.9);
    EXPECT_EQ(a.attrs.get_float("", "beta2"), 0.999);
    EXPECT_EQ(a.attrs.get_float("", "eps"), 1e-8);
    EXPECT_EQ(a.attrs.get_float("", "weight_decay"), 0.0);
    OpCall s = with_defaults(sgd_call(Sgd{0.1}, true));
    EXPECT_EQ(s.attrs.get_float("", "momentum"), 0.9);
    EXPECT_EQ(s.attrs.get_float("", "weight_decay"), 0.0);
}

// ---- User errors: one test per message ----

std::vector<TensorType> f32s(int n, Shape s) { return std::vector<TensorType>(n, {DType::F32, s}); }

std::vector<TensorType> adam_types(Shape step = {}, DType step_type = DType::I32) {
    auto t = f32s(4, {3, 4});
    t.push_back({step_type, step});
    return t;
}

TEST(OptimErrors, ShapeMismatch) {
    expect_error([] { infer_types(sgd_call(Sgd{0.1}, true), {{DType::F32, {3, 4}}, {DType::F32, {4, 3}}, {DType::F32, {3, 4}}}); },
                 "sgd_momentum 'opt': input 1 (g) has shape [4, 3] but w has shape [3, 4]; they must match");
    auto t = adam_types();
    t[3].shape = {12};
    expect_error([&] { infer_types(adam_call(Adam{1e-3}, true), t); }, "adam 'opt': input 3 (v) has shape [12]");
}

TEST(OptimErrors, LossScalingInputsAreF32Scalars) {
    auto t = f32s(3, {3});
    t.push_back({DType::F32, {}});
    expect_error([&] { infer_types(sgd_call(Sgd{0.1}, true), t); },
                 "sgd_momentum 'opt': takes 3 inputs, or 5 with loss scaling");
    t.push_back({DType::F32, {1}});
    expect_error([&] { infer_types(sgd_call(Sgd{0.1}, true), t); },
                 "input 4 (nonfinite) must be a scalar (shape []), got shape [1]");
    auto a = adam_types();
    a.push_back({DType::I32, {}});
    a.push_back({DType::F32, {}});
    expect_error([&] { infer_types(adam_call(Adam{1e-3}, true), a); }, "adam 'opt': input 5 (scale) must be f32");
    expect_error([] { infer_types({OpKind::NonfiniteCount, "count", {}}, {{DType::BF16, {3}}}); },
                 "nonfinite_count 'count': input 0 (x) must be f32");
}

TEST(OptimErrors, StepMustBeAScalar) {
    expect_error([] { infer_types(adam_call(Adam{1e-3}, true), adam_types({1})); },
                 "adam 'opt': input 4 (step) must be a scalar (shape []), got shape [1]");
}

TEST(OptimErrors, StepMustBeInt) {
    expect_error([] { infer_types(adam_call(Adam{1e-3}, true), adam_types({}, DType::F32)); },
                 "adam 'opt': input 4 (step) must be i32");
}

TEST(OptimErrors, TensorsMustBeFloat) {
    expect_error([] { infer_types(sgd_call(Sgd{0.1}, true), {{DType::F32, {3}}, {DType::I32, {3}}, {DType::F32, {3}}}); },
                 "sgd_momentum 'opt': input 1 (g) must be f32");
}

TEST(OptimErrors, LearningRateRequired) {
    expect_error([] { infer_types({OpKind::SgdMomentum, "opt", {}}, f32s(3, {3})); },
                 "sgd_momentum 'opt': missing attribute 'lr'");
}

TEST(OptimErrors, AttributeRanges) {
    expect_error([] { infer_types(sgd_call(Sgd{-0.1}, true), f32s(3, {3})); },
                 "sgd_momentum 'opt': attribute 'lr' = -0.1 must be in [0, inf)");
    expect_error([] { infer_types(sgd_call(Sgd{0.1, 1.0, 0.0}, false), f32s(3, {3})); },
                 "attribute 'momentum' = 1 must be in [0, 1)");
    expect_error([] { infer_types(sgd_call(Sgd{0.1, 0.9, -1.0}, false), f32s(3, {3})); },
                 "attribute 'weight_decay' = -1 must be in [0, inf)");
    expect_error([] { infer_types(adam_call(Adam{1e-3, 1.5}, false), adam_types()); },
                 "adam 'opt': attribute 'beta1' = 1.5 must be in [0, 1)");
    expect_error([] { infer_types(adam_call(Adam{1e-3, 0.9, -0.5}, false), adam_types()); },
                 "attribute 'beta2' = -0.5 must be in [0, 1)");
    expect_error([] { infer_types(adam_call(Adam{1e-3, 0.9, 0.999, 0.0}, false), adam_types()); },
                 "attribute 'eps' = 0 must be in (0, inf)");
}

}  // namespace
}  // namespace tessera::test
