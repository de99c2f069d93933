// GPU kernels of the norm family (see exec.h for the context they run on).
//
// Each normalisation runs as a statistics pass, then an element pass, one
// thread per element. The per-row or per-channel statistics live in the
// workspace; when there are more rows or channels than it holds, both passes
// run over chunks of them.
//
// Layer norm's row statistics take one thread per row, summing serially in the
// order of the Halide description (lang/defs/norm.cpp): a layer norm has many
// rows of a few hundred values. Batch norm's channel sums, and layer norm's
// dgamma and dbeta (sums over every row), are two-level instead: lanes of
// threads each sum a strided share, then one thread per channel or column adds
// the lanes' partial sums in order. Both are deterministic (every run adds in
// the same order); the two-level sums add in another order than the CPU
// kernel's, within the host test's tolerances.
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

// dgamma and dbeta in two levels. First, for i = lane * D + d, lane `lane` of
// column d adds the chunk's rows lane, lane + lanes, ... (adjacent threads
// read adjacent columns) into partial[2i] (dgamma) and partial[2i + 1]
// (dbeta). Then one thread per column adds its lanes in order to what the
// earlier chunks left.
struct LayerAffineLanes {
    const float *dy, *x, *ws;
    float *partial;
    int64_t rows, D, lanes;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t d = i % D;
        float gs = 0.0f, bs = 0.0f;
        for (int64_t r = i / D; r < rows; r += lanes) {
            const float g = dy[r * D + d];
            gs += g * ((x[r * D + d] - ws[4 * r]) * ws[4 * r + 1]);
            bs += g;
        }
        partial[2 * i] = gs;
        partial[2 * i + 1] = bs;
    }
};

struct LayerAffineTotal {
    const float *partial;
    float *dgamma, *dbeta;
    int64_t D, lanes;
    bool first_chunk;
    TESSERA_HD void operator()(int64_t d) const {
        float gs = first_chunk ? 0.0f : dgamma[d];
        float bs = first_chunk ? 0.0f : dbeta[d];
        for (int64_t l = 0; l < lanes; l++) {
            gs += partial[2 * (l * D + d)];
            bs += partial[2 * (l * D + d) + 1];
        }
        dgamma[d] = gs;
        dbeta[d] = bs;
    }
};

inline constexpr int64_t kRowLanes = 32;

// ---- batch norm ----------------------------------------------------------------
// Tensors are [N, C, S] with S = H * W (1 at rank 2). Channel functors index
// channels c0 + c for c in the chunk; `ws` holds [mean, rstd] per chunk channel.
//
// A channel's sums are two-level, so that they are parallel and still
// deterministic: `lanes` threads per channel each add every lanes-th of the
// channel's N * S values, in order (lane l takes values l, l + lanes, ...;
// adjacent lanes read adjacent addresses), into the workspace; then one
// thread per channel adds its lanes' partial sums in lane order. One thread
// walking a whole channel (N * H * W values: 524288 for a 64×64 map at batch
// 128) left all but C threads of the device idle.

struct ChannelView {
    int64_t N, C, S;
    float M;        // N * H * W as the description computes it, in float
    int64_t lanes;  // threads per channel in the first level of its sums
    // The offset of value f (f = n * S + s) of channel ch.
    TESSERA_HD int64_t offset(int64_t ch, int64_t f) const { return ((f / S) * C + ch) * S + f % S; }
};

inline constexpr int64_t kChannelLanes = 256;

// The first level: for i = c * lanes + lane, adds Term's `kValues` terms of
// every lanes-th value of channel c0 + c into partial[i * kValues + q].
template <class Term>
struct ChannelLanes {
    Term term;
    ChannelView v;
    int64_t c0;
    typename Term::Acc *partial;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t c = i / v.lanes, ch = c0 + c;
        typename Term::Acc acc[Term::kValues] = {};
        for (int64_t f = i % v.lanes; f < v.N * v.S; f += v.lanes) term.add(acc, v.offset(ch, f), c);
        for (int q = 0; q < Term::kValues; q++) partial[i * Term::kValues + q] = acc[q];
    }
};

// The second level: term q of chunk channel c, its lanes added in order.
template <class Acc>
TESSERA_HD Acc lane_total(const Acc *partial, int64_t c, int64_t lanes, int values, int q) {
    Acc total = 0;
    for (int64_t l = 0; l < lanes; l++) total += partial[(c * lanes + l) * values + q];
    return total;
}

