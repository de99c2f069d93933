// GPU kernels of the staged operators (see exec.h for the context they run on).
//
// When a partition splits an index variable that an operator reduces over,
// lowering runs the operator as m + 1 phases (tessera/lang/staged.h): phase
// p < m computes stage p over this device's block of the inputs, given stages
// 0 .. p-1 already combined across devices as extra inputs; phase m computes
// the outputs given every stage. The stages and the formulas are those of the
// Halide descriptions (lang/defs/norm.cpp, softmax.cpp, conv.cpp), which the
// CPU kernels compile; every count a mean divides by is the whole tensor's
// ("whole_in<i>"), and a class index compared with a label is offset by the
// block's origin ("origin_in<i>").
//
//   operator                 stages (one value per)                 last phase
//   softmax, log_softmax     row_max, row_sum (row, f32)            2
//   softmax_grad             dot (row)                              1
//   log_softmax_grad         dy_sum (row)                           1
//   softmax_xent             row_max, row_sum, label_logit (row)    3
//   softmax_xent_grad        row_max, row_sum (row)                 2
//   layer_norm               sum_x, sum_sq_dev (row, f32)           2
//   layer_norm_grad          + sum_g, sum_g_xhat                    4
//   batch_norm, _stats       sum_x, sum_sq_dev (channel, f64)       2
//   batch_norm_grad          + sum_dy, sum_dy_dev                   4
//   global_avg_pool          sum ([N, C], f32)                      1
//
// The sums are the family files' two-level sums (lanes.h), in the stage's
// precision: batch norm's in double, as its description accumulates them.
// A maximum, the picked label logit and a plane's sum come out exactly as the
// CPU kernel's; the other sums add in another order, so within rounding. The
// last phases reuse the family files' element kernels, with the row or
// channel statistics made from the stages rather than from the block.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "exec.h"
#include "lanes.h"
#include "ops_conv.h"
#include "ops_norm.h"
#include "ops_softmax.h"
#include "tessera/lang/staged.h"

