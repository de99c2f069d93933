// GPU kernels of the norm family (see exec.h for the context they run on).
//
// Each normalisation runs as a statistics pass, then an element pass, one
// thread per element. The per-row or per-channel statistics live in the
// workspace; when there are more rows or channels than it holds, both passes
// run over chunks of them.
//
// Every sum is two-level (lanes.h): layer norm's row statistics in row lanes,
// its dgamma and dbeta (sums over every row) in column lanes, batch norm's in
// channel lanes. One thread a row, summing serially as the Halide description
// does, read addresses D apart and ran at 74 to 108 GB/s on an H100.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "exec.h"
#include "lanes.h"

namespace tessera::gpu {

namespace norm_detail {

using namespace lanes;

template <class A>
struct SquaredDeviations {  // (x - mean)^2, the mean at ws[2c] (a channel's, or a row's)
    using Acc = A;
    static constexpr int kValues = 1;
    const float *x, *ws;
    TESSERA_HD void add(Acc *acc, int64_t k, int64_t c) const {
        const float dev = x[k] - ws[2 * c];
        acc[0] += static_cast<Acc>(dev * dev);
    }
};

// ---- layer norm ----------------------------------------------------------------
// Tensors are seen as [rows, D]; pointers passed to the functors are already
// offset to the chunk's first row. `stats` holds [mean, rstd] per row; a row's
// sums are two-level (row lanes, lanes.h), each total written by one thread.

// stats[2r] = the row's mean, from the lanes' sums of x.
struct RowMean {
    const float *partial;
    int64_t D;
    float *stats;
    TESSERA_HD void operator()(int64_t r) const {
        stats[2 * r] = row_total(partial, r, 1, 0) / static_cast<float>(D);
    }
};

// stats[2r + 1] = rstd, from the lanes' sums of squared deviations.
struct RowRstd {
    const float *partial;
    int64_t D;
    float eps;
    float *stats;
    TESSERA_HD void operator()(int64_t r) const {
        stats[2 * r + 1] = 1.0f / sqrtf(row_total(partial, r, 1, 0) / static_cast<float>(D) + eps);
    }
};

struct LayerApply {
    const float *x, *gamma, *beta, *stats;
    float *y;
    int64_t D;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t r = i / D, d = i - r * D;
        y[i] = (x[i] - stats[2 * r]) * stats[2 * r + 1] * gamma[d] + beta[d];
    }
};

// g = dy * gamma and g * xhat, the terms of the backward's two row sums.
struct LayerGradTerms {
    using Acc = float;
    static constexpr int kValues = 2;
    const float *dy, *x, *gamma, *stats;
    int64_t D;
    TESSERA_HD void add(Acc *acc, int64_t k, int64_t r) const {
        const float g = dy[k] * gamma[k - r * D];
        acc[0] += g;
        acc[1] += g * ((x[k] - stats[2 * r]) * stats[2 * r + 1]);
    }
};

// sums[2r] = sum g and sums[2r + 1] = sum g * xhat.
struct LayerGradRowSums {
    const float *partial;
    float *sums;
    TESSERA_HD void operator()(int64_t r) const {
        sums[2 * r] = row_total(partial, r, 2, 0);
        sums[2 * r + 1] = row_total(partial, r, 2, 1);
    }
};

// `count` is what the row means divide by: D, or the whole row's width when
// the kernel runs on a block of the row (a staged operator, ops_staged.h).
struct LayerGradDx {
    const float *dy, *x, *gamma, *stats, *sums;
    float *dx;
    int64_t D;
    float count;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t r = i / D, d = i - r * D;
        const float rstd = stats[2 * r + 1];
        const float xhat = (x[i] - stats[2 * r]) * rstd;
        const float g = dy[i] * gamma[d];
        dx[i] = rstd * (g - (sums[2 * r] + xhat * sums[2 * r + 1]) / count);
    }
};

// dgamma and dbeta, two-level over the rows (lanes.h): the terms of one value.
struct LayerAffineTerms {
    using Acc = float;
    static constexpr int kValues = 2;
    const float *dy, *x, *stats;
    TESSERA_HD void add(Acc *acc, int64_t k, int64_t r) const {
        acc[0] += dy[k] * ((x[k] - stats[2 * r]) * stats[2 * r + 1]);
        acc[1] += dy[k];
    }
};

// Each column's lanes, added to what the earlier chunks of rows left.
struct LayerAffineTotal {
    const float *partial;
    float *dgamma, *dbeta;
    int64_t D, lanes;
    bool first_chunk;
    TESSERA_HD void operator()(int64_t d) const {
        const float gs = column_total(partial, d, D, lanes, 2, 0), bs = column_total(partial, d, D, lanes, 2, 1);
        dgamma[d] = first_chunk ? gs : dgamma[d] + gs;
        dbeta[d] = first_chunk ? bs : dbeta[d] + bs;
    }
};

