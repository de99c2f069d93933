// GPU kernels of the softmax family (see exec.h for the context they run on).
//
// The row-wise operators (softmax, log_softmax and their gradients) see the
// input as [rows, classes], every leading dimension folded into the rows, as
// the CPU kernels do. Each reduces its rows in row lanes (lanes.h: 32 adjacent
// threads a row each take every 32nd column, then one thread a row combines
// the lanes in order) and stores one or two floats per row in the workspace;
// then an element-wise pass, one thread per element, reads them. One thread a
// row, reading rows `classes` apart, ran softmax at 462 GB/s on an H100.
//
// Cross-entropy takes the row statistics of softmax for each row's negative
// log-likelihood, then a single thread adds the rows up in order (the batch
// mean).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "exec.h"
#include "lanes.h"

namespace tessera::gpu {

namespace sm {

// Halide's Float(32).min(): the lowest finite float, the start of the row maximum.
constexpr float kLowest = -3.40282347e+38f;

using lanes::kRowLanes;
using lanes::row_total;

// Pass 1 of the row maximum: lane l of row r takes columns l, l + kRowLanes, ...
struct RowLaneMax {
    const float *x;
    int64_t classes;
    float *partial;
    TESSERA_HD void operator()(int64_t i) const {
        const float *row = x + (i / kRowLanes) * classes;
        float mx = kLowest;
        for (int64_t k = i % kRowLanes; k < classes; k += kRowLanes) mx = fmaxf(mx, row[k]);
        partial[i] = mx;
    }
};

// stats[2r] = the row's maximum (exact in any order).
struct RowMax {
    const float *partial;
    float *stats;
    TESSERA_HD void operator()(int64_t r) const {
        float mx = kLowest;
        for (int64_t l = 0; l < kRowLanes; l++) mx = fmaxf(mx, partial[r * kRowLanes + l]);
        stats[2 * r] = mx;
    }
};

struct ExpShifted {  // exp(x - the row's maximum)
    using Acc = float;
    static constexpr int kValues = 1;
    const float *x, *stats;
    TESSERA_HD void add(Acc *acc, int64_t k, int64_t r) const { acc[0] += expf(x[k] - stats[2 * r]); }
};

// stats[2r + 1] = sum(exp(x - max)).
struct RowExpSum {
    const float *partial;
    float *stats;
    TESSERA_HD void operator()(int64_t r) const { stats[2 * r + 1] = row_total(partial, r, 1, 0); }
};

// The row maximum and sum(exp(x - max)) of each of n rows, at stats[2r] and
// stats[2r + 1]; `x` is the first row's.
template <class Exec>
void row_max_exp_sum(Exec &ex, const float *x, int64_t n, int64_t classes, float *partial, float *stats) {
    ex.for_each(n * kRowLanes, RowLaneMax{x, classes, partial});
    ex.for_each(n, RowMax{partial, stats});
    ex.for_each(n * kRowLanes, lanes::RowLanes<ExpShifted>{{x, stats}, classes, partial});
    ex.for_each(n, RowExpSum{partial, stats});
}

struct SoftmaxKernel {
    const float *x, *stats;
    float *y;
    int64_t classes, first;  // first: the flat index of the chunk's first element
    TESSERA_HD void operator()(int64_t i) const {
        int64_t r = i / classes;
        y[first + i] = expf(x[first + i] - stats[2 * r]) / stats[2 * r + 1];
    }
};

// x - max is rounded first and log(sum) subtracted from it, as the Halide
// description does, so the result rounds at its own magnitude.
struct LogSoftmaxKernel {
    const float *x, *stats;
    float *y;
    int64_t classes, first;
    TESSERA_HD void operator()(int64_t i) const {
        int64_t r = i / classes;
        float shifted = x[first + i] - stats[2 * r];
        y[first + i] = shifted - logf(stats[2 * r + 1]);
    }
};

// The terms of sum(dy * y) (softmax_grad, with_y) or sum(dy) (log_softmax_grad).
struct DotTerm {
    using Acc = float;
    static constexpr int kValues = 1;
    const float *dy, *y;
    bool with_y;
    TESSERA_HD void add(Acc *acc, int64_t k, int64_t) const { acc[0] += with_y ? dy[k] * y[k] : dy[k]; }
};

// stats[r] = the row's sum.
struct RowSum {
    const float *partial;
    float *stats;
    TESSERA_HD void operator()(int64_t r) const { stats[r] = row_total(partial, r, 1, 0); }
};

// softmax_grad: dx = y * (dy - sum(dy * y)).
struct SoftmaxGradKernel {
    const float *dy, *y, *stats;
    float *dx;
    int64_t classes, first;
    TESSERA_HD void operator()(int64_t i) const {
        int64_t j = first + i;
        dx[j] = y[j] * (dy[j] - stats[i / classes]);
    }
};

// log_softmax_grad: dx = dy - exp(y) * sum(dy).
struct LogSoftmaxGradKernel {
    const float *dy, *y, *stats;
    float *dx;
    int64_t classes, first;
    TESSERA_HD void operator()(int64_t i) const {
        int64_t j = first + i;
        dx[j] = dy[j] - expf(y[j]) * stats[i / classes];
    }
};

// Labels are data, so a bad one is clamped into [0, classes) like the CPU
// kernel does; it only selects a class.
TESSERA_HD inline int64_t clamp_label(int32_t label, int64_t classes) {
    int64_t l = label;
    return l < 0 ? 0 : (l >= classes ? classes - 1 : l);
}

// nll[r] = log(sum(exp(x - max))) - (x[label] - max), from the row statistics.
struct XentRowKernel {
    const float *logits, *stats;
    const int32_t *labels;
    float *nll;
    int64_t classes;
    TESSERA_HD void operator()(int64_t r) const {
        const float picked = logits[r * classes + clamp_label(labels[r], classes)] - stats[2 * r];
        nll[r] = logf(stats[2 * r + 1]) - picked;
    }
};

// The batch mean, as a sum of terms already divided by N (the CPU order). One
// thread: `loss` carries the running sum from one chunk to the next.
struct XentSumKernel {
    const float *nll;
    float *loss;
    int64_t count;
    float n;
    bool first_chunk;
    TESSERA_HD void operator()(int64_t) const {
        float acc = first_chunk ? 0.0f : loss[0];
        for (int64_t r = 0; r < count; r++) acc += nll[r] / n;
        loss[0] = acc;
    }
};

// dlogits = dloss * (softmax - onehot) / N, with the row statistics of row_max_exp_sum.
// The logits may be a block of the classes (a staged operator, ops_staged.h):
// class k of the block is class class0 + k of whole_classes, which is what a
// label is clamped into.
struct XentGradKernel {
    const float *logits, *stats, *dloss;
    const int32_t *labels;
    float *dlogits;
    int64_t classes, first, first_row;
    float n;
    int64_t class0, whole_classes;
    TESSERA_HD void operator()(int64_t i) const {
        int64_t r = i / classes, k = i % classes;
        int64_t j = first + i;
        float onehot = class0 + k == clamp_label(labels[first_row + r], whole_classes) ? 1.0f : 0.0f;
        float p = expf(logits[j] - stats[2 * r]) / stats[2 * r + 1];
        dlogits[j] = dloss[0] * (p - onehot) / n;
    }
};

}  // namespace sm

template <class Exec>
void run_softmax(Exec &ex, const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    const Shape &s = in[0].type.shape;
    int rank = static_cast<int>(s.size());
    int64_t rows = extent_product(s, 0, rank - 1), classes = s[rank - 1];  // infer_types: both >= 1
    // Per row, the workspace holds one or two statistics (cross-entropy: two
    // and the row's loss) and the row lanes' partial sums: rows are processed
    // in chunks that fit it.
    const bool one_per_row = c.kind == OpKind::SoftmaxGrad || c.kind == OpKind::LogSoftmaxGrad;
    const int64_t stats_per_row = one_per_row ? 1 : (c.kind == OpKind::SoftmaxXent ? 3 : 2);
    const int64_t per_row = stats_per_row + lanes::kRowLanes;
    int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(ex.workspace_bytes() / (sizeof(float) * per_row)));
    chunk = std::min(chunk, rows);
    float *stats = ex.workspace(static_cast<size_t>(chunk * per_row) * sizeof(float));
    float *partial = stats + chunk * stats_per_row;
    const float n = static_cast<float>(rows);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t nr = std::min(chunk, rows - r0), first = r0 * classes, ne = nr * classes;
        const float *x = f32(in[0]) + first;
        switch (c.kind) {
        case OpKind::Softmax:
            sm::row_max_exp_sum(ex, x, nr, classes, partial, stats);
            ex.for_each(ne, sm::SoftmaxKernel{f32(in[0]), stats, f32_out(out[0]), classes, first});
            break;
        case OpKind::LogSoftmax:
            sm::row_max_exp_sum(ex, x, nr, classes, partial, stats);
            ex.for_each(ne, sm::LogSoftmaxKernel{f32(in[0]), stats, f32_out(out[0]), classes, first});
            break;
        case OpKind::SoftmaxGrad:
        case OpKind::LogSoftmaxGrad: {
            const bool softmax = c.kind == OpKind::SoftmaxGrad;
            const sm::DotTerm dot{x, f32(in[1]) + first, softmax};
            ex.for_each(nr * lanes::kRowLanes, lanes::RowLanes<sm::DotTerm>{dot, classes, partial});
            ex.for_each(nr, sm::RowSum{partial, stats});
            if (softmax)
                ex.for_each(ne, sm::SoftmaxGradKernel{f32(in[0]), f32(in[1]), stats, f32_out(out[0]), classes, first});
            else
                ex.for_each(ne,
                            sm::LogSoftmaxGradKernel{f32(in[0]), f32(in[1]), stats, f32_out(out[0]), classes, first});
            break;
        }
        case OpKind::SoftmaxXent: {
            float *nll = stats + 2 * chunk;
            sm::row_max_exp_sum(ex, x, nr, classes, partial, stats);
            ex.for_each(nr, sm::XentRowKernel{x, stats, i32(in[1]) + r0, nll, classes});
            ex.for_each(1, sm::XentSumKernel{nll, f32_out(out[0]), nr, n, r0 == 0});
            break;
        }
        case OpKind::SoftmaxXentGrad:
            sm::row_max_exp_sum(ex, x, nr, classes, partial, stats);
            ex.for_each(ne, sm::XentGradKernel{f32(in[0]), stats, f32(in[2]), i32(in[1]), f32_out(out[0]), classes,
                                               first, r0, n, 0, classes});
            break;
        default: TESSERA_INTERNAL_ASSERT(false, "not a softmax operator: ", c.who());
        }
    }
}

}  // namespace tessera::gpu