namespace tessera::gpu {

namespace staged_detail {

using namespace lanes;
using norm_detail::chunk_capacity;

inline const double *f64(const TensorRef &t) { return static_cast<const double *>(t.data); }
inline double *f64_out(const TensorRef &t) { return static_cast<double *>(t.data); }

// One phase of a staged call: the operator's own inputs (this device's
// block), the stages it is given, and where it writes.
struct Phase {
    OpCall plain;                 // the operator's call without the staging attributes
    int p = 0, m = 0;             // this phase; the operator's stage count
    std::vector<TensorRef> in;    // the operator's inputs
    std::vector<TensorRef> given; // stages 0 .. p-1, combined
    std::vector<TensorRef> out;   // stage p when p < m, else the operator's outputs
    std::vector<Shape> whole, origin;
};

// ---- functors ------------------------------------------------------------------

// out[r] = the maximum of row r's lanes (sm::RowLaneMax); exact in any order.
struct RowMaxTotal {
    const float *partial;
    float *out;
    TESSERA_HD void operator()(int64_t r) const {
        float mx = sm::kLowest;
        for (int64_t l = 0; l < kRowLanes; l++) mx = fmaxf(mx, partial[r * kRowLanes + l]);
        out[r] = mx;
    }
};

// out[r] = sum q of row r's lanes (`values` sums a lane).
struct RowTotal {
    const float *partial;
    int values, q;
    float *out;
    TESSERA_HD void operator()(int64_t r) const { out[r] = row_total(partial, r, values, q); }
};

// exp(x - the row maximum), the maximum given as a stage.
struct ExpShiftedBy {
    using Acc = float;
    static constexpr int kValues = 1;
    const float *x, *max;
    TESSERA_HD void add(Acc *acc, int64_t k, int64_t r) const { acc[0] += expf(x[k] - max[r]); }
};

// ws[2r] = a[r], ws[2r + 1] = b[r]: two stages as the [first, second] pairs
// the family files' element kernels read.
struct Interleave {
    const float *a, *b;
    float *ws;
    TESSERA_HD void operator()(int64_t r) const {
        ws[2 * r] = a[r];
        ws[2 * r + 1] = b[r];
    }
};

// softmax_xent's label_logit: the row's logit at its label, shifted by the
// row maximum, where the label falls in this block of the classes, else 0.
// The description sums select(class == label, x - max, 0) over the block: one
// term at most is not zero, so the sum is that term exactly.
struct XentPicked {
    const float *logits, *max;
    const int32_t *labels;
    float *picked;
    int64_t classes, class0, whole_classes;
    TESSERA_HD void operator()(int64_t r) const {
        const int64_t k = sm::clamp_label(labels[r], whole_classes) - class0;
        picked[r] = k >= 0 && k < classes ? 0.0f + (logits[r * classes + k] - max[r]) : 0.0f;
    }
};

// nll[r] = log(row_sum) - label_logit.
struct XentNll {
    const float *sum, *picked;
    float *nll;
    TESSERA_HD void operator()(int64_t r) const { nll[r] = logf(sum[r]) - picked[r]; }
};

// stats[2r] = the mean and, given sum_sq_dev, stats[2r + 1] = rstd of a row
// whose sums over the whole row are stages.
struct RowStatsOfStages {
    const float *sum_x, *sq_dev;  // sq_dev may be null
    float count, eps;
    float *stats;
    TESSERA_HD void operator()(int64_t r) const {
        stats[2 * r] = sum_x[r] / count;
        if (sq_dev) stats[2 * r + 1] = 1.0f / sqrtf(sq_dev[r] / count + eps);
    }
};

// out[c0 + c] = sum q of chunk channel c's lanes.
template <class Acc>
struct ChannelTotal {
    const Acc *partial;
    int64_t lanes;
    int values, q;
    int64_t c0;
    Acc *out;
    TESSERA_HD void operator()(int64_t c) const { out[c0 + c] = channel_total(partial, c, lanes, values, q); }
};

// ws[2c] = the mean and, given sum_sq_dev, ws[2c + 1] = rstd of chunk channel
// c, from batch norm's double stages, each rounded once to float.
struct ChannelStatsOfStages {
    const double *sum_x, *sq_dev;  // sq_dev may be null
    float M, eps;
    int64_t c0;
    float *ws;
    TESSERA_HD void operator()(int64_t c) const {
        ws[2 * c] = static_cast<float>(sum_x[c0 + c]) / M;
        if (sq_dev) ws[2 * c + 1] = 1.0f / sqrtf(static_cast<float>(sq_dev[c0 + c]) / M + eps);
    }
};

// dy * (x - mean), in double as the description's sum_dy_dev.
struct DyDeviation {
    using Acc = double;
    static constexpr int kValues = 1;
    const float *dy, *x, *ws;
    TESSERA_HD void add(Acc *acc, int64_t k, int64_t c) const {
        acc[0] += static_cast<double>(dy[k]) * static_cast<double>(x[k] - ws[2 * c]);
    }
};

// dgamma = sum_dy_dev * rstd and dbeta = sum_dy, from the stages.
struct ChannelAffineOfStages {
    const double *sum_dy, *sum_dy_dev;
    const float *ws;
    int64_t c0;
    float *dgamma, *dbeta;
    TESSERA_HD void operator()(int64_t c) const {
        dgamma[c0 + c] = static_cast<float>(sum_dy_dev[c0 + c]) * ws[2 * c + 1];
        dbeta[c0 + c] = static_cast<float>(sum_dy[c0 + c]) + 0.0f;
    }
};

// batch_norm_stats: the running statistics updated with the batch's, from the stages.
struct ChannelRunningOfStages {
    const double *sum_x, *sq_dev;
    const float *mean_in, *var_in;
    float M, momentum;
    float *mean_out, *var_out;
    TESSERA_HD void operator()(int64_t c) const {
        const float mean = static_cast<float>(sum_x[c]) / M;
        const float unbiased = static_cast<float>(sq_dev[c]) / fmaxf(M - 1.0f, 1.0f);
        mean_out[c] = momentum * mean + (1.0f - momentum) * mean_in[c];
        var_out[c] = momentum * unbiased + (1.0f - momentum) * var_in[c];
    }
};


struct PlaneMean {
    const float *sum;
    float *y;
    float count;
    TESSERA_HD void operator()(int64_t i) const { y[i] = sum[i] / count; }
};

// ---- the phases ----------------------------------------------------------------

// Runs body(r0, n, ws) over chunks of rows with `per_row` floats of workspace each.
template <class Exec, class Body>
void for_row_chunks(Exec &ex, int64_t rows, int64_t per_row, Body body) {
    const int64_t cap = std::min(chunk_capacity(ex, per_row), std::max<int64_t>(rows, 1));
    float *ws = ex.workspace(static_cast<size_t>(cap * per_row) * sizeof(float));
    for (int64_t r0 = 0; r0 < rows; r0 += cap) body(r0, std::min(cap, rows - r0), ws);
}

// A row-wise operator's tensor as [rows, D], leading dimensions folded.
struct Rows {
    int64_t rows, D;
};
inline Rows rows_of(const Shape &s) {
    const int rank = static_cast<int>(s.size());
    return {extent_product(s, 0, rank - 1), rank == 0 ? 1 : s[rank - 1]};
}

// A stage that is one sum per row: Term's sum q over each row of the block
// (r0-relative, `ws` holding `stat_floats` floats a row before its lanes),
// after `prepare(r0, n, ws)` has written what the term reads.
template <class Term, class Exec, class MakeTerm, class Prepare>
void row_sum_stage(Exec &ex, const Rows &v, int stat_floats, int q, float *out, MakeTerm make_term,
                   Prepare prepare) {
    const int64_t per_row = stat_floats + kRowLanes * Term::kValues;
    for_row_chunks(ex, v.rows, per_row, [&](int64_t r0, int64_t n, float *ws) {
        prepare(r0, n, ws);
        float *partial = ws + stat_floats * n;
        ex.for_each(n * kRowLanes, RowLanes<Term>{make_term(r0, ws), v.D, partial});
        ex.for_each(n, RowTotal{partial, Term::kValues, q, out + r0});
    });
}

// Softmax, log_softmax, cross-entropy and its gradient share their first
// two stages: the row maximum and sum(exp(x - max)).
template <class Exec>
bool row_max_or_exp_sum(Exec &ex, const Phase &ph) {
    const Rows v = rows_of(ph.in[0].type.shape);
    const float *x = f32(ph.in[0]);
    float *out = ph.p < ph.m ? f32_out(ph.out[0]) : nullptr;
    if (ph.p == 0) {
        for_row_chunks(ex, v.rows, kRowLanes, [&](int64_t r0, int64_t n, float *partial) {
            ex.for_each(n * kRowLanes, sm::RowLaneMax{x + r0 * v.D, v.D, partial});
            ex.for_each(n, RowMaxTotal{partial, out + r0});
        });
        return true;
    }
    if (ph.p == 1) {
        const float *max = f32(ph.given[0]);
        row_sum_stage<ExpShiftedBy>(
            ex, v, 0, 0, out, [&](int64_t r0, float *) { return ExpShiftedBy{x + r0 * v.D, max + r0}; },
            [](int64_t, int64_t, float *) {});
        return true;
    }
    return false;
}

template <class Exec>
void softmax(Exec &ex, const Phase &ph) {
    if (row_max_or_exp_sum(ex, ph)) return;
    const Rows v = rows_of(ph.in[0].type.shape);
    const bool log = ph.plain.kind == OpKind::LogSoftmax;
    for_row_chunks(ex, v.rows, 2, [&](int64_t r0, int64_t n, float *stats) {
        ex.for_each(n, Interleave{f32(ph.given[0]) + r0, f32(ph.given[1]) + r0, stats});
        const int64_t first = r0 * v.D;
        if (log) ex.for_each(n * v.D, sm::LogSoftmaxKernel{f32(ph.in[0]), stats, f32_out(ph.out[0]), v.D, first});
        else ex.for_each(n * v.D, sm::SoftmaxKernel{f32(ph.in[0]), stats, f32_out(ph.out[0]), v.D, first});
    });
}

// softmax_grad (dot = sum dy * y) and log_softmax_grad (dy_sum = sum dy).
template <class Exec>
void softmax_grad(Exec &ex, const Phase &ph) {
    const Rows v = rows_of(ph.in[0].type.shape);
    const bool softmax = ph.plain.kind == OpKind::SoftmaxGrad;
    const float *dy = f32(ph.in[0]), *y = f32(ph.in[1]);
    if (ph.p == 0) {
        row_sum_stage<sm::DotTerm>(
            ex, v, 0, 0, f32_out(ph.out[0]),
            [&](int64_t r0, float *) { return sm::DotTerm{dy + r0 * v.D, y + r0 * v.D, softmax}; },
            [](int64_t, int64_t, float *) {});
        return;
    }
    const float *sum = f32(ph.given[0]);
    if (softmax) ex.for_each(v.rows * v.D, sm::SoftmaxGradKernel{dy, y, sum, f32_out(ph.out[0]), v.D, 0});
    else ex.for_each(v.rows * v.D, sm::LogSoftmaxGradKernel{dy, y, sum, f32_out(ph.out[0]), v.D, 0});
}

template <class Exec>
void softmax_xent(Exec &ex, const Phase &ph) {
    if (row_max_or_exp_sum(ex, ph)) return;
    const Rows v = rows_of(ph.in[0].type.shape);
    const int32_t *labels = i32(ph.in[1]);
    if (ph.p == 2) {
        ex.for_each(v.rows, XentPicked{f32(ph.in[0]), f32(ph.given[0]), labels, f32_out(ph.out[0]), v.D,
                                       ph.origin[0][1], ph.whole[0][1]});
        return;
    }
    // The batch mean over this block's rows, as the description (a sum of
    // terms already divided by the block's N, so that batch blocks add up).
    const float N = static_cast<float>(v.rows);
    for_row_chunks(ex, v.rows, 1, [&](int64_t r0, int64_t n, float *nll) {
        ex.for_each(n, XentNll{f32(ph.given[1]) + r0, f32(ph.given[2]) + r0, nll});
        ex.for_each(1, sm::XentSumKernel{nll, f32_out(ph.out[0]), n, N, r0 == 0});
    });
}

template <class Exec>
void softmax_xent_grad(Exec &ex, const Phase &ph) {
    if (row_max_or_exp_sum(ex, ph)) return;
    const Rows v = rows_of(ph.in[0].type.shape);
    const float N = static_cast<float>(v.rows);
    for_row_chunks(ex, v.rows, 2, [&](int64_t r0, int64_t n, float *stats) {
        ex.for_each(n, Interleave{f32(ph.given[0]) + r0, f32(ph.given[1]) + r0, stats});
        ex.for_each(n * v.D, sm::XentGradKernel{f32(ph.in[0]), stats, f32(ph.in[2]), i32(ph.in[1]),
                                                f32_out(ph.out[0]), v.D, r0 * v.D, r0, N, ph.origin[0][1],
                                                ph.whole[0][1]});
    });
}

// Layer norm and its gradient: x is input `xi`; the means divide by the
// whole row's width.
template <class Exec>
void layer_norm(Exec &ex, const Phase &ph, bool grad, float eps) {
    const size_t xi = grad ? 1 : 0;
    const Rows v = rows_of(ph.in[xi].type.shape);
    const float count = static_cast<float>(ph.whole[xi].back());
    const float *x = f32(ph.in[xi]);
    const float *sum_x = ph.p > 0 ? f32(ph.given[0]) : nullptr, *sq_dev = ph.p > 1 ? f32(ph.given[1]) : nullptr;
    auto stats_of = [&](int64_t r0, int64_t n, float *stats) {
        ex.for_each(n, RowStatsOfStages{sum_x + r0, sq_dev ? sq_dev + r0 : nullptr, count, eps, stats});
    };
    if (ph.p == 0) {
        row_sum_stage<SumOf<float>>(
            ex, v, 0, 0, f32_out(ph.out[0]), [&](int64_t r0, float *) { return SumOf<float>{x + r0 * v.D}; },
            [](int64_t, int64_t, float *) {});
    } else if (ph.p == 1) {
        row_sum_stage<norm_detail::SquaredDeviations<float>>(
            ex, v, 2, 0, f32_out(ph.out[0]),
            [&](int64_t r0, float *ws) { return norm_detail::SquaredDeviations<float>{x + r0 * v.D, ws}; },
            stats_of);
    } else if (!grad) {
        norm_detail::layer_norm_by_rows(ex, ph.in, ph.out,
                                        [&](int64_t r0, int64_t n, float *stats, float *) { stats_of(r0, n, stats); });
    } else if (ph.p < ph.m) {  // sum_g (stage 2) or sum_g_xhat (stage 3): both terms, one kept
        const float *dy = f32(ph.in[0]), *gamma = f32(ph.in[2]);
        row_sum_stage<norm_detail::LayerGradTerms>(
            ex, v, 2, ph.p - 2, f32_out(ph.out[0]),
            [&](int64_t r0, float *ws) {
                return norm_detail::LayerGradTerms{dy + r0 * v.D, x + r0 * v.D, gamma, ws, v.D};
            },
            stats_of);
    } else {
        norm_detail::layer_norm_grad_by_rows(
            ex, ph.in, ph.out, count, [&](int64_t r0, int64_t n, float *stats, float *sums, float *) {
                stats_of(r0, n, stats);
                ex.for_each(n, Interleave{f32(ph.given[2]) + r0, f32(ph.given[3]) + r0, sums});
            });
    }
}

// Batch norm and its gradient and running statistics: x is input `xi`, seen
// as [N, C, S]; M is the whole tensor's N * H * W, multiplied as floats left
// to right as the description does.
template <class Exec>
void batch_norm(Exec &ex, const Phase &ph, float eps) {
    const bool grad = ph.plain.kind == OpKind::BatchNormGrad;
    const size_t xi = grad ? 1 : 0;
    const Shape &s = ph.in[xi].type.shape, &w = ph.whole[xi];
    const bool spatial = s.size() == 4;
    const float M = spatial ? static_cast<float>(w[0]) * static_cast<float>(w[2]) * static_cast<float>(w[3])
                            : static_cast<float>(w[0]);
    const ChannelView v = lanes::channel_view(s[0], s[1], spatial ? s[2] * s[3] : 1, M);
    const float *x = f32(ph.in[xi]);
    const double *sum_x = ph.p > 0 ? f64(ph.given[0]) : nullptr, *sq_dev = ph.p > 1 ? f64(ph.given[1]) : nullptr;
    if (ph.p < ph.m) {
        // Stage p: a double sum per channel. Stages 1 and 3 read the mean.
        double *out = f64_out(ph.out[0]);
        for_channel_chunks<double>(ex, v, 1, [&](const ChannelChunk<double> &k) {
            if (ph.p == 1 || ph.p == 3)
                ex.for_each(k.cc, ChannelStatsOfStages{sum_x, nullptr, M, eps, k.c0, k.ws});
            const int64_t n = k.cc * v.lanes;
            if (ph.p == 0) ex.for_each(n, ChannelLanes<SumOf<double>>{{x}, v, k.c0, k.partial});
            if (ph.p == 1)
                ex.for_each(n, ChannelLanes<norm_detail::SquaredDeviations<double>>{{x, k.ws}, v, k.c0, k.partial});
            if (ph.p == 2) ex.for_each(n, ChannelLanes<SumOf<double>>{{f32(ph.in[0])}, v, k.c0, k.partial});
            if (ph.p == 3) ex.for_each(n, ChannelLanes<DyDeviation>{{f32(ph.in[0]), x, k.ws}, v, k.c0, k.partial});
            ex.for_each(k.cc, ChannelTotal<double>{k.partial, v.lanes, 1, 0, k.c0, out});
        });
        return;
    }
    if (ph.plain.kind == OpKind::BatchNormStats) {
        const float momentum = static_cast<float>(ph.plain.attrs.get_float(ph.plain.who(), "momentum", 0.1));
        ex.for_each(v.C, ChannelRunningOfStages{sum_x, sq_dev, f32(ph.in[1]), f32(ph.in[2]), M, momentum,
                                                f32_out(ph.out[0]), f32_out(ph.out[1])});
        return;
    }
    for_channel_chunks<double>(ex, v, 0, [&](const ChannelChunk<double> &k) {
        ex.for_each(k.cc, ChannelStatsOfStages{sum_x, sq_dev, M, eps, k.c0, k.ws});
        const norm_detail::ChannelElement e{v, k.c0, k.cc};
        if (!grad) {
            ex.for_each(v.N * k.cc * v.S, norm_detail::ChannelApply{x, f32(ph.in[1]), f32(ph.in[2]), k.ws,
                                                                    f32_out(ph.out[0]), e});
            return;
        }
        float *dgamma = f32_out(ph.out[1]), *dbeta = f32_out(ph.out[2]);
        ex.for_each(k.cc, ChannelAffineOfStages{f64(ph.given[2]), f64(ph.given[3]), k.ws, k.c0, dgamma, dbeta});
        ex.for_each(v.N * k.cc * v.S, norm_detail::ChannelGradDx{f32(ph.in[0]), x, f32(ph.in[2]), k.ws, dgamma,
                                                                 dbeta, f32_out(ph.out[0]), e});
    });
}

template <class Exec>
void global_avg_pool(Exec &ex, const Phase &ph) {
    const Shape &s = ph.in[0].type.shape;
    const int64_t planes = s[0] * s[1];
    // The stage is the planes' sums: the average's kernel with divisor 1.
    if (ph.p == 0)
        return ex.for_each(planes, conv_detail::GlobalAvg{f32(ph.in[0]), f32_out(ph.out[0]), s[2] * s[3], 1.0f});
    const float count = static_cast<float>(ph.whole[0][2] * ph.whole[0][3]);
    ex.for_each(planes, PlaneMean{f32(ph.given[0]), f32_out(ph.out[0]), count});
}

// The stage count each kernel above implements, per operator (0: none).
inline int stages_implemented(OpKind k) {
    switch (k) {
    case OpKind::SoftmaxGrad:
    case OpKind::LogSoftmaxGrad:
    case OpKind::GlobalAvgPool: return 1;
    case OpKind::Softmax:
    case OpKind::LogSoftmax:
    case OpKind::SoftmaxXentGrad:
    case OpKind::LayerNorm:
    case OpKind::BatchNorm:
    case OpKind::BatchNormStats: return 2;
    case OpKind::SoftmaxXent: return 3;
    case OpKind::LayerNormGrad:
    case OpKind::BatchNormGrad: return 4;
    default: return 0;
    }
}

}  // namespace staged_detail

// One phase of a staged operator (tessera/lang/staged.h) on `ex`; the output
// types are already checked (run_op).
template <class Exec>
void run_staged(Exec &ex, const OpCall &call, const std::vector<TensorRef> &inputs,
                const std::vector<TensorRef> &outputs) {
    using namespace staged_detail;
    Phase ph;
    ph.plain = unstaged_call(call);
    ph.p = staged_phase(call);
    ph.in.assign(inputs.begin(), inputs.end() - ph.p);
    ph.given.assign(inputs.end() - ph.p, inputs.end());
    ph.out = outputs;
    std::vector<TensorType> types;
    for (size_t i = 0; i < ph.in.size(); i++) {
        types.push_back(ph.in[i].type);
        ph.whole.push_back(staged_whole(call, i));
        ph.origin.push_back(staged_origin(call, i));
    }
    ph.m = static_cast<int>(op_stages(ph.plain, types).size());
    const int implemented = stages_implemented(call.kind);
    TESSERA_CHECK(implemented > 0, call.who(), " runs as a staged operator (phase ", ph.p, "), which has no GPU ",
                  "kernels; on a GPU, partition without splitting its reductions (--no-staged-reductions)");
    TESSERA_INTERNAL_ASSERT(implemented == ph.m, call.who(), ": the GPU kernels implement ", implemented,
                            " stages, the description marks ", ph.m);
    const float eps = static_cast<float>(ph.plain.attrs.get_float(ph.plain.who(), "eps", 1e-5));
    switch (call.kind) {
    case OpKind::Softmax:
    case OpKind::LogSoftmax: return softmax(ex, ph);
    case OpKind::SoftmaxGrad:
    case OpKind::LogSoftmaxGrad: return softmax_grad(ex, ph);
    case OpKind::SoftmaxXent: return softmax_xent(ex, ph);
    case OpKind::SoftmaxXentGrad: return softmax_xent_grad(ex, ph);
    case OpKind::LayerNorm: return layer_norm(ex, ph, false, eps);
    case OpKind::LayerNormGrad: return layer_norm(ex, ph, true, eps);
    case OpKind::BatchNorm:
    case OpKind::BatchNormGrad:
    case OpKind::BatchNormStats: return batch_norm(ex, ph, eps);
    case OpKind::GlobalAvgPool: return global_avg_pool(ex, ph);
    default: TESSERA_INTERNAL_ASSERT(false, call.who(), ": no staged GPU kernel");
    }
}

}  // namespace tessera::gpu
