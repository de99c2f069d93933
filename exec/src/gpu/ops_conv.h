// GPU kernels of the conv family (see exec.h for the context they run on).
// Layout NCHW, weights [Co, Ci, KH, KW], as in lang/src/conv.cpp; the meaning of
// every operator is its Halide description in lang/defs/conv.cpp.
//
// The three convolutions are im2col + GEMM (cuBLAS on the device). The columns
// of a chunk of images live in the workspace as one matrix col[K, L], K =
// Ci*KH*KW taps (rows), L = images * cols (column b*cols + j is pixel p0 + j of
// image b), so that:
//   conv2d:             y_b[Co, cols]  = w[Co, K] . col_b         (one batched GEMM)
//   conv2d_grad_input:  col_b = w^T . dy_b[Co, cols]              (one batched GEMM),
//                       then col2im in gather form: each dx element sums the column
//                       entries read from it (no atomics, deterministic);
//   conv2d_grad_weight: dw[Co, K] (+)= dy_chunk[Co, L] . col^T    (one GEMM per chunk;
//                       beta = 0 for the first chunk, 1 after).
// A chunk is as many whole images as the workspace holds or, for an image too
// large for it, one band of its output pixels.
//
// Pooling ops are direct functors, one output (or, for the gradients, one input
// pixel, gathering) per index; max_pool2d_grad first writes each window's argmax
// to the workspace, a chunk of planes at a time.
#pragma once

#include <cfloat>
#include <climits>
#include <vector>

#include "exec.h"

namespace tessera::gpu {

namespace conv_detail {

// The geometry of one convolution or pooling call: input (or dx) [N, C, H, W],
// output (or dy) [N, Co, OH, OW], kernel KH x KW. Plain values, copied into functors.
struct Geo {
    int64_t n, c, h, w;
    int64_t co, oh, ow;
    int64_t kh, kw, sh, sw, ph, pw;
};

// Column rows of a chunk: col[k * L + b * cols + j] is tap k = (ci, a, bb) of
// pixel p0 + j of image n0 + b, zero where the tap reads the padding. Indices
// within a chunk fit in 32 bits (the chunk fits the workspace; run_conv checks),
// which keeps the divisions cheap on the device.
struct Im2col {
    const float *x;
    float *col;
    Geo g;
    int64_t n0, p0;
    int cols, L;
    TESSERA_HD void operator()(int64_t i) const {
        const int t = static_cast<int>(i);
        const int k = t / L, rem = t - k * L;
        const int b = rem / cols, j = rem - b * cols;
        const int kw = static_cast<int>(g.kw), kh = static_cast<int>(g.kh), ow_n = static_cast<int>(g.ow);
        const int bb = k % kw, a = (k / kw) % kh, ci = k / (kw * kh);
        const int p = static_cast<int>(p0) + j, oh = p / ow_n, ow = p - oh * ow_n;
        const int64_t ih = oh * g.sh + a - g.ph, iw = ow * g.sw + bb - g.pw;
        float v = 0.0f;
        if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) v = x[(((n0 + b) * g.c + ci) * g.h + ih) * g.w + iw];
        col[t] = v;
    }
};

// dy of a chunk of images repacked as [Co, L] (column b*cols + j: pixel p0 + j of
// image n0 + b), so that the weight gradient of the chunk is a single GEMM.
struct PackDy {
    const float *dy;
    float *out;
    Geo g;
    int64_t n0, p0, cols, L;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t co = i / L, rem = i - co * L, b = rem / cols, j = rem - b * cols;
        out[i] = dy[((n0 + b) * g.co + co) * (g.oh * g.ow) + p0 + j];
    }
};

