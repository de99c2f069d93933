// GPU kernels of the norm family (see exec.h for the context they run on).
//
// Each normalisation runs as a statistics pass, one thread per row (layer
// norm) or per channel (batch norm) summing serially in the order of the
// Halide description (lang/defs/norm.cpp), then an element pass, one thread
// per element. The per-row or per-channel statistics live in the workspace;
// when there are more rows or channels than it holds, both passes run over
// chunks of them.
//
// The statistics pass is slow by design: one thread walks a whole row or
// channel, so a tensor with few rows (or channels) leaves most of the device
// idle. It keeps the sums serial and deterministic, which a block reduction
// with shared memory would not give through the for_each concept.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "exec.h"

namespace tessera::gpu {

namespace norm_detail {

// ---- layer norm ----------------------------------------------------------------
// Tensors are seen as [rows, D]; pointers passed to the functors are already
// offset to the chunk's first row.

// mean and rstd of each row; `ws` holds [mean, rstd] per row.
struct LayerRowStats {
    const float *x;
    int64_t D;
    float eps;
    float *ws;
    TESSERA_HD void operator()(int64_t r) const {
        const float *row = x + r * D;
        const float Df = static_cast<float>(D);
        float sum = 0.0f;
        for (int64_t d = 0; d < D; d++) sum += row[d];
        const float mean = sum / Df;
        float sq = 0.0f;
        for (int64_t d = 0; d < D; d++) {
            const float dev = row[d] - mean;
            sq += dev * dev;
        }
        ws[2 * r] = mean;
        ws[2 * r + 1] = 1.0f / sqrtf(sq / Df + eps);
    }
};

struct LayerApply {
    const float *x, *gamma, *beta, *ws;
    float *y;
    int64_t D;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t r = i / D, d = i % D;
        y[i] = (x[i] - ws[2 * r]) * ws[2 * r + 1] * gamma[d] + beta[d];
    }
};

// Per row: mean, rstd, sum of g = dy * gamma and sum of g * xhat; `ws` holds
// those four per row.
struct LayerGradRowStats {
    const float *dy, *x, *gamma;
    int64_t D;
    float eps;
    float *ws;
    TESSERA_HD void operator()(int64_t r) const {
        const float *xr = x + r * D, *dyr = dy + r * D;
        const float Df = static_cast<float>(D);
        float sum = 0.0f;
        for (int64_t d = 0; d < D; d++) sum += xr[d];
        const float mean = sum / Df;
        float sq = 0.0f;
        for (int64_t d = 0; d < D; d++) {
            const float dev = xr[d] - mean;
            sq += dev * dev;
        }
        const float rstd = 1.0f / sqrtf(sq / Df + eps);
        float sum_g = 0.0f, sum_gx = 0.0f;
        for (int64_t d = 0; d < D; d++) {
            const float g = dyr[d] * gamma[d];
            sum_g += g;
            sum_gx += g * ((xr[d] - mean) * rstd);
        }
        float *w = ws + 4 * r;
        w[0] = mean;
        w[1] = rstd;
        w[2] = sum_g;
        w[3] = sum_gx;
    }
};

struct LayerGradDx {
    const float *dy, *x, *gamma, *ws;
    float *dx;
    int64_t D;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t r = i / D, d = i % D;
        const float *w = ws + 4 * r;
        const float xhat = (x[i] - w[0]) * w[1];
        const float g = dy[i] * gamma[d];
        dx[i] = w[1] * (g - (w[2] + xhat * w[3]) / static_cast<float>(D));
    }
};

// dgamma and dbeta, one thread per column walking the chunk's rows in order;
// chunks after the first add to what the earlier ones left, so the sum keeps
// the row order of the description.
struct LayerGradAffine {
    const float *dy, *x, *ws;
    float *dgamma, *dbeta;
    int64_t rows, D;
    bool first_chunk;
    TESSERA_HD void operator()(int64_t d) const {
        float gs = first_chunk ? 0.0f : dgamma[d];
        float bs = first_chunk ? 0.0f : dbeta[d];
        for (int64_t r = 0; r < rows; r++) {
            const float g = dy[r * D + d];
            gs += g * ((x[r * D + d] - ws[4 * r]) * ws[4 * r + 1]);
            bs += g;
        }
        dgamma[d] = gs;
        dbeta[d] = bs;
    }
};

// ---- batch norm ----------------------------------------------------------------
// Tensors are [N, C, S] with S = H * W (1 at rank 2). Channel functors index
// channels c0 + c for c in the chunk; `ws` holds [mean, rstd] per chunk channel.

struct ChannelView {
    int64_t N, C, S;
    float M;  // N * H * W as the description computes it, in float
};

