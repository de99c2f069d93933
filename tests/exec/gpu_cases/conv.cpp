// The conv family: the three convolutions over the window variants that change
// the im2col/col2im index paths (padding, strides that skip the last rows,
// rectangular kernels, pointwise kernels, an output larger than the input), the
// pooling operators (default strides, overlapping windows, padding, ties for the
// max-pool gradient, all-negative windows next to the padding), and global
// average pooling. Below the cases, a test that runs the chunked paths (several
// chunks of images, bands of one image, argmaxes a chunk of planes at a time)
// through a HostExec with a small workspace.
#include <cmath>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "cases.h"
#include "gpu/ops.h"

namespace tessera::test {

namespace {

struct Win {
    int64_t kh, kw, sh, sw, ph, pw;
};

int64_t swept(int64_t in, int64_t k, int64_t pad, int64_t stride) { return (in + 2 * pad - k) / stride + 1; }

Attrs window_attrs(const Win &g, bool kernel) {
    Attrs a{{"stride_h", g.sh}, {"stride_w", g.sw}, {"pad_h", g.ph}, {"pad_w", g.pw}};
    if (kernel) a.set("kernel_h", g.kh).set("kernel_w", g.kw);
    return a;
}

// conv2d, conv2d_grad_input and conv2d_grad_weight of one geometry.
void convolutions(std::vector<GpuCase> &out, const std::string &label, Shape x, int64_t co, const Win &g) {
    const Shape w = {co, x[1], g.kh, g.kw};
    const Shape y = {x[0], co, swept(x[2], g.kh, g.ph, g.sh), swept(x[3], g.kw, g.pw, g.sw)};
    auto add = [&](OpKind kind, const char *op, Attrs attrs, std::vector<TensorType> in) {
        GpuCase c{std::string(op) + " " + label, OpCall{kind, label, std::move(attrs)}, std::move(in), {}};
        // GEMM and col2im sum in other orders than BLAS and the CPU col2im.
        c.rtol = 1e-4;
        c.atol = 2e-5;
        out.push_back(std::move(c));
    };
    add(OpKind::Conv2d, "conv2d", window_attrs(g, false), {{DType::F32, x}, {DType::F32, w}});
    add(OpKind::Conv2dGradInput, "conv2d_grad_input",
        window_attrs(g, false).set("in_h", x[2]).set("in_w", x[3]), {{DType::F32, y}, {DType::F32, w}});
    add(OpKind::Conv2dGradWeight, "conv2d_grad_weight", window_attrs(g, true), {{DType::F32, y}, {DType::F32, x}});
}

// Inputs drawn from `levels` values only, so that max-pool windows hold ties.
std::function<void(int, std::vector<float> &, std::vector<int32_t> &)> few_levels(int levels, float lo) {
    return [levels, lo](int i, std::vector<float> &f, std::vector<int32_t> &) {
        std::mt19937 gen(99 + 17 * i);
        std::uniform_int_distribution<int> d(0, levels - 1);
        for (float &v : f) v = lo + 0.5f * static_cast<float>(d(gen));
    };
}

// The four window-pooling operators of one geometry. `strides` false leaves the
// strides out, so that they default to the kernel.
void poolings(std::vector<GpuCase> &out, const std::string &label, Shape x, const Win &g, bool strides = true,
              std::function<void(int, std::vector<float> &, std::vector<int32_t> &)> fill = nullptr) {
    const Shape y = {x[0], x[1], swept(x[2], g.kh, g.ph, g.sh), swept(x[3], g.kw, g.pw, g.sw)};
    Attrs attrs{{"kernel_h", g.kh}, {"kernel_w", g.kw}, {"pad_h", g.ph}, {"pad_w", g.pw}};
    if (strides) attrs.set("stride_h", g.sh).set("stride_w", g.sw);
    Attrs grad = attrs;
    grad.set("in_h", x[2]).set("in_w", x[3]);
    auto add = [&](OpKind kind, const char *op, Attrs a, std::vector<TensorType> in) {
        GpuCase c{std::string(op) + " " + label, OpCall{kind, label, std::move(a)}, std::move(in), fill};
        out.push_back(std::move(c));
    };
    add(OpKind::MaxPool2d, "max_pool2d", attrs, {{DType::F32, x}});
    add(OpKind::MaxPool2dGrad, "max_pool2d_grad", attrs, {{DType::F32, y}, {DType::F32, x}});
    add(OpKind::AvgPool2d, "avg_pool2d", attrs, {{DType::F32, x}});
    add(OpKind::AvgPool2dGrad, "avg_pool2d_grad", grad, {{DType::F32, y}});
}

}  // namespace

std::vector<GpuCase> gpu_cases_conv() {
    std::vector<GpuCase> cases;
    convolutions(cases, "3x3 pad 1", {2, 3, 7, 7}, 5, {3, 3, 1, 1, 1, 1});
    convolutions(cases, "3x3 stride 2 pad 1 odd", {2, 4, 9, 11}, 6, {3, 3, 2, 2, 1, 1});
    convolutions(cases, "pointwise", {3, 5, 6, 5}, 7, {1, 1, 1, 1, 0, 0});
    convolutions(cases, "1x1 stride 2", {2, 3, 7, 8}, 4, {1, 1, 2, 2, 0, 0});
    convolutions(cases, "1x1 pad 1", {1, 2, 3, 4}, 3, {1, 1, 1, 1, 1, 1});
    convolutions(cases, "2x3 stride (2, 1) pad (1, 0)", {1, 2, 8, 6}, 3, {2, 3, 2, 1, 1, 0});
    convolutions(cases, "5x5 stride 3 pad 2", {2, 2, 10, 13}, 3, {5, 5, 3, 3, 2, 2});
    convolutions(cases, "whole image", {1, 1, 4, 4}, 1, {4, 4, 1, 1, 0, 0});
    convolutions(cases, "3x3 pad 2 (output larger)", {2, 3, 5, 4}, 2, {3, 3, 1, 1, 2, 2});
    convolutions(cases, "one pixel", {2, 3, 1, 1}, 4, {1, 1, 1, 1, 0, 0});
    {
        // No window attributes: stride 1, no padding.
        GpuCase c{"conv2d defaults", OpCall{OpKind::Conv2d, "plain", {}},
                  {{DType::F32, {2, 3, 6, 5}}, {DType::F32, {4, 3, 2, 2}}}, {}};
        c.rtol = 1e-4;
        cases.push_back(c);
    }

    poolings(cases, "2x2 default stride", {2, 3, 8, 8}, {2, 2, 2, 2, 0, 0}, false);
    poolings(cases, "3x3 stride 2 pad 1 odd", {2, 2, 9, 11}, {3, 3, 2, 2, 1, 1});
    poolings(cases, "3x2 stride (1, 2) pad (1, 1)", {1, 3, 7, 6}, {3, 2, 1, 2, 1, 1});
    poolings(cases, "2x2 stride 2 odd input", {2, 2, 7, 9}, {2, 2, 2, 2, 0, 0});
    poolings(cases, "3x3 stride 1 pad 1 ties", {2, 2, 6, 7}, {3, 3, 1, 1, 1, 1}, true, few_levels(3, -0.5f));
    poolings(cases, "2x2 stride 1 pad 1 negative", {1, 2, 5, 4}, {2, 2, 1, 1, 1, 1}, true, few_levels(4, -3.0f));
    poolings(cases, "1x1", {1, 2, 3, 5}, {1, 1, 1, 1, 0, 0});

    for (Shape x : {Shape{2, 3, 5, 7}, Shape{1, 1, 1, 1}, Shape{2, 2, 40, 40}}) {
        std::string dims = shape_str(x);
        GpuCase f{"global_avg_pool " + dims, OpCall{OpKind::GlobalAvgPool, "gap", {}}, {{DType::F32, x}}, {}};
        f.rtol = 1e-4;  // the CPU kernel sums a plane in vector lanes
        cases.push_back(f);
        cases.push_back({"global_avg_pool_grad " + dims,
                         OpCall{OpKind::GlobalAvgPoolGrad, "gap", Attrs{{"in_h", x[2]}, {"in_w", x[3]}}},
                         {{DType::F32, {x[0], x[1]}}},
                         {}});
    }
    return cases;
}

namespace {

// Runs `call` on the CPU kernel and through a HostExec with `workspace` bytes;
// returns the largest |gpu - cpu| / (atol + rtol |cpu|), which passes at <= 1.
double worst_ratio(const OpCall &call, const std::vector<TensorType> &inputs, size_t workspace) {
    std::vector<std::vector<float>> in(inputs.size());
    std::vector<TensorRef> in_refs;
    std::mt19937 gen(5);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (size_t i = 0; i < inputs.size(); i++) {
        in[i].resize(inputs[i].elements());
        for (float &v : in[i]) v = d(gen);
        in_refs.push_back({in[i].data(), inputs[i]});
    }
    TensorType out = infer_types(call, inputs)[0];
    std::vector<float> cpu(out.elements()), gpu(out.elements(), std::nanf(""));
    run_op(call, in_refs, {{cpu.data(), out}});
    gpu::HostExec ex(workspace);
    gpu::run_op(ex, call, in_refs, {{gpu.data(), out}});
    double worst = 0;
    for (size_t e = 0; e < cpu.size(); e++) {
        double r = std::fabs(double(gpu[e]) - cpu[e]) / (2e-5 + 1e-4 * std::fabs(cpu[e]));
        worst = std::isnan(r) ? INFINITY : std::max(worst, r);
    }
    return worst;
}

TEST(GpuKernelsHostConv, SmallWorkspacesChunkAndMatchTheCpuKernel) {
    // x [5, 3, 9, 10], 3x3 stride 2 pad 1: K = 27 taps, P = 5 * 5 = 25 pixels, so
    // one image's columns are 675 floats (grad_weight: (27 + 4) * 25 = 775).
    const Shape x = {5, 3, 9, 10}, w = {4, 3, 3, 3}, y = {5, 4, 5, 5};
    Attrs win{{"stride_h", int64_t{2}}, {"stride_w", int64_t{2}}, {"pad_h", int64_t{1}}, {"pad_w", int64_t{1}}};
    Attrs gi = win, gw = win;
    gi.set("in_h", int64_t{9}).set("in_w", int64_t{10});
    gw.set("kernel_h", int64_t{3}).set("kernel_w", int64_t{3});
    // Two images per chunk (the last chunk holds one), then bands of 7 and of 1 pixel.
    for (size_t floats : {size_t{2 * 775}, size_t{27 * 7}, size_t{27}}) {
        SCOPED_TRACE(floats);
        EXPECT_LE(worst_ratio({OpKind::Conv2d, "c", win}, {{DType::F32, x}, {DType::F32, w}}, floats * 4), 1.0);
        EXPECT_LE(worst_ratio({OpKind::Conv2dGradInput, "c", gi}, {{DType::F32, y}, {DType::F32, w}}, floats * 4),
                  1.0);
        EXPECT_LE(worst_ratio({OpKind::Conv2dGradWeight, "c", gw}, {{DType::F32, y}, {DType::F32, x}}, floats * 4),
                  1.0);
    }
    // max_pool2d_grad, 3x3 stride 1 pad 1 on [2, 3, 6, 5]: 30 windows per plane.
    // Argmaxes two planes at a time (the last chunk one), then none (recomputed).
    Attrs pool{{"kernel_h", int64_t{3}}, {"kernel_w", int64_t{3}}, {"stride_h", int64_t{1}},
               {"stride_w", int64_t{1}}, {"pad_h", int64_t{1}},    {"pad_w", int64_t{1}}};
    const Shape px = {2, 3, 6, 5};
    for (size_t bytes : {size_t{2 * 30 * 4}, size_t{8}}) {
        SCOPED_TRACE(bytes);
        EXPECT_LE(worst_ratio({OpKind::MaxPool2dGrad, "p", pool}, {{DType::F32, px}, {DType::F32, px}}, bytes), 1.0);
    }
}

TEST(GpuKernelsHostConv, APixelLargerThanTheWorkspaceIsAnError) {
    std::vector<float> xs(1 * 3 * 4 * 4, 1.0f), ws(2 * 3 * 3 * 3, 1.0f), ys(2 * 2 * 2, 0.0f);
    TensorRef x{xs.data(), {DType::F32, {1, 3, 4, 4}}}, w{ws.data(), {DType::F32, {2, 3, 3, 3}}},
        y{ys.data(), {DType::F32, {1, 2, 2, 2}}};
    gpu::HostExec ex(64);  // 16 floats; one pixel has 27 taps
    try {
        gpu::run_op(ex, OpCall{OpKind::Conv2d, "big", {}}, {x, w}, {y});
        FAIL() << "no error";
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("conv2d 'big': one output pixel needs 108 bytes of GPU workspace for "
                                             "its columns, more than the 64 available"),
                  std::string::npos)
            << e.what();
    }
}

}  // namespace

}  // namespace tessera::test
