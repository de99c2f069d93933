// Convolution and pooling against plain double-precision loops written here; every
// backward operator against central finite differences of those loops (and, on
// shapes too large for differences, against the adjoint loops); and one test per
// user-facing error message.
#include <algorithm>
#include <limits>
#include <numeric>

#include "test_util.h"

namespace tessera::test {
namespace {

// One convolution or pooling geometry. For pooling, c = co = channels.
struct Geo {
    int64_t n, ci, h, w, co, kh, kw, sh, sw, ph, pw;
    int64_t oh() const { return (h + 2 * ph - kh) / sh + 1; }
    int64_t ow() const { return (w + 2 * pw - kw) / sw + 1; }
    Shape x() const { return {n, ci, h, w}; }
    Shape wt() const { return {co, ci, kh, kw}; }
    Shape y() const { return {n, co, oh(), ow()}; }
};

std::ostream &operator<<(std::ostream &os, const Geo &g) {
    return os << "x[" << g.n << "," << g.ci << "," << g.h << "," << g.w << "] w[" << g.co << "," << g.ci << ","
              << g.kh << "," << g.kw << "] stride (" << g.sh << "," << g.sw << ") pad (" << g.ph << "," << g.pw
              << ")";
}

Attrs window_attrs(const Geo &g) {
    return {{"stride_h", g.sh}, {"stride_w", g.sw}, {"pad_h", g.ph}, {"pad_w", g.pw}};
}

Attrs pool_attrs(const Geo &g) {
    Attrs a = window_attrs(g);
    a.set("kernel_h", g.kh).set("kernel_w", g.kw);
    return a;
}

int64_t at4(const Shape &s, int64_t a, int64_t b, int64_t c, int64_t d) {
    return ((a * s[1] + b) * s[2] + c) * s[3] + d;
}

// Visits every (output position, kernel tap) pair whose input pixel lies inside x:
// fn(kh, kw, input row, input column).
template <typename Fn>
void for_each_tap(const Geo &g, int64_t oy, int64_t ox, Fn fn) {
    for (int64_t a = 0; a < g.kh; a++)
        for (int64_t b = 0; b < g.kw; b++) {
            int64_t iy = oy * g.sh + a - g.ph, ix = ox * g.sw + b - g.pw;
            if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) fn(a, b, iy, ix);
        }
}

std::vector<double> ref_conv(const std::vector<double> &x, const std::vector<double> &w, const Geo &g) {
    Shape ys = g.y(), xs = g.x(), ws = g.wt();
    std::vector<double> y(num_elements(ys), 0.0);
    for (int64_t n = 0; n < g.n; n++)
        for (int64_t co = 0; co < g.co; co++)
            for (int64_t oy = 0; oy < ys[2]; oy++)
                for (int64_t ox = 0; ox < ys[3]; ox++) {
                    double s = 0;
                    for (int64_t ci = 0; ci < g.ci; ci++)
                        for_each_tap(g, oy, ox, [&](int64_t a, int64_t b, int64_t iy, int64_t ix) {
                            s += x[at4(xs, n, ci, iy, ix)] * w[at4(ws, co, ci, a, b)];
                        });
                    y[at4(ys, n, co, oy, ox)] = s;
                }
    return y;
}

// The adjoints of ref_conv written as scatters (the kernels gather), for shapes
// too large for finite differences.
void ref_conv_adjoints(const std::vector<double> &x, const std::vector<double> &w, const std::vector<double> &dy,
                       const Geo &g, std::vector<double> &dx, std::vector<double> &dw) {
    Shape ys = g.y(), xs = g.x(), ws = g.wt();
    dx.assign(num_elements(xs), 0.0);
    dw.assign(num_elements(ws), 0.0);
    for (int64_t n = 0; n < g.n; n++)
        for (int64_t co = 0; co < g.co; co++)
            for (int64_t oy = 0; oy < ys[2]; oy++)
                for (int64_t ox = 0; ox < ys[3]; ox++) {
                    double d = dy[at4(ys, n, co, oy, ox)];
                    for (int64_t ci = 0; ci < g.ci; ci++)
                        for_each_tap(g, oy, ox, [&](int64_t a, int64_t b, int64_t iy, int64_t ix) {
                            dx[at4(xs, n, ci, iy, ix)] += d * w[at4(ws, co, ci, a, b)];
                            dw[at4(ws, co, ci, a, b)] += d * x[at4(xs, n, ci, iy, ix)];
                        });
                }
}

// Max pooling; also returns, per output, the flat x index of its argmax: the first
// maximum in the window's row-major scan (ties go there).
std::vector<double> ref_max_pool(const std::vector<double> &x, const Geo &g, std::vector<int64_t> *arg = nullptr) {
    Shape ys = g.y(), xs = g.x();
    std::vector<double> y(num_elements(ys));
    if (arg) arg->assign(y.size(), -1);
    for (int64_t n = 0; n < g.n; n++)
        for (int64_t c = 0; c < g.ci; c++)
            for (int64_t oy = 0; oy < ys[2]; oy++)
                for (int64_t ox = 0; ox < ys[3]; ox++) {
                    double m = -std::numeric_limits<double>::infinity();
                    int64_t best = -1;
                    for_each_tap(g, oy, ox, [&](int64_t, int64_t, int64_t iy, int64_t ix) {
                        int64_t k = at4(xs, n, c, iy, ix);
                        if (x[k] > m) m = x[k], best = k;
                    });
                    int64_t o = at4(ys, n, c, oy, ox);
                    y[o] = m;
                    if (arg) (*arg)[o] = best;
                }
    return y;
}

// Average pooling with the padding counted: every window divides by kh*kw.
std::vector<double> ref_avg_pool(const std::vector<double> &x, const Geo &g) {
    Shape ys = g.y(), xs = g.x();
    std::vector<double> y(num_elements(ys));
    for (int64_t n = 0; n < g.n; n++)
        for (int64_t c = 0; c < g.ci; c++)
            for (int64_t oy = 0; oy < ys[2]; oy++)
                for (int64_t ox = 0; ox < ys[3]; ox++) {
                    double s = 0;
                    for_each_tap(g, oy, ox,
                                 [&](int64_t, int64_t, int64_t iy, int64_t ix) { s += x[at4(xs, n, c, iy, ix)]; });
                    y[at4(ys, n, c, oy, ox)] = s / double(g.kh * g.kw);
                }
    return y;
}

std::vector<double> ref_global_avg(const std::vector<double> &x, const Shape &s) {
    std::vector<double> y(s[0] * s[1], 0.0);
    for (int64_t p = 0; p < s[0] * s[1]; p++) {
        for (int64_t k = 0; k < s[2] * s[3]; k++) y[p] += x[p * s[2] * s[3] + k];
        y[p] /= double(s[2] * s[3]);
    }
    return y;
}

// x with distinct values at least 1e-2 apart, so that finite differences never
// cross a tie of max pooling.
HostTensor distinct_tensor(Shape s, uint32_t seed) {
    HostTensor t(std::move(s));
    std::vector<int64_t> perm(t.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    for (size_t k = 0; k < perm.size(); k++) t.f[k] = float(perm[k]) * 0.01f - 0.005f * float(perm.size());
    return t;
}

OpCall conv_call(const Geo &g) { return {OpKind::Conv2d, "conv", window_attrs(g)}; }

OpCall grad_input_call(const Geo &g) {
    Attrs a = window_attrs(g);
    a.set("in_h", g.h).set("in_w", g.w);
    return {OpKind::Conv2dGradInput, "conv", a};
}

OpCall grad_weight_call(const Geo &g) {
    Attrs a = window_attrs(g);
    a.set("kernel_h", g.kh).set("kernel_w", g.kw);
    return {OpKind::Conv2dGradWeight, "conv", a};
}

// ---- conv2d ---------------------------------------------------------------------

// Odd extents, extents of 1, strides 1, 2 and 3, pads 0, 1 and 2, kernels 1 to 5
// and non-square ones; the larger ones cross the Halide kernels' register tiles
// and the BLAS path's bands of output rows (its columns are built a band at a
// time), and the 1x1 ones at stride 1 without padding take the BLAS path's
// shortcut that uses the input planes as columns.
const std::vector<Geo> kConvShapes = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0},     {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1},
    {2, 3, 7, 6, 4, 3, 3, 2, 2, 1, 1},     {1, 5, 9, 11, 7, 5, 5, 1, 1, 2, 2},
    {3, 2, 8, 5, 3, 1, 1, 2, 1, 0, 0},     {2, 4, 6, 9, 5, 3, 2, 2, 1, 0, 1},
    {1, 3, 5, 5, 2, 5, 3, 1, 2, 0, 1},     {1, 2, 3, 3, 1, 3, 3, 1, 1, 0, 0},
    {2, 3, 10, 7, 5, 3, 3, 2, 2, 2, 2},    {2, 2, 9, 6, 3, 2, 4, 2, 1, 1, 2},
    {2, 3, 8, 11, 2, 3, 3, 2, 2, 0, 0},    {1, 2, 6, 7, 3, 4, 4, 2, 2, 2, 1},
    {2, 6, 5, 13, 4, 1, 1, 1, 1, 0, 0},    {1, 3, 6, 6, 2, 1, 1, 2, 2, 0, 0},
    {2, 16, 17, 35, 24, 3, 3, 1, 1, 1, 1}, {1, 33, 20, 40, 40, 3, 3, 2, 2, 1, 1},
    {1, 64, 12, 56, 64, 3, 3, 1, 1, 1, 1}, {1, 8, 9, 37, 9, 3, 3, 3, 3, 1, 1},
    {1, 64, 60, 56, 8, 3, 3, 1, 1, 1, 1},  {1, 96, 70, 50, 4, 3, 3, 2, 2, 1, 1},
    {3, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1}, {2, 40, 9, 9, 24, 1, 1, 1, 1, 0, 0},
};

