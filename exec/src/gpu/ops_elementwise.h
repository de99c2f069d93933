// GPU kernels of the elementwise family (see exec.h for the context they run on).
//
// Element-wise operators see every tensor flat, as the CPU kernels do; one i is
// one element, so consecutive threads touch consecutive addresses. Each i reads
// its inputs before writing its output, so an output may alias an input. The
// arithmetic follows lang/defs/elementwise.cpp term by term (same association,
// constants rounded to float first) so that the results match the CPU kernels.
// The exception is bias_add_grad, a sum over every row: it is two-level
// (lanes.h), so it adds in another order than the CPU kernel.
#pragma once

#include <cmath>
#include <vector>

#include "exec.h"
#include "lanes.h"

namespace tessera::gpu {

namespace ew {

// Constants as Halide sees them: the double constant rounded to float, then
// folded in float.
constexpr float kC = static_cast<float>(kGeluC);
constexpr float kA = static_cast<float>(kGeluA);
constexpr float k3A = 3.0f * kA;

TESSERA_HD inline float gelu_inner(float x) { return kC * (x + kA * x * x * x); }

struct Add {
    TESSERA_HD static float f(float a, float b) { return a + b; }
};
struct Sub {
    TESSERA_HD static float f(float a, float b) { return a - b; }
};
struct Mul {
    TESSERA_HD static float f(float a, float b) { return a * b; }
};
struct Relu {
    TESSERA_HD static float f(float x) { return fmaxf(x, 0.0f); }
};
// relu_grad(dy, x): dy where x > 0.
struct ReluGrad {
    TESSERA_HD static float f(float dy, float x) { return x > 0.0f ? dy : 0.0f; }
};
struct Gelu {
    TESSERA_HD static float f(float x) { return 0.5f * x * (1.0f + tanhf(gelu_inner(x))); }
};
// gelu_grad(dy, x): the derivative of the tanh approximation.
struct GeluGrad {
    TESSERA_HD static float f(float dy, float x) {
        float t = tanhf(gelu_inner(x));
        float dinner = kC * (1.0f + k3A * x * x);
        return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner);
    }
};
struct Tanh {
    TESSERA_HD static float f(float x) { return tanhf(x); }
};
struct Erf {
    TESSERA_HD static float f(float x) { return erff(x); }
};
// erf_grad(dy, x) = dy * 2/sqrt(pi) * exp(-x^2).
struct ErfGrad {
    TESSERA_HD static float f(float dy, float x) { return dy * 1.1283791670955126f * expf(-x * x); }
};
// tanh_grad(dy, y), y = tanh(x).
struct TanhGrad {
    TESSERA_HD static float f(float dy, float y) { return dy * (1.0f - y * y); }
};
struct Sigmoid {
    TESSERA_HD static float f(float x) { return 1.0f / (1.0f + expf(-x)); }
};
// sigmoid_grad(dy, y), y = sigmoid(x).
struct SigmoidGrad {
    TESSERA_HD static float f(float dy, float y) { return dy * y * (1.0f - y); }
};

template <class Op>
struct UnaryKernel {
    const float *x;
    float *y;
    TESSERA_HD void operator()(int64_t i) const { y[i] = Op::f(x[i]); }
};

template <class Op>
struct BinaryKernel {
    const float *a, *b;
    float *y;
    TESSERA_HD void operator()(int64_t i) const { y[i] = Op::f(a[i], b[i]); }
};

struct ScaleKernel {
    const float *x;
    float *y;
    float alpha;
    TESSERA_HD void operator()(int64_t i) const { y[i] = x[i] * alpha; }
};

// x viewed as [outer, C, inner]; i is the flat element.
struct BiasAddKernel {
    const float *x, *b;
    float *y;
    int64_t channels, inner;
    TESSERA_HD void operator()(int64_t i) const { y[i] = x[i] + b[(i / inner) % channels]; }
};

// A dense layer's bias (inner 1): one division fewer an element.
struct DenseBiasAddKernel {
    const float *x, *b;
    float *y;
    int64_t channels;
    TESSERA_HD void operator()(int64_t i) const { y[i] = x[i] + b[i % channels]; }
};

// db[ch] = the sum of dy[o, ch, k] over o and k, two-level (lanes.h): a
// dense layer's bias (inner == 1) in column lanes over the rows, one with an
// inner extent (a convolution's) in channel lanes.
struct BiasColumnTotal {
    const float *partial;
    float *db;
    int64_t D, lanes;
    TESSERA_HD void operator()(int64_t d) const { db[d] = lanes::column_total(partial, d, D, lanes, 1, 0); }
};

struct BiasChannelTotal {
    const float *partial;
    float *db;
    int64_t c0, lanes;
    TESSERA_HD void operator()(int64_t c) const { db[c0 + c] = lanes::channel_total(partial, c, lanes, 1, 0); }
};

template <class Exec>
void bias_add_grad(Exec &ex, const float *dy, float *db, int64_t outer, int64_t channels, int64_t inner) {
    using namespace lanes;
    if (inner == 1) {
        const int64_t floats = static_cast<int64_t>(ex.workspace_bytes() / sizeof(float));
        const int64_t n = column_lanes(floats, outer, channels, 1, 0);
        TESSERA_INTERNAL_ASSERT(n >= 1, "a workspace of ", ex.workspace_bytes(), " bytes holds no bias sums of ",
                                channels, " channels");
        float *partial = ex.workspace(static_cast<size_t>(n * channels) * sizeof(float));
        ex.for_each(n * channels, ColumnLanes<SumOf<float>>{{dy}, outer, channels, n, partial});
        ex.for_each(channels, BiasColumnTotal{partial, db, channels, n});
        return;
    }
    const ChannelView v = channel_view(outer, channels, inner);
    for_channel_chunks<float>(ex, v, 1, [&](const ChannelChunk<float> &k) {
        ex.for_each(k.cc * v.lanes, ChannelLanes<SumOf<float>>{{dy}, v, k.c0, k.partial});
        const FoldedLanes<float> sums = fold_lanes(ex, v, k, 1);
        ex.for_each(k.cc, BiasChannelTotal{sums.partial, db, k.c0, sums.v.lanes});
    });
}

template <class Op, class Exec>
void unary(Exec &ex, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    ex.for_each(in[0].type.elements(), UnaryKernel<Op>{f32(in[0]), f32_out(out[0])});
}

template <class Op, class Exec>
void binary(Exec &ex, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    ex.for_each(in[0].type.elements(), BinaryKernel<Op>{f32(in[0]), f32(in[1]), f32_out(out[0])});
}

}  // namespace ew

