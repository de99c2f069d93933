// GPU kernels of the elementwise family (see exec.h for the context they run on).
//
// Element-wise operators see every tensor flat, as the CPU kernels do; one i is
// one element, so consecutive threads touch consecutive addresses. Each i reads
// its inputs before writing its output, so an output may alias an input. The
// arithmetic follows lang/defs/elementwise.cpp term by term (same association,
// constants rounded to float first) so that the results match the CPU kernels.
#pragma once

#include <cmath>
#include <vector>

#include "exec.h"

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

// db[ch] = the sum of dy[o, ch, k] over o (outer loop) and k (inner loop), the
// order of the Halide reduction. i is the channel: one thread per channel,
// which is coalesced when the channel axis is the last one (inner == 1), the
// common case of a dense layer's bias.
struct BiasAddGradKernel {
    const float *dy;
    float *db;
    int64_t outer, channels, inner;
    TESSERA_HD void operator()(int64_t ch) const {
        float acc = 0.0f;
        for (int64_t o = 0; o < outer; o++) {
            const float *p = dy + (o * channels + ch) * inner;
            for (int64_t k = 0; k < inner; k++) acc += p[k];
        }
        db[ch] = acc;
    }
};

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
        if (c.kind == OpKind::BiasAdd)
            ex.for_each(in[0].type.elements(),
                        ew::BiasAddKernel{f32(in[0]), f32(in[1]), f32_out(out[0]), channels, inner});
        else
            ex.for_each(channels, ew::BiasAddGradKernel{f32(in[0]), f32_out(out[0]), outer, channels, inner});
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