// Every convolution test runs with both backends: the Halide kernels generated
// from the descriptions, and im2col around OpenBLAS sgemm.
class ConvBackend {
protected:
    static void use(GemmBackend b) { set_gemm_backend(b); }
    static void restore() { set_gemm_backend(GemmBackend::Blas); }
};

std::string backend_name(GemmBackend b) { return b == GemmBackend::Halide ? "halide" : "blas"; }

class ConvShapes : public ::testing::TestWithParam<std::tuple<Geo, GemmBackend>>, ConvBackend {
protected:
    void SetUp() override { use(std::get<1>(GetParam())); }
    void TearDown() override { restore(); }
    Geo geo() const { return std::get<0>(GetParam()); }
};

TEST_P(ConvShapes, ForwardMatchesLoops) {
    const Geo g = geo();
    std::vector<HostTensor> in = {random_tensor(g.x(), 1), random_tensor(g.wt(), 2)};
    auto y = run(conv_call(g), in);
    ASSERT_EQ(y[0].type.shape, g.y());
    expect_near(y[0].f, ref_conv(to_double(in[0].f), to_double(in[1].f), g), 1e-4, 1e-4, "conv2d");
}

// The gradient kernels against the adjoint loops, on every shape (tile edges).
TEST_P(ConvShapes, GradientsMatchAdjointLoops) {
    const Geo g = geo();
    HostTensor x = random_tensor(g.x(), 3), w = random_tensor(g.wt(), 4), dy = random_tensor(g.y(), 5);
    std::vector<double> dx, dw;
    ref_conv_adjoints(to_double(x.f), to_double(w.f), to_double(dy.f), g, dx, dw);
    std::vector<HostTensor> gi = {dy, w}, gw = {dy, x};
    expect_near(run(grad_input_call(g), gi)[0].f, dx, 1e-4, 1e-4, "conv2d_grad_input");
    expect_near(run(grad_weight_call(g), gw)[0].f, dw, 1e-3, 1e-4, "conv2d_grad_weight");
}