// Sums over (n, h, w) with w innermost, the order of the description's RDom.
struct ChannelStats {
    const float *x;
    ChannelView v;
    int64_t c0;
    float eps;
    float *ws;
    TESSERA_HD void operator()(int64_t c) const {
        const int64_t ch = c0 + c;
        float sum = 0.0f;
        for (int64_t n = 0; n < v.N; n++) {
            const float *p = x + (n * v.C + ch) * v.S;
            for (int64_t s = 0; s < v.S; s++) sum += p[s];
        }
        const float mean = sum / v.M;
        float sq = 0.0f;
        for (int64_t n = 0; n < v.N; n++) {
            const float *p = x + (n * v.C + ch) * v.S;
            for (int64_t s = 0; s < v.S; s++) {
                const float dev = p[s] - mean;
                sq += dev * dev;
            }
        }
        ws[2 * c] = mean;
        ws[2 * c + 1] = 1.0f / sqrtf(sq / v.M + eps);
    }
};

// The running statistics updated with the batch's (batch_norm_stats): the
// sums in double, as the description's, and the unbiased variance.
struct ChannelRunningStats {
    const float *x, *mean_in, *var_in;
    ChannelView v;
    float momentum;
    float *mean_out, *var_out;
    TESSERA_HD void operator()(int64_t ch) const {
        double sum = 0.0;
        for (int64_t n = 0; n < v.N; n++) {
            const float *p = x + (n * v.C + ch) * v.S;
            for (int64_t s = 0; s < v.S; s++) sum += p[s];
        }
        const float mean = static_cast<float>(sum) / v.M;
        double sq = 0.0;
        for (int64_t n = 0; n < v.N; n++) {
            const float *p = x + (n * v.C + ch) * v.S;
            for (int64_t s = 0; s < v.S; s++) {
                const float dev = p[s] - mean;
                sq += static_cast<double>(dev * dev);
            }
        }
        const float unbiased = static_cast<float>(sq) / fmaxf(v.M - 1.0f, 1.0f);
        mean_out[ch] = momentum * mean + (1.0f - momentum) * mean_in[ch];
        var_out[ch] = momentum * unbiased + (1.0f - momentum) * var_in[ch];
    }
};

// Like ChannelStats, and also dgamma = sum dy * (x - mean) * rstd and
// dbeta = sum dy, straight into the outputs.
struct ChannelGradStats {
    const float *dy, *x;
    ChannelView v;
    int64_t c0;
    float eps;
    float *ws, *dgamma, *dbeta;
    TESSERA_HD void operator()(int64_t c) const {
        ChannelStats{x, v, c0, eps, ws}(c);
        const int64_t ch = c0 + c;
        const float mean = ws[2 * c];
        float sum_dy = 0.0f, sum_dy_dev = 0.0f;
        for (int64_t n = 0; n < v.N; n++) {
            const int64_t base = (n * v.C + ch) * v.S;
            for (int64_t s = 0; s < v.S; s++) {
                sum_dy += dy[base + s];
                sum_dy_dev += dy[base + s] * (x[base + s] - mean);
            }
        }
        dgamma[ch] = sum_dy_dev * ws[2 * c + 1];
        dbeta[ch] = sum_dy + 0.0f;
    }
};

// The elements of the chunk's channels: i walks [N, chunk channels, S], so
// with a single chunk consecutive i touch consecutive addresses.
struct ChannelElement {
    ChannelView v;
    int64_t c0, cc;
    TESSERA_HD void locate(int64_t i, int64_t &offset, int64_t &c) const {
        const int64_t plane = cc * v.S;
        const int64_t n = i / plane, j = i % plane;
        c = j / v.S;
        offset = (n * v.C + c0 + c) * v.S + j % v.S;
    }
};

struct ChannelApply {
    const float *x, *gamma, *beta, *ws;
    float *y;
    ChannelElement e;
    TESSERA_HD void operator()(int64_t i) const {
        int64_t k, c;
        e.locate(i, k, c);
        const int64_t ch = e.c0 + c;
        y[k] = (x[k] - ws[2 * c]) * ws[2 * c + 1] * gamma[ch] + beta[ch];
    }
};

struct ChannelGradDx {
    const float *dy, *x, *gamma, *ws, *dgamma, *dbeta;
    float *dx;
    ChannelElement e;
    TESSERA_HD void operator()(int64_t i) const {
        int64_t k, c;
        e.locate(i, k, c);
        const int64_t ch = e.c0 + c;
        const float rstd = ws[2 * c + 1];
        const float xhat = (x[k] - ws[2 * c]) * rstd;
        dx[k] = gamma[ch] * rstd * (dy[k] - (dbeta[ch] + xhat * dgamma[ch]) / e.v.M);
    }
};

// How many rows (or channels) fit in the workspace at `floats_each` apiece.
template <class Exec>
int64_t chunk_capacity(const Exec &ex, int64_t floats_each) {
    int64_t cap = static_cast<int64_t>(ex.workspace_bytes() / (sizeof(float) * floats_each));
    TESSERA_INTERNAL_ASSERT(cap >= 1, "a workspace of ", ex.workspace_bytes(), " bytes holds no norm statistics");
    return cap;
}