// ---- batch norm ----------------------------------------------------------------
// Tensors are [N, C, S] with S = H * W (1 at rank 2). Channel functors index
// channels c0 + c for c in the chunk; `ws` holds [mean, rstd] per chunk channel.
//
// A channel's sums are two-level (lanes.h).


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
        ws[2 * c] = static_cast<float>(channel_total(partial, c, v.lanes, 1, 0)) / v.M;
    }
};

// ws[2c + 1] = rstd (from the lanes' sums of squared deviations).
struct ChannelRstd {
    const float *partial;
    ChannelView v;
    float eps;
    float *ws;
    TESSERA_HD void operator()(int64_t c) const {
        ws[2 * c + 1] = 1.0f / sqrtf(channel_total(partial, c, v.lanes, 1, 0) / v.M + eps);
    }
};

// dgamma = sum dy * (x - mean) * rstd and dbeta = sum dy, into the outputs.
struct ChannelAffineGrad {
    const float *partial, *ws;
    ChannelView v;
    int64_t c0;
    float *dgamma, *dbeta;
    TESSERA_HD void operator()(int64_t c) const {
        dgamma[c0 + c] = channel_total(partial, c, v.lanes, 2, 1) * ws[2 * c + 1];
        dbeta[c0 + c] = channel_total(partial, c, v.lanes, 2, 0) + 0.0f;
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
        const float unbiased = static_cast<float>(channel_total(partial, c, v.lanes, 1, 0)) / fmaxf(v.M - 1.0f, 1.0f);
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

// Per row: stats (2 floats) and the row lanes' partial sums (2 a lane).
inline constexpr int64_t kLayerRowFloats = 2 + 2 * kRowLanes;

template <class Exec>
void row_mean_rstd(Exec &ex, const float *x, int64_t n, int64_t D, float eps, float *partial, float *stats) {
    ex.for_each(n * kRowLanes, RowLanes<SumOf<float>>{{x}, D, partial});
    ex.for_each(n, RowMean{partial, D, stats});
    ex.for_each(n * kRowLanes, RowLanes<SquaredDeviations<float>>{{x, stats}, D, partial});
    ex.for_each(n, RowRstd{partial, D, eps, stats});
}

// Layer norm over chunks of rows that fit the workspace. `row_stats(r0, n,
// stats, partial)` writes stats[2r] (the mean) and stats[2r + 1] (rstd) of
// rows r0 .. r0 + n - 1, with `partial` (2 * kRowLanes floats a row) as
// scratch: from x here, from the stages in a staged operator's last phase.
template <class Exec, class RowStats>
void layer_norm_by_rows(Exec &ex, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out,
                        RowStats row_stats) {
    const Shape &xs = in[0].type.shape;
    const int rank = static_cast<int>(xs.size());
    const int64_t rows = extent_product(xs, 0, rank - 1), D = xs[rank - 1];
    const int64_t cap = chunk_capacity(ex, kLayerRowFloats);
    for (int64_t r0 = 0; r0 < rows; r0 += cap) {
        const int64_t n = std::min(cap, rows - r0);
        float *stats = ex.workspace(static_cast<size_t>(n * kLayerRowFloats) * sizeof(float));
        row_stats(r0, n, stats, stats + 2 * n);
        ex.for_each(n * D, LayerApply{f32(in[0]) + r0 * D, f32(in[1]), f32(in[2]), stats, f32_out(out[0]) + r0 * D, D});
    }
}

template <class Exec>
void layer_norm(Exec &ex, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out, float eps) {
    const int64_t D = in[0].type.shape.back();
    layer_norm_by_rows(ex, in, out, [&](int64_t r0, int64_t n, float *stats, float *partial) {
        row_mean_rstd(ex, f32(in[0]) + r0 * D, n, D, eps, partial, stats);
    });
}

// Layer norm's backward over chunks of rows. `row_sums(r0, n, stats, sums,
// partial)` writes, for rows r0 .. r0 + n - 1, stats[2r] (the mean),
// stats[2r + 1] (rstd), sums[2r] (sum g) and sums[2r + 1] (sum g * xhat),
// with `partial` (2 * kRowLanes floats a row) as scratch; `count` is what the
// row means divide by.
template <class Exec, class RowSums>
void layer_norm_grad_by_rows(Exec &ex, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out,
                             float count, RowSums row_sums) {
    const Shape &xs = in[1].type.shape;
    const int rank = static_cast<int>(xs.size());
    const int64_t rows = extent_product(xs, 0, rank - 1), D = xs[rank - 1];
    // The workspace: the column lanes' partial dgamma and dbeta, then per row
    // its stats, its two sums and its row lanes' partial sums.
    const int64_t per_row = kLayerRowFloats + 2;
    const int64_t floats = static_cast<int64_t>(ex.workspace_bytes() / sizeof(float));
    const int64_t lanes = column_lanes(floats, rows, D, 2, per_row);
    TESSERA_INTERNAL_ASSERT(lanes >= 1, "a workspace of ", ex.workspace_bytes(),
                            " bytes holds no layer norm column sums of width ", D);
    const int64_t cap = (floats - 2 * lanes * D) / per_row;
    float *column_partial =
        ex.workspace(static_cast<size_t>(2 * lanes * D + per_row * std::min(cap, rows)) * sizeof(float));
    for (int64_t r0 = 0; r0 < rows; r0 += cap) {
        const int64_t n = std::min(cap, rows - r0), chunk_lanes = std::min(lanes, n);
        float *stats = column_partial + 2 * lanes * D, *sums = stats + 2 * n, *partial = sums + 2 * n;
        const float *dy = f32(in[0]) + r0 * D, *x = f32(in[1]) + r0 * D, *gamma = f32(in[2]);
        row_sums(r0, n, stats, sums, partial);
        ex.for_each(n * D, LayerGradDx{dy, x, gamma, stats, sums, f32_out(out[0]) + r0 * D, D, count});
        ex.for_each(chunk_lanes * D,
                    ColumnLanes<LayerAffineTerms>{{dy, x, stats}, n, D, chunk_lanes, column_partial});
        ex.for_each(D, LayerAffineTotal{column_partial, f32_out(out[1]), f32_out(out[2]), D, chunk_lanes, r0 == 0});
    }
}

template <class Exec>
void layer_norm_grad(Exec &ex, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out, float eps) {
    const int64_t D = in[1].type.shape.back();
    layer_norm_grad_by_rows(ex, in, out, static_cast<float>(D),
                            [&](int64_t r0, int64_t n, float *stats, float *sums, float *partial) {
                                const float *dy = f32(in[0]) + r0 * D, *x = f32(in[1]) + r0 * D;
                                row_mean_rstd(ex, x, n, D, eps, partial, stats);
                                ex.for_each(n * kRowLanes,
                                            RowLanes<LayerGradTerms>{{dy, x, f32(in[2]), stats, D}, D, partial});
                                ex.for_each(n, LayerGradRowSums{partial, sums});
                            });
}

// A batch norm's tensor as [N, C, S].
inline ChannelView channel_view(const Shape &s) {
    const int64_t H = s.size() == 4 ? s[2] : 1, W = s.size() == 4 ? s[3] : 1;
    // The description multiplies the extents as floats, left to right.
    const float M = static_cast<float>(s[0]) * static_cast<float>(H) * static_cast<float>(W);
    return lanes::channel_view(s[0], s[1], H * W, M);
}

// ws[2c] = mean and ws[2c + 1] = rstd of the chunk's channels of x.
template <class Exec>
void channel_mean_rstd(Exec &ex, const float *x, const ChannelView &v, float eps, const ChannelChunk<float> &k) {
    ex.for_each(k.cc * v.lanes, ChannelLanes<SumOf<float>>{{x}, v, k.c0, k.partial});
    const FoldedLanes<float> sums = fold_lanes(ex, v, k, 1);
    ex.for_each(k.cc, ChannelMean<float>{sums.partial, sums.v, k.ws});
    ex.for_each(k.cc * v.lanes, ChannelLanes<SquaredDeviations<float>>{{x, k.ws}, v, k.c0, k.partial});
    const FoldedLanes<float> squares = fold_lanes(ex, v, k, 1);
    ex.for_each(k.cc, ChannelRstd{squares.partial, squares.v, eps, k.ws});
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
        const FoldedLanes<float> terms = fold_lanes(ex, v, k, 2);
        ex.for_each(k.cc, ChannelAffineGrad{terms.partial, k.ws, terms.v, k.c0, dgamma, dbeta});
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
        const FoldedLanes<double> sums = fold_lanes(ex, v, k, 1);
        ex.for_each(k.cc, ChannelMean<double>{sums.partial, sums.v, k.ws});
        ex.for_each(k.cc * v.lanes, ChannelLanes<SquaredDeviations<double>>{{x, k.ws}, v, k.c0, k.partial});
        const FoldedLanes<double> squares = fold_lanes(ex, v, k, 1);
        ex.for_each(k.cc, ChannelRunning{squares.partial, k.ws, f32(in[1]), f32(in[2]), squares.v, k.c0, momentum,
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