// Outputs are overwritten, never accumulated into: a second call on outputs that
// hold the first call's results gives the same results.
TEST_P(ConvShapes, RepeatedCallsOverwriteTheOutputs) {
    const Geo g = geo();
    HostTensor x = random_tensor(g.x(), 20), w = random_tensor(g.wt(), 21), dy = random_tensor(g.y(), 22);
    std::vector<std::pair<OpCall, std::vector<TensorRef>>> calls = {
        {conv_call(g), {x.ref(), w.ref()}}, {grad_input_call(g), {dy.ref(), w.ref()}},
        {grad_weight_call(g), {dy.ref(), x.ref()}}};
    for (auto &[call, in] : calls) {
        std::vector<TensorType> types;
        for (const TensorRef &t : in) types.push_back(t.type);
        HostTensor out(infer_types(call, types)[0].shape);
        run_op(call, in, {out.ref()});
        std::vector<float> first = out.f;
        run_op(call, in, {out.ref()});
        EXPECT_EQ(out.f, first) << op_name(call.kind);
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvShapes,
                         ::testing::Combine(::testing::ValuesIn(kConvShapes),
                                            ::testing::Values(GemmBackend::Halide, GemmBackend::Blas)),
                         [](const auto &info) {
                             return std::to_string(info.index / 2) + "_" + backend_name(std::get<1>(info.param));
                         });

// The tests of one backend over the whole shape list.
class ConvEachBackend : public ::testing::TestWithParam<GemmBackend>, ConvBackend {
protected:
    void SetUp() override { use(GetParam()); }
    void TearDown() override { restore(); }
};

// Finite differences of loss = dot(dy, conv(x, w)) on the small shapes.
TEST_P(ConvEachBackend, GradientsMatchFiniteDifferences) {
    for (const Geo &g : kConvShapes) {
        if (num_elements(g.x()) > 600 || num_elements(g.wt()) > 600) continue;
        SCOPED_TRACE(::testing::PrintToString(g));
        HostTensor x = random_tensor(g.x(), 6), w = random_tensor(g.wt(), 7), dy = random_tensor(g.y(), 8);
        std::vector<double> xd = to_double(x.f), wd = to_double(w.f), dyd = to_double(dy.f);
        std::vector<HostTensor> gi = {dy, w}, gw = {dy, x};
        auto dx = run(grad_input_call(g), gi);
        auto dw = run(grad_weight_call(g), gw);
        ASSERT_EQ(dx[0].type.shape, g.x());
        ASSERT_EQ(dw[0].type.shape, g.wt());
        auto fx = [&](const std::vector<double> &v) { return dot(dyd, ref_conv(v, wd, g)); };
        auto fw = [&](const std::vector<double> &v) { return dot(dyd, ref_conv(xd, v, g)); };
        expect_near(dx[0].f, finite_diff(fx, xd), 1e-4, 1e-3, "conv2d_grad_input");
        expect_near(dw[0].f, finite_diff(fw, wd), 1e-4, 1e-3, "conv2d_grad_weight");
    }
}

// A stride that skips the last input rows: those rows get no gradient, which is
// why conv2d_grad_input takes in_h and in_w. The output starts out non-zero, so
// the rows must be written, not skipped.
TEST_P(ConvEachBackend, GradInputCoversRowsNoWindowReads) {
    Geo g{1, 2, 8, 8, 3, 3, 3, 2, 2, 0, 0};  // rows 7 and column 7 are never read
    HostTensor w = random_tensor(g.wt(), 9), dy = random_tensor(g.y(), 10);
    HostTensor dx = random_tensor(g.x(), 11);
    run_op(grad_input_call(g), {dy.ref(), w.ref()}, {dx.ref()});
    for (int64_t c = 0; c < g.ci; c++)
        for (int64_t k = 0; k < g.w; k++) {
            EXPECT_EQ(dx.f[at4(g.x(), 0, c, 7, k)], 0.0f);
            EXPECT_EQ(dx.f[at4(g.x(), 0, c, k, 7)], 0.0f);
        }
}

// Results do not depend on where the tensors start (the executor's arena places
// them at any float offset).
TEST_P(ConvEachBackend, UnalignedTensors) {
    Geo g{2, 5, 9, 11, 6, 3, 3, 1, 1, 1, 1};
    std::vector<HostTensor> fwd = {random_tensor(g.x(), 23), random_tensor(g.wt(), 24)};
    std::vector<HostTensor> gi = {random_tensor(g.y(), 25), fwd[1]}, gw = {gi[0], fwd[0]};
    expect_same_unaligned(conv_call(g), fwd);
    expect_same_unaligned(grad_input_call(g), gi);
    expect_same_unaligned(grad_weight_call(g), gw);
}

INSTANTIATE_TEST_SUITE_P(Backends, ConvEachBackend, ::testing::Values(GemmBackend::Halide, GemmBackend::Blas),
                         [](const auto &info) { return backend_name(info.param); });

TEST(Conv2d, DefaultsAreStrideOneAndNoPadding) {
    OpCall c = with_defaults({OpKind::Conv2d, "conv", {}});
    EXPECT_EQ(c.attrs.get_int("", "stride_h"), 1);
    EXPECT_EQ(c.attrs.get_int("", "stride_w"), 1);
    EXPECT_EQ(c.attrs.get_int("", "pad_h"), 0);
    EXPECT_EQ(c.attrs.get_int("", "pad_w"), 0);
    auto t = infer_types({OpKind::Conv2d, "conv", {}}, {{DType::F32, {2, 3, 9, 8}}, {DType::F32, {5, 3, 3, 2}}});
    EXPECT_EQ(t[0].shape, (Shape{2, 5, 7, 7}));
}

// ---- Pooling ----------------------------------------------------------------------

// Pooling geometries: ci is the channel count (co is unused). Default-stride
// (= kernel), overlapping (stride < kernel) and padded windows, extents of 1.
// The kernels vectorise rows in a few widths (16, 8 and 4 lanes on AVX-512, rows
// narrower than that one lane at a time) and specialise 2x2 windows and strides 1
// and 2: rows of 28, 14, 7 and 3 (the cnn's planes), 2x2 windows at strides 1
// and 2, with and without padding, cover those paths.
const std::vector<Geo> kPoolShapes = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0},    {2, 3, 8, 6, 3, 2, 2, 2, 2, 0, 0},   {1, 2, 7, 9, 2, 3, 3, 2, 2, 1, 1},
    {2, 3, 5, 7, 3, 3, 3, 1, 1, 1, 1},    {1, 2, 9, 5, 2, 3, 2, 3, 1, 0, 1},   {3, 1, 4, 4, 1, 4, 4, 4, 4, 2, 2},
    {2, 5, 23, 37, 5, 3, 3, 2, 2, 1, 1},  {2, 3, 28, 28, 3, 2, 2, 2, 2, 0, 0}, {1, 4, 14, 14, 4, 2, 2, 2, 2, 0, 0},
    {1, 2, 17, 33, 2, 2, 2, 1, 1, 0, 0},  {1, 2, 9, 40, 2, 2, 2, 2, 2, 1, 1},  {2, 2, 6, 7, 2, 2, 2, 2, 2, 0, 0},
};