// Calls f(a, bb, oh, ow) for each tap (a, bb) of a window, at output pixel
// (oh, ow), that reads input pixel (ih, iw): kernel rows outer, columns
// inner. Only rows and columns congruent to (ih + ph, iw + pw) modulo the
// stride reach the pixel, so the loops step by the stride.
template <typename F>
TESSERA_HD inline void for_each_tap_reading(const Geo &g, int64_t ih, int64_t iw, F &&f) {
    const int64_t th0 = ih + g.ph, tw0 = iw + g.pw;
    for (int64_t a = th0 % g.sh; a < g.kh && a <= th0; a += g.sh) {
        const int64_t oh = (th0 - a) / g.sh;
        if (oh >= g.oh) continue;
        for (int64_t bb = tw0 % g.sw; bb < g.kw && bb <= tw0; bb += g.sw) {
            const int64_t ow = (tw0 - bb) / g.sw;
            if (ow < g.ow) f(a, bb, oh, ow);
        }
    }
}

// col2im as a gather: dx element (n0 + b, ci, ih, iw) sums, over the taps (a, bb)
// whose output pixel (oh, ow) lies in the band [p0, p1), the column entry that
// tap read from it (for_each_tap_reading). `accumulate` adds
// to dx (a later band of the same image); otherwise dx is overwritten.
struct Col2imGather {
    const float *col;
    float *dx;
    Geo g;
    int64_t n0, p0, p1, cols, L;
    bool accumulate;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t iw = i % g.w, r1 = i / g.w, ih = r1 % g.h, r2 = r1 / g.h, ci = r2 % g.c, b = r2 / g.c;
        float acc = 0.0f;
        for_each_tap_reading(g, ih, iw, [&](int64_t a, int64_t bb, int64_t oh, int64_t ow) {
            const int64_t p = oh * g.ow + ow;
            if (p >= p0 && p < p1) acc += col[((ci * g.kh + a) * g.kw + bb) * L + b * cols + (p - p0)];
        });
        const int64_t at = (n0 * g.c) * g.h * g.w + i;
        dx[at] = accumulate ? dx[at] + acc : acc;
    }
};

// The window of output (oh, ow) in plane `plane`: the first maximum of its
// row-major scan (kh outer, kw inner) as the tap kh*KW + kw. Padding reads the
// lowest float and the scan starts from it with a strict >, as the description
// does, so a window of lowest floats reports tap 0.
TESSERA_HD inline int64_t window_argmax(const float *x, const Geo &g, int64_t plane, int64_t oh, int64_t ow) {
    const float *xp = x + plane * g.h * g.w;
    float best = -FLT_MAX;
    int64_t arg = 0;
    for (int64_t a = 0; a < g.kh; a++) {
        const int64_t ih = oh * g.sh + a - g.ph;
        for (int64_t bb = 0; bb < g.kw; bb++) {
            const int64_t iw = ow * g.sw + bb - g.pw;
            const float v = (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) ? xp[ih * g.w + iw] : -FLT_MAX;
            if (v > best) {
                best = v;
                arg = a * g.kw + bb;
            }
        }
    }
    return arg;
}

// max_pool2d and avg_pool2d: i = output element (plane, oh, ow).
struct Pool {
    const float *x;
    float *y;
    Geo g;
    bool max;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t ow = i % g.ow, r = i / g.ow, oh = r % g.oh, plane = r / g.oh;
        const float *xp = x + plane * g.h * g.w;
        float acc = max ? -FLT_MAX : 0.0f;
        for (int64_t a = 0; a < g.kh; a++) {
            const int64_t ih = oh * g.sh + a - g.ph;
            const bool row_in = ih >= 0 && ih < g.h;
            for (int64_t bb = 0; bb < g.kw; bb++) {
                const int64_t iw = ow * g.sw + bb - g.pw;
                const bool in = row_in && iw >= 0 && iw < g.w;
                if (max) acc = fmaxf(acc, in ? xp[ih * g.w + iw] : -FLT_MAX);
                else if (in) acc += xp[ih * g.w + iw];
            }
        }
        // Average pooling counts the padding: the divisor is always KH*KW.
        y[i] = max ? acc : acc / static_cast<float>(g.kh * g.kw);
    }
};

// The argmax tap of every window of planes [pl0, pl0 + chunk), into `arg`.
struct Argmax {
    const float *x;
    int32_t *arg;
    Geo g;
    int64_t pl0;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t ow = i % g.ow, r = i / g.ow, oh = r % g.oh, plane = pl0 + r / g.oh;
        arg[i] = static_cast<int32_t>(window_argmax(x, g, plane, oh, ow));
    }
};