template <class Exec>
void run_elementwise(Exec &ex, const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    switch (c.kind) {
    case OpKind::BiasAdd:
    case OpKind::BiasAddGrad: {
        const Shape &s = in[0].type.shape;
        int rank = static_cast<int>(s.size());
        int axis = normalize_axis(c.attrs.get_int(c.who(), "axis", -1), rank);
        int64_t outer = extent_product(s, 0, axis), channels = s[axis], inner = extent_product(s, axis + 1, rank);
        const int64_t n = in[0].type.elements();
        if (c.kind == OpKind::BiasAdd && inner == 1)
            ex.for_each(n, ew::DenseBiasAddKernel{f32(in[0]), f32(in[1]), f32_out(out[0]), channels});
        else if (c.kind == OpKind::BiasAdd)
            ex.for_each(n, ew::BiasAddKernel{f32(in[0]), f32(in[1]), f32_out(out[0]), channels, inner});
        else
            ew::bias_add_grad(ex, f32(in[0]), f32_out(out[0]), outer, channels, inner);
        return;
    }
    case OpKind::Add: return ew::binary<ew::Add>(ex, in, out);
    case OpKind::Sub: return ew::binary<ew::Sub>(ex, in, out);
    case OpKind::Mul: return ew::binary<ew::Mul>(ex, in, out);
    case OpKind::Scale: {
        float alpha = static_cast<float>(c.attrs.get_float(c.who(), "alpha"));
        ex.for_each(in[0].type.elements(), ew::ScaleKernel{f32(in[0]), f32_out(out[0]), alpha});
        return;
    }
    case OpKind::Relu: return ew::unary<ew::Relu>(ex, in, out);
    case OpKind::ReluGrad: return ew::binary<ew::ReluGrad>(ex, in, out);
    case OpKind::Gelu: return ew::unary<ew::Gelu>(ex, in, out);
    case OpKind::GeluGrad: return ew::binary<ew::GeluGrad>(ex, in, out);
    case OpKind::Tanh: return ew::unary<ew::Tanh>(ex, in, out);
    case OpKind::TanhGrad: return ew::binary<ew::TanhGrad>(ex, in, out);
    case OpKind::Sigmoid: return ew::unary<ew::Sigmoid>(ex, in, out);
    case OpKind::SigmoidGrad: return ew::binary<ew::SigmoidGrad>(ex, in, out);
    case OpKind::Erf: return ew::unary<ew::Erf>(ex, in, out);
    case OpKind::ErfGrad: return ew::binary<ew::ErfGrad>(ex, in, out);
    default: TESSERA_INTERNAL_ASSERT(false, "not an elementwise operator: ", c.who());
    }
}

}  // namespace tessera::gpu