// Pool calls for g, with the stride left to its default when it equals the kernel.
OpCall pool_call(OpKind k, const Geo &g) {
    Attrs a = pool_attrs(g);
    OpCall c{k, "pool", a};
    if (g.sh == g.kh && g.sw == g.kw) {
        c.attrs = {{"kernel_h", g.kh}, {"kernel_w", g.kw}, {"pad_h", g.ph}, {"pad_w", g.pw}};
    }
    if (k == OpKind::AvgPool2dGrad) c.attrs.set("in_h", g.h).set("in_w", g.w);
    return c;
}

TEST(Pool, ForwardMatchesLoops) {
    for (const Geo &g : kPoolShapes) {
        SCOPED_TRACE(::testing::PrintToString(g));
        std::vector<HostTensor> in = {random_tensor(g.x(), 11)};
        auto mx = run(pool_call(OpKind::MaxPool2d, g), in);
        auto av = run(pool_call(OpKind::AvgPool2d, g), in);
        ASSERT_EQ(mx[0].type.shape, g.y());
        ASSERT_EQ(av[0].type.shape, g.y());
        expect_near(mx[0].f, ref_max_pool(to_double(in[0].f), g), 0, 0, "max_pool2d");
        expect_near(av[0].f, ref_avg_pool(to_double(in[0].f), g), 1e-6, 1e-5, "avg_pool2d");
    }
}