// Pooling gradients as gathers: i = input pixel of planes [pl0, ...); the sum
// over the window taps (kh outer, kw inner) that read it of dy at the window's
// output, for max pooling only where that tap is the window's argmax (taken from
// `arg`, the chunk's argmaxes, or recomputed where arg is null).
struct PoolGradGather {
    const float *dy;
    const float *x;  // max pooling without an argmax buffer
    const int32_t *arg;
    float *dx;
    Geo g;
    int64_t pl0;
    bool max;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t iw = i % g.w, r = i / g.w, ih = r % g.h, plane = pl0 + r / g.h;
        const float *dyp = dy + plane * g.oh * g.ow;
        float acc = 0.0f;
        for_each_tap_reading(g, ih, iw, [&](int64_t a, int64_t bb, int64_t oh, int64_t ow) {
            if (max) {
                const int64_t tap =
                    arg ? arg[(plane - pl0) * g.oh * g.ow + oh * g.ow + ow] : window_argmax(x, g, plane, oh, ow);
                if (tap != a * g.kw + bb) return;
            }
            acc += dyp[oh * g.ow + ow];
        });
        const int64_t at = pl0 * g.h * g.w + i;
        dx[at] = max ? acc : acc / static_cast<float>(g.kh * g.kw);
    }
};

// global_avg_pool: i = plane, summed serially (rows outer, as the
// description), then divided by `divisor` (the plane's size; 1 for the
// staged sum, ops_staged.h).
struct GlobalAvg {
    const float *x;
    float *y;
    int64_t hw;
    float divisor;
    TESSERA_HD void operator()(int64_t i) const {
        const float *xp = x + i * hw;
        float acc = 0.0f;
        for (int64_t e = 0; e < hw; e++) acc += xp[e];
        y[i] = acc / divisor;
    }
};

struct GlobalAvgGrad {
    const float *dy;
    float *dx;
    int64_t hw;
    TESSERA_HD void operator()(int64_t i) const { dx[i] = dy[i / hw] / static_cast<float>(hw); }
};

// A chunk of the convolution's pixels: images [n0, n0 + images), pixels [p0, p0 + cols).
struct Chunking {
    int64_t images;  // whole images per chunk, or 1 with bands
    int64_t band;    // pixels per chunk: P for whole images
};

// `per_pixel` floats of workspace per pixel of a chunk of several images,
// `per_pixel_band` for a band of one image.
inline Chunking plan_chunks(const OpCall &c, int64_t ws_floats, int64_t n, int64_t pixels, int64_t per_pixel,
                            int64_t per_pixel_band) {
    // Column indices inside a chunk, and pixel indices, are 32-bit in Im2col.
    TESSERA_CHECK(pixels <= INT_MAX, c.who(), ": ", pixels, " output pixels per image are more than the GPU kernels ",
                  "index (", INT_MAX, "); split the image");
    ws_floats = ws_floats < INT_MAX ? ws_floats : INT_MAX;
    if (pixels * per_pixel <= ws_floats) {
        int64_t images = ws_floats / (pixels * per_pixel);
        return {images < n ? images : n, pixels};
    }
    int64_t band = ws_floats / per_pixel_band;
    TESSERA_CHECK(band >= 1, c.who(), ": one output pixel needs ", per_pixel_band * 4,
                  " bytes of GPU workspace for its columns, more than the ", ws_floats * 4,
                  " available; use fewer input channels or a smaller kernel");
    return {1, band};
}

inline Geo conv_geo(const OpCall &c, const Shape &x, const Shape &w, const Shape &y) {
    auto attr = [&](const char *name) { return c.attrs.get_int(c.who(), name); };
    return {x[0], x[1], x[2], x[3], w[0], y[2], y[3], w[2], w[3],
            attr("stride_h"), attr("stride_w"), attr("pad_h"), attr("pad_w")};
}