template <class A>
struct SumOf {  // x
    using Acc = A;
    static constexpr int kValues = 1;
    const float *x;
    TESSERA_HD void add(Acc *acc, int64_t k, int64_t) const { acc[0] += x[k]; }
};

template <class A>
struct SquaredDeviations {  // (x - mean)^2, the mean at ws[2c]
    using Acc = A;
    static constexpr int kValues = 1;
    const float *x, *ws;
    TESSERA_HD void add(Acc *acc, int64_t k, int64_t c) const {
        const float dev = x[k] - ws[2 * c];
        acc[0] += static_cast<Acc>(dev * dev);
    }
};

struct GradTerms {  // dy and dy * (x - mean)
    using Acc = float;
    static constexpr int kValues = 2;
    const float *dy, *x, *ws;
    TESSERA_HD void add(Acc *acc, int64_t k, int64_t c) const {
        acc[0] += dy[k];
        acc[1] += dy[k] * (x[k] - ws[2 * c]);
    }
};

// ws[2c] = the mean (from the lanes' sums of x); the sum is float or, for
// the running statistics, double, as in the description.
template <class Acc>
struct ChannelMean {
    const Acc *partial;
    ChannelView v;
    float *ws;
    TESSERA_HD void operator()(int64_t c) const {
        ws[2 * c] = static_cast<float>(lane_total(partial, c, v.lanes, 1, 0)) / v.M;
    }
};

// ws[2c + 1] = rstd (from the lanes' sums of squared deviations).
struct ChannelRstd {
    const float *partial;
    ChannelView v;
    float eps;
    float *ws;
    TESSERA_HD void operator()(int64_t c) const {
        ws[2 * c + 1] = 1.0f / sqrtf(lane_total(partial, c, v.lanes, 1, 0) / v.M + eps);
    }
};

// dgamma = sum dy * (x - mean) * rstd and dbeta = sum dy, into the outputs.
struct ChannelAffineGrad {
    const float *partial, *ws;
    ChannelView v;
    int64_t c0;
    float *dgamma, *dbeta;
    TESSERA_HD void operator()(int64_t c) const {
        dgamma[c0 + c] = lane_total(partial, c, v.lanes, 2, 1) * ws[2 * c + 1];
        dbeta[c0 + c] = lane_total(partial, c, v.lanes, 2, 0) + 0.0f;
    }
};