TEST(Pool, MaxPoolGradMatchesFiniteDifferences) {
    for (const Geo &g : kPoolShapes) {
        SCOPED_TRACE(::testing::PrintToString(g));
        HostTensor x = distinct_tensor(g.x(), 12), dy = random_tensor(g.y(), 13);
        std::vector<HostTensor> in = {dy, x};
        auto dx = run(pool_call(OpKind::MaxPool2dGrad, g), in);
        ASSERT_EQ(dx[0].type.shape, g.x());
        std::vector<double> dyd = to_double(dy.f);
        auto loss = [&](const std::vector<double> &v) { return dot(dyd, ref_max_pool(v, g)); };
        expect_near(dx[0].f, finite_diff(loss, to_double(x.f)), 1e-5, 1e-4, "max_pool2d_grad");
    }
}

// Ties: the whole gradient of a window goes to its first maximum in row-major scan
// order (kh outer, kw inner), never split between equal values.
TEST(Pool, MaxPoolGradSendsTiesToTheFirstMaximum) {
    for (const Geo &g : kPoolShapes) {
        SCOPED_TRACE(::testing::PrintToString(g));
        HostTensor x(g.x());
        for (int64_t k = 0; k < x.size(); k++) x.f[k] = float(k % 3 == 0);  // many equal maxima
        HostTensor dy = random_tensor(g.y(), 14);
        std::vector<HostTensor> in = {dy, x};
        auto dx = run(pool_call(OpKind::MaxPool2dGrad, g), in);
        std::vector<int64_t> arg;
        ref_max_pool(to_double(x.f), g, &arg);
        std::vector<double> want(x.size(), 0.0);
        for (size_t o = 0; o < arg.size(); o++) want[arg[o]] += dy.f[o];
        expect_near(dx[0].f, want, 1e-6, 1e-6, "max_pool2d_grad ties");
    }
}