template <class Exec>
void conv2d(Exec &ex, const OpCall &c, const Geo &g, const float *x, const float *w, float *y) {
    const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow;
    if (g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0) {
        // A pointwise kernel reads each image as it is: its planes are the columns.
        ex.gemm(false, false, g.co, P, K, 1.0f, w, K, x, P, 0.0f, y, P, g.n, 0, g.c * P, g.co * P);
        return;
    }
    Chunking ch = plan_chunks(c, static_cast<int64_t>(ex.workspace_bytes() / 4), g.n, P, K, K);
    for (int64_t n0 = 0; n0 < g.n; n0 += ch.images) {
        const int64_t imgs = n0 + ch.images <= g.n ? ch.images : g.n - n0;
        for (int64_t p0 = 0; p0 < P; p0 += ch.band) {
            const int64_t cols = p0 + ch.band <= P ? ch.band : P - p0, L = imgs * cols;
            float *col = ex.workspace(static_cast<size_t>(K * L) * sizeof(float));
            ex.for_each(K * L, Im2col{x, col, g, n0, p0, static_cast<int>(cols), static_cast<int>(L)});
            ex.gemm(false, false, g.co, cols, K, 1.0f, w, K, col, L, 0.0f, y + n0 * g.co * P + p0, P, imgs, 0, cols,
                    g.co * P);
        }
    }
}

template <class Exec>
void conv2d_grad_input(Exec &ex, const OpCall &c, const Geo &g, const float *dy, const float *w, float *dx) {
    const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow;
    if (g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0) {
        ex.gemm(true, false, K, P, g.co, 1.0f, w, K, dy, P, 0.0f, dx, P, g.n, 0, g.co * P, g.c * P);
        return;
    }
    Chunking ch = plan_chunks(c, static_cast<int64_t>(ex.workspace_bytes() / 4), g.n, P, K, K);
    for (int64_t n0 = 0; n0 < g.n; n0 += ch.images) {
        const int64_t imgs = n0 + ch.images <= g.n ? ch.images : g.n - n0;
        for (int64_t p0 = 0; p0 < P; p0 += ch.band) {
            const int64_t cols = p0 + ch.band <= P ? ch.band : P - p0, L = imgs * cols;
            float *col = ex.workspace(static_cast<size_t>(K * L) * sizeof(float));
            ex.gemm(true, false, K, cols, g.co, 1.0f, w, K, dy + n0 * g.co * P + p0, P, 0.0f, col, L, imgs,
                    0, g.co * P, cols);
            ex.for_each(imgs * g.c * g.h * g.w, Col2imGather{col, dx, g, n0, p0, p0 + cols, cols, L, p0 > 0});
        }
    }
}

template <class Exec>
void conv2d_grad_weight(Exec &ex, const OpCall &c, const Geo &g, const float *dy, const float *x, float *dw) {
    const int64_t K = g.c * g.kh * g.kw, P = g.oh * g.ow;
    // Several images need dy repacked next to their columns; a band of one image
    // reads dy in place.
    Chunking ch = plan_chunks(c, static_cast<int64_t>(ex.workspace_bytes() / 4), g.n, P, K + g.co, K);
    bool first = true;
    for (int64_t n0 = 0; n0 < g.n; n0 += ch.images) {
        const int64_t imgs = n0 + ch.images <= g.n ? ch.images : g.n - n0;
        for (int64_t p0 = 0; p0 < P; p0 += ch.band) {
            const int64_t cols = p0 + ch.band <= P ? ch.band : P - p0, L = imgs * cols;
            const bool pack = imgs > 1;
            float *col = ex.workspace(static_cast<size_t>((K + (pack ? g.co : 0)) * L) * sizeof(float));
            ex.for_each(K * L, Im2col{x, col, g, n0, p0, static_cast<int>(cols), static_cast<int>(L)});
            const float *a = dy + n0 * g.co * P + p0;
            int64_t lda = P;
            if (pack) {
                float *packed = col + K * L;
                ex.for_each(g.co * L, PackDy{dy, packed, g, n0, p0, cols, L});
                a = packed;
                lda = L;
            }
            ex.gemm(false, true, g.co, K, L, 1.0f, a, lda, col, L, first ? 0.0f : 1.0f, dw, K);
            first = false;
        }
    }
}