template <class Exec>
void layer_norm(Exec &ex, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out, float eps) {
    const Shape &xs = in[0].type.shape;
    const int rank = static_cast<int>(xs.size());
    const int64_t rows = extent_product(xs, 0, rank - 1), D = xs[rank - 1];
    const int64_t cap = chunk_capacity(ex, 2);
    for (int64_t r0 = 0; r0 < rows; r0 += cap) {
        const int64_t n = std::min(cap, rows - r0);
        float *ws = ex.workspace(static_cast<size_t>(n) * 2 * sizeof(float));
        const float *x = f32(in[0]) + r0 * D;
        ex.for_each(n, LayerRowStats{x, D, eps, ws});
        ex.for_each(n * D, LayerApply{x, f32(in[1]), f32(in[2]), ws, f32_out(out[0]) + r0 * D, D});
    }
}

template <class Exec>
void layer_norm_grad(Exec &ex, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out, float eps) {
    const Shape &xs = in[1].type.shape;
    const int rank = static_cast<int>(xs.size());
    const int64_t rows = extent_product(xs, 0, rank - 1), D = xs[rank - 1];
    const int64_t cap = chunk_capacity(ex, 4);
    for (int64_t r0 = 0; r0 < rows; r0 += cap) {
        const int64_t n = std::min(cap, rows - r0);
        float *ws = ex.workspace(static_cast<size_t>(n) * 4 * sizeof(float));
        const float *dy = f32(in[0]) + r0 * D, *x = f32(in[1]) + r0 * D, *gamma = f32(in[2]);
        ex.for_each(n, LayerGradRowStats{dy, x, gamma, D, eps, ws});
        ex.for_each(n * D, LayerGradDx{dy, x, gamma, ws, f32_out(out[0]) + r0 * D, D});
        ex.for_each(D, LayerGradAffine{dy, x, ws, f32_out(out[1]), f32_out(out[2]), n, D, r0 == 0});
    }
}

inline ChannelView channel_view(const Shape &s) {
    ChannelView v;
    v.N = s[0];
    v.C = s[1];
    const int64_t H = s.size() == 4 ? s[2] : 1, W = s.size() == 4 ? s[3] : 1;
    v.S = H * W;
    // The description multiplies the extents as floats, left to right.
    v.M = static_cast<float>(v.N) * static_cast<float>(H) * static_cast<float>(W);
    return v;
}

template <class Exec>
void batch_norm(Exec &ex, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out, float eps) {
    const ChannelView v = channel_view(in[0].type.shape);
    const int64_t cap = chunk_capacity(ex, 2);
    for (int64_t c0 = 0; c0 < v.C; c0 += cap) {
        const int64_t cc = std::min(cap, v.C - c0);
        float *ws = ex.workspace(static_cast<size_t>(cc) * 2 * sizeof(float));
        ex.for_each(cc, ChannelStats{f32(in[0]), v, c0, eps, ws});
        ex.for_each(v.N * cc * v.S,
                    ChannelApply{f32(in[0]), f32(in[1]), f32(in[2]), ws, f32_out(out[0]), {v, c0, cc}});
    }
}

template <class Exec>
void batch_norm_grad(Exec &ex, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out, float eps) {
    const ChannelView v = channel_view(in[1].type.shape);
    const int64_t cap = chunk_capacity(ex, 2);
    float *dgamma = f32_out(out[1]), *dbeta = f32_out(out[2]);
    for (int64_t c0 = 0; c0 < v.C; c0 += cap) {
        const int64_t cc = std::min(cap, v.C - c0);
        float *ws = ex.workspace(static_cast<size_t>(cc) * 2 * sizeof(float));
        ex.for_each(cc, ChannelGradStats{f32(in[0]), f32(in[1]), v, c0, eps, ws, dgamma, dbeta});
        ex.for_each(v.N * cc * v.S, ChannelGradDx{f32(in[0]), f32(in[1]), f32(in[2]), ws, dgamma, dbeta,
                                                  f32_out(out[0]), {v, c0, cc}});
    }
}

template <class Exec>
void batch_norm_stats(Exec &ex, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out,
                      float momentum) {
    const ChannelView v = channel_view(in[0].type.shape);
    ex.for_each(v.C, ChannelRunningStats{f32(in[0]), f32(in[1]), f32(in[2]), v, momentum, f32_out(out[0]),
                                         f32_out(out[1])});
}

}  // namespace norm_detail

template <class Exec>
void run_norm(Exec &ex, const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    // The CPU kernel takes eps as a float parameter; the default is lang/src/norm.cpp's.
    const float eps = static_cast<float>(c.attrs.get_float(c.who(), "eps", 1e-5));
    switch (c.kind) {
    case OpKind::LayerNorm: return norm_detail::layer_norm(ex, in, out, eps);
    case OpKind::LayerNormGrad: return norm_detail::layer_norm_grad(ex, in, out, eps);
    case OpKind::BatchNorm: return norm_detail::batch_norm(ex, in, out, eps);
    case OpKind::BatchNormGrad: return norm_detail::batch_norm_grad(ex, in, out, eps);
    case OpKind::BatchNormStats:
        return norm_detail::batch_norm_stats(ex, in, out,
                                             static_cast<float>(c.attrs.get_float(c.who(), "momentum", 0.1)));
    default: TESSERA_INTERNAL_ASSERT(false, "not a norm operator: ", c.who());
    }
}

}  // namespace tessera::gpu