TEST(Pool, AvgPoolGradMatchesFiniteDifferences) {
    for (const Geo &g : kPoolShapes) {
        SCOPED_TRACE(::testing::PrintToString(g));
        HostTensor x = random_tensor(g.x(), 15), dy = random_tensor(g.y(), 16);
        std::vector<HostTensor> in = {dy};
        auto dx = run(pool_call(OpKind::AvgPool2dGrad, g), in);
        ASSERT_EQ(dx[0].type.shape, g.x());
        std::vector<double> dyd = to_double(dy.f);
        auto loss = [&](const std::vector<double> &v) { return dot(dyd, ref_avg_pool(v, g)); };
        expect_near(dx[0].f, finite_diff(loss, to_double(x.f)), 1e-5, 1e-4, "avg_pool2d_grad");
    }
}

// Results do not depend on where the tensors start (the executor's arena places
// them at any float offset): the row vectors load and store at any alignment.
TEST(Pool, UnalignedTensors) {
    for (const Geo &g : {Geo{2, 3, 28, 28, 3, 2, 2, 2, 2, 0, 0}, Geo{1, 2, 7, 37, 2, 3, 3, 2, 2, 1, 1}}) {
        SCOPED_TRACE(::testing::PrintToString(g));
        std::vector<HostTensor> x = {distinct_tensor(g.x(), 40)};
        std::vector<HostTensor> grad = {random_tensor(g.y(), 41), x[0]}, dy = {grad[0]};
        expect_same_unaligned(pool_call(OpKind::MaxPool2d, g), x);
        expect_same_unaligned(pool_call(OpKind::AvgPool2d, g), x);
        expect_same_unaligned(pool_call(OpKind::MaxPool2dGrad, g), grad);
        expect_same_unaligned(pool_call(OpKind::AvgPool2dGrad, g), dy);
    }
}

TEST(Pool, StrideDefaultsToTheKernel) {
    OpCall c = with_defaults({OpKind::MaxPool2d, "pool", {{"kernel_h", int64_t{3}}, {"kernel_w", int64_t{2}}}});
    EXPECT_EQ(c.attrs.get_int("", "stride_h"), 3);
    EXPECT_EQ(c.attrs.get_int("", "stride_w"), 2);
    EXPECT_EQ(c.attrs.get_int("", "pad_h"), 0);
    auto t = infer_types({OpKind::AvgPool2d, "pool", {{"kernel_h", int64_t{3}}, {"kernel_w", int64_t{2}}}},
                         {{DType::F32, {1, 2, 10, 7}}});
    EXPECT_EQ(t[0].shape, (Shape{1, 2, 3, 3}));
}

const std::vector<Shape> kGlobalShapes = {{1, 1, 1, 1}, {2, 3, 5, 7}, {3, 17, 7, 7}, {2, 4, 1, 33}};

TEST(GlobalAvgPool, ForwardMatchesLoops) {
    for (const Shape &s : kGlobalShapes) {
        std::vector<HostTensor> in = {random_tensor(s, 17)};
        auto y = run({OpKind::GlobalAvgPool, "gap", {}}, in);
        ASSERT_EQ(y[0].type.shape, (Shape{s[0], s[1]}));
        expect_near(y[0].f, ref_global_avg(to_double(in[0].f), s), 1e-6, 1e-5, "global_avg_pool");
    }
}

TEST(GlobalAvgPool, GradMatchesFiniteDifferences) {
    for (const Shape &s : kGlobalShapes) {
        HostTensor x = random_tensor(s, 18), dy = random_tensor({s[0], s[1]}, 19);
        std::vector<HostTensor> in = {dy};
        auto dx = run({OpKind::GlobalAvgPoolGrad, "gap", {{"in_h", s[2]}, {"in_w", s[3]}}}, in);
        ASSERT_EQ(dx[0].type.shape, s);
        std::vector<double> dyd = to_double(dy.f);
        auto loss = [&](const std::vector<double> &v) { return dot(dyd, ref_global_avg(v, s)); };
        expect_near(dx[0].f, finite_diff(loss, to_double(x.f)), 1e-6, 1e-4, "global_avg_pool_grad");
    }
}