template <class Exec>
void max_pool2d_grad(Exec &ex, const Geo &g, const float *dy, const float *x, float *dx) {
    const int64_t planes = g.n * g.c, out_plane = g.oh * g.ow, in_plane = g.h * g.w;
    const int64_t per_chunk = static_cast<int64_t>(ex.workspace_bytes() / sizeof(int32_t)) / out_plane;
    if (per_chunk == 0) {
        // A plane of windows larger than the workspace: recompute each argmax
        // where it is needed (KH*KW times over) instead.
        ex.for_each(planes * in_plane, PoolGradGather{dy, x, nullptr, dx, g, 0, true});
        return;
    }
    for (int64_t pl0 = 0; pl0 < planes; pl0 += per_chunk) {
        const int64_t chunk = pl0 + per_chunk <= planes ? per_chunk : planes - pl0;
        auto *arg = reinterpret_cast<int32_t *>(ex.workspace(static_cast<size_t>(chunk * out_plane) * sizeof(int32_t)));
        ex.for_each(chunk * out_plane, Argmax{x, arg, g, pl0});
        ex.for_each(chunk * in_plane, PoolGradGather{dy, x, arg, dx, g, pl0, true});
    }
}

}  // namespace conv_detail

template <class Exec>
void run_conv(Exec &ex, const OpCall &call, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    using namespace conv_detail;
    const OpCall c = with_defaults(call);
    const Shape &ys = out[0].type.shape;
    float *y = f32_out(out[0]);
    switch (c.kind) {
    case OpKind::Conv2d:
        return conv2d(ex, c, conv_geo(c, in[0].type.shape, in[1].type.shape, ys), f32(in[0]), f32(in[1]), y);
    case OpKind::Conv2dGradInput:
        return conv2d_grad_input(ex, c, conv_geo(c, ys, in[1].type.shape, in[0].type.shape), f32(in[0]),
                                 f32(in[1]), y);
    case OpKind::Conv2dGradWeight:
        return conv2d_grad_weight(ex, c, conv_geo(c, in[1].type.shape, ys, in[0].type.shape), f32(in[0]),
                                  f32(in[1]), y);
    case OpKind::GlobalAvgPool: {
        const Shape &x = in[0].type.shape;
        ex.for_each(x[0] * x[1], GlobalAvg{f32(in[0]), y, x[2] * x[3], static_cast<float>(x[2] * x[3])});
        return;
    }
    case OpKind::GlobalAvgPoolGrad:
        ex.for_each(out[0].type.elements(), GlobalAvgGrad{f32(in[0]), y, ys[2] * ys[3]});
        return;
    default: break;
    }
    // Pooling: the input (or dx) and output (or dy) shapes by operator.
    const bool forward = c.kind == OpKind::MaxPool2d || c.kind == OpKind::AvgPool2d;
    const Shape &xs = forward ? in[0].type.shape : ys, &os = forward ? ys : in[0].type.shape;
    auto attr = [&](const char *name) { return c.attrs.get_int(c.who(), name); };
    const Geo g{xs[0], xs[1], xs[2], xs[3], os[1], os[2], os[3], attr("kernel_h"), attr("kernel_w"),
                attr("stride_h"), attr("stride_w"), attr("pad_h"), attr("pad_w")};
    switch (c.kind) {
    case OpKind::MaxPool2d: ex.for_each(out[0].type.elements(), Pool{f32(in[0]), y, g, true}); return;
    case OpKind::AvgPool2d: ex.for_each(out[0].type.elements(), Pool{f32(in[0]), y, g, false}); return;
    case OpKind::MaxPool2dGrad: return max_pool2d_grad(ex, g, f32(in[0]), f32(in[1]), y);
    case OpKind::AvgPool2dGrad:
        ex.for_each(out[0].type.elements(), PoolGradGather{f32(in[0]), nullptr, nullptr, y, g, 0, false});
        return;
    default: TESSERA_INTERNAL_ASSERT(false, c.who(), " is not a conv-family operator");
    }
}

}  // namespace tessera::gpu