// The running statistics updated with the batch's (batch_norm_stats): the
// mean at ws[2c] and the lanes' double sums of squared deviations give the
// unbiased variance.
struct ChannelRunning {
    const double *partial;
    const float *ws, *mean_in, *var_in;
    ChannelView v;
    int64_t c0;
    float momentum;
    float *mean_out, *var_out;
    TESSERA_HD void operator()(int64_t c) const {
        const int64_t ch = c0 + c;
        const float unbiased = static_cast<float>(lane_total(partial, c, v.lanes, 1, 0)) / fmaxf(v.M - 1.0f, 1.0f);
        mean_out[ch] = momentum * ws[2 * c] + (1.0f - momentum) * mean_in[ch];
        var_out[ch] = momentum * unbiased + (1.0f - momentum) * var_in[ch];
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
    // The workspace: the lanes' partial dgamma and dbeta, then 4 statistics per row.
    const int64_t floats = static_cast<int64_t>(ex.workspace_bytes() / sizeof(float));
    int64_t lanes = std::max<int64_t>(1, std::min(kRowLanes, rows));
    while (lanes > 1 && 2 * lanes * D + 4 > floats) lanes /= 2;
    TESSERA_INTERNAL_ASSERT(2 * lanes * D + 4 <= floats, "a workspace of ", ex.workspace_bytes(),
                            " bytes holds no layer norm column sums of width ", D);
    const int64_t cap = (floats - 2 * lanes * D) / 4;
    float *partial = ex.workspace(static_cast<size_t>(2 * lanes * D + 4 * std::min(cap, rows)) * sizeof(float));
    float *ws = partial + 2 * lanes * D;
    for (int64_t r0 = 0; r0 < rows; r0 += cap) {
        const int64_t n = std::min(cap, rows - r0), chunk_lanes = std::min(lanes, n);
        const float *dy = f32(in[0]) + r0 * D, *x = f32(in[1]) + r0 * D, *gamma = f32(in[2]);
        ex.for_each(n, LayerGradRowStats{dy, x, gamma, D, eps, ws});
        ex.for_each(n * D, LayerGradDx{dy, x, gamma, ws, f32_out(out[0]) + r0 * D, D});
        ex.for_each(chunk_lanes * D, LayerAffineLanes{dy, x, ws, partial, n, D, chunk_lanes});
        ex.for_each(D, LayerAffineTotal{partial, f32_out(out[1]), f32_out(out[2]), D, chunk_lanes, r0 == 0});
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
    v.lanes = std::max<int64_t>(1, std::min(kChannelLanes, v.N * v.S));
    return v;
}

// A chunk of channels and its workspace: [mean, rstd] per channel, then the
// lanes' partial sums (`values` of type Acc per lane).
template <class Acc>
struct ChannelChunk {
    int64_t c0, cc;
    float *ws;
    Acc *partial;
};

// Runs body(chunk) over chunks of channels that fit the workspace.
template <class Acc, class Exec, class Body>
void for_channel_chunks(Exec &ex, const ChannelView &v, int values, Body body) {
    const int64_t floats_each = 2 + v.lanes * values * static_cast<int64_t>(sizeof(Acc) / sizeof(float));
    const int64_t cap = chunk_capacity(ex, floats_each);
    for (int64_t c0 = 0; c0 < v.C; c0 += cap) {
        const int64_t cc = std::min(cap, v.C - c0);
        float *ws = ex.workspace(static_cast<size_t>(cc * floats_each) * sizeof(float));
        // 2 * cc floats keep the partials 8-byte aligned for double.
        body(ChannelChunk<Acc>{c0, cc, ws, reinterpret_cast<Acc *>(ws + 2 * cc)});
    }
}

// ws[2c] = mean and ws[2c + 1] = rstd of the chunk's channels of x.
template <class Exec>
void channel_mean_rstd(Exec &ex, const float *x, const ChannelView &v, float eps, const ChannelChunk<float> &k) {
    ex.for_each(k.cc * v.lanes, ChannelLanes<SumOf<float>>{{x}, v, k.c0, k.partial});
    ex.for_each(k.cc, ChannelMean<float>{k.partial, v, k.ws});
    ex.for_each(k.cc * v.lanes, ChannelLanes<SquaredDeviations<float>>{{x, k.ws}, v, k.c0, k.partial});
    ex.for_each(k.cc, ChannelRstd{k.partial, v, eps, k.ws});
}

template <class Exec>
void batch_norm(Exec &ex, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out, float eps) {
    const ChannelView v = channel_view(in[0].type.shape);
    const float *x = f32(in[0]);
    for_channel_chunks<float>(ex, v, 1, [&](const ChannelChunk<float> &k) {
        channel_mean_rstd(ex, x, v, eps, k);
        ex.for_each(v.N * k.cc * v.S,
                    ChannelApply{x, f32(in[1]), f32(in[2]), k.ws, f32_out(out[0]), {v, k.c0, k.cc}});
    });
}

template <class Exec>
void batch_norm_grad(Exec &ex, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out, float eps) {
    const ChannelView v = channel_view(in[1].type.shape);
    const float *dy = f32(in[0]), *x = f32(in[1]);
    float *dgamma = f32_out(out[1]), *dbeta = f32_out(out[2]);
    for_channel_chunks<float>(ex, v, 2, [&](const ChannelChunk<float> &k) {
        channel_mean_rstd(ex, x, v, eps, k);
        ex.for_each(k.cc * v.lanes, ChannelLanes<GradTerms>{{dy, x, k.ws}, v, k.c0, k.partial});
        ex.for_each(k.cc, ChannelAffineGrad{k.partial, k.ws, v, k.c0, dgamma, dbeta});
        ex.for_each(v.N * k.cc * v.S,
                    ChannelGradDx{dy, x, f32(in[2]), k.ws, dgamma, dbeta, f32_out(out[0]), {v, k.c0, k.cc}});
    });
}

// The running statistics: sums in double, as the description's.
template <class Exec>
void batch_norm_stats(Exec &ex, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out,
                      float momentum) {
    const ChannelView v = channel_view(in[0].type.shape);
    const float *x = f32(in[0]);
    for_channel_chunks<double>(ex, v, 1, [&](const ChannelChunk<double> &k) {
        ex.for_each(k.cc * v.lanes, ChannelLanes<SumOf<double>>{{x}, v, k.c0, k.partial});
        ex.for_each(k.cc, ChannelMean<double>{k.partial, v, k.ws});
        ex.for_each(k.cc * v.lanes, ChannelLanes<SquaredDeviations<double>>{{x, k.ws}, v, k.c0, k.partial});
        ex.for_each(k.cc, ChannelRunning{k.partial, k.ws, f32(in[1]), f32(in[2]), v, k.c0, momentum,
                                         f32_out(out[0]), f32_out(out[1])});
    });
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