// ---- Errors ------------------------------------------------------------------------

std::vector<TensorType> f32(std::vector<Shape> shapes) {
    std::vector<TensorType> t;
    for (auto &s : shapes) t.push_back({DType::F32, s});
    return t;
}

TEST(ConvErrors, ChannelMismatch) {
    OpCall c{OpKind::Conv2d, "block3.conv1", {}};
    expect_error([&] { infer_types(c, f32({{8, 64, 56, 56}, {64, 32, 3, 3}})); },
                 "conv2d 'block3.conv1': input has 64 channels but the weight expects 32");
}

TEST(ConvErrors, WrongRank) {
    expect_error([] { infer_types({OpKind::Conv2d, "c", {}}, f32({{8, 64, 56}, {64, 64, 3, 3}})); },
                 "input 0 (x) must have rank 4");
    expect_error([] { infer_types({OpKind::Conv2d, "c", {}}, f32({{8, 64, 56, 56}, {64, 64, 3}})); },
                 "input 1 (w) must have rank 4");
}

TEST(ConvErrors, WrongDtype) {
    expect_error(
        [] { infer_types({OpKind::Conv2d, "c", {}}, {{DType::F32, {1, 2, 5, 5}}, {DType::I32, {3, 2, 3, 3}}}); },
        "input 1 (w) must be f32");
}

TEST(ConvErrors, StrideBelowOne) {
    OpCall c{OpKind::Conv2d, "c", {{"stride_h", int64_t{0}}}};
    expect_error([&] { infer_types(c, f32({{1, 2, 5, 5}, {3, 2, 3, 3}})); },
                 "conv2d 'c': attribute 'stride_h' = 0 must be at least 1");
}

TEST(ConvErrors, NegativePadding) {
    OpCall c{OpKind::Conv2d, "c", {{"pad_w", int64_t{-1}}}};
    expect_error([&] { infer_types(c, f32({{1, 2, 5, 5}, {3, 2, 3, 3}})); },
                 "conv2d 'c': attribute 'pad_w' = -1 must be at least 0");
}

TEST(ConvErrors, KernelLargerThanPaddedInput) {
    expect_error([] { infer_types({OpKind::Conv2d, "c", {}}, f32({{1, 2, 2, 5}, {3, 2, 3, 3}})); },
                 "conv2d 'c': the input height 2 with padding 0 on each side is smaller than the kernel height 3; "
                 "the output would be empty");
    OpCall padded{OpKind::Conv2d, "c", {{"pad_w", int64_t{1}}}};
    expect_error([&] { infer_types(padded, f32({{1, 2, 5, 2}, {3, 2, 3, 5}})); },
                 "the input width 2 with padding 1 on each side is smaller than the kernel width 5");
}

TEST(ConvErrors, GradInputNeedsTheInputSize) {
    OpCall c{OpKind::Conv2dGradInput, "c", {{"in_w", int64_t{5}}}};
    expect_error([&] { infer_types(c, f32({{1, 3, 3, 3}, {3, 2, 3, 3}})); },
                 "conv2d_grad_input 'c': missing attribute 'in_h'");
}

TEST(ConvErrors, GradInputChannelMismatch) {
    OpCall c{OpKind::Conv2dGradInput, "c", {{"in_h", int64_t{5}}, {"in_w", int64_t{5}}}};
    expect_error([&] { infer_types(c, f32({{1, 4, 3, 3}, {3, 2, 3, 3}})); },
                 "conv2d_grad_input 'c': dy has 4 channels but the weight has 3 output channels");
}

TEST(ConvErrors, GradInputShapeMismatch) {
    OpCall c{OpKind::Conv2dGradInput, "c", {{"in_h", int64_t{6}}, {"in_w", int64_t{5}}}};
    expect_error([&] { infer_types(c, f32({{1, 3, 3, 3}, {3, 2, 3, 3}})); },
                 "conv2d_grad_input 'c': dy has shape [1, 3, 3, 3] but the convolution of an input of height "
                 "in_h and width in_w gives [1, 3, 4, 3]");
}

TEST(ConvErrors, GradWeightNeedsTheKernelSize) {
    OpCall c{OpKind::Conv2dGradWeight, "c", {{"kernel_h", int64_t{3}}}};
    expect_error([&] { infer_types(c, f32({{1, 3, 3, 3}, {1, 2, 5, 5}})); },
                 "conv2d_grad_weight 'c': missing attribute 'kernel_w'");
    OpCall zero{OpKind::Conv2dGradWeight, "c", {{"kernel_h", int64_t{0}}, {"kernel_w", int64_t{3}}}};
    expect_error([&] { infer_types(zero, f32({{1, 3, 3, 3}, {1, 2, 5, 5}})); },
                 "attribute 'kernel_h' = 0 must be at least 1");
}

TEST(ConvErrors, GradWeightShapeMismatch) {
    OpCall c{OpKind::Conv2dGradWeight, "c", {{"kernel_h", int64_t{3}}, {"kernel_w", int64_t{3}}}};
    expect_error([&] { infer_types(c, f32({{2, 3, 3, 3}, {1, 2, 5, 5}})); },
                 "conv2d_grad_weight 'c': dy has shape [2, 3, 3, 3] but the convolution of x with kernel_h and "
                 "kernel_w gives [1, 3, 3, 3]");
}

TEST(PoolErrors, MissingKernel) {
    expect_error([] { infer_types({OpKind::MaxPool2d, "p", {}}, f32({{1, 2, 4, 4}})); },
                 "max_pool2d 'p': missing attribute 'kernel_h'");
    // with_defaults has no kernel to default the stride to, and leaves it unset.
    EXPECT_FALSE(with_defaults({OpKind::MaxPool2d, "p", {}}).attrs.has("stride_h"));
}

TEST(PoolErrors, PaddingMoreThanHalfTheKernel) {
    OpCall c{OpKind::AvgPool2d, "p", {{"kernel_h", int64_t{3}}, {"kernel_w", int64_t{3}}, {"pad_h", int64_t{2}}}};
    expect_error([&] { infer_types(c, f32({{1, 2, 4, 4}})); },
                 "avg_pool2d 'p': padding (2, 0) must be at most half the kernel (3, 3)");
}

TEST(PoolErrors, WindowLargerThanInput) {
    OpCall c{OpKind::MaxPool2d, "p", {{"kernel_h", int64_t{5}}, {"kernel_w", int64_t{2}}}};
    expect_error([&] { infer_types(c, f32({{1, 2, 4, 4}})); },
                 "the input height 4 with padding 0 on each side is smaller than the kernel height 5");
}

TEST(PoolErrors, MaxPoolGradShapeMismatch) {
    OpCall c{OpKind::MaxPool2dGrad, "p", {{"kernel_h", int64_t{2}}, {"kernel_w", int64_t{2}}}};
    expect_error([&] { infer_types(c, f32({{1, 2, 3, 2}, {1, 2, 4, 4}})); },
                 "max_pool2d_grad 'p': dy has shape [1, 2, 3, 2] but pooling x gives [1, 2, 2, 2]");
}

TEST(PoolErrors, AvgPoolGradShapeMismatch) {
    OpCall c{OpKind::AvgPool2dGrad, "p",
             {{"kernel_h", int64_t{2}}, {"kernel_w", int64_t{2}}, {"in_h", int64_t{4}}, {"in_w", int64_t{6}}}};
    expect_error([&] { infer_types(c, f32({{1, 2, 2, 2}})); },
                 "avg_pool2d_grad 'p': dy has shape [1, 2, 2, 2] but pooling an input of height in_h and width "
                 "in_w gives [1, 2, 2, 3]");
}

TEST(PoolErrors, GlobalPoolRanks) {
    expect_error([] { infer_types({OpKind::GlobalAvgPool, "g", {}}, f32({{2, 3, 4}})); },
                 "global_avg_pool 'g': input 0 (x) must have rank 4");
    expect_error([] { infer_types({OpKind::GlobalAvgPoolGrad, "g", {{"in_h", int64_t{2}}}}, f32({{2, 3}})); },
                 "global_avg_pool_grad 'g': missing attribute 'in_w'");
    expect_error(
        [] {
            infer_types({OpKind::GlobalAvgPoolGrad, "g", {{"in_h", int64_t{2}}, {"in_w", int64_t{2}}}},
                        f32({{2, 3, 1, 1}}));
        },
        "input 0 (dy) must have rank 2");
}

}  // namespace
}  // namespace tessera::test
