// GPU kernels of the softmax family (see exec.h for the context they run on).
//
// The row-wise operators (softmax, log_softmax and their gradients) see the
// input as [rows, classes], every leading dimension folded into the rows, as
// the CPU kernels do. Each runs in two launches: a statistics pass, one thread
// per row, that reduces the row serially in the order of the Halide
// description (so the sums match the CPU kernel closely) and stores one or two
// floats per row in the workspace; then an element-wise pass, one thread per
// element, coalesced, that reads the row's statistics. The statistics pass is
// the slow part by design: its threads read rows that lie `classes` apart.
//
// Cross-entropy is one thread per row for the row's negative log-likelihood,
// then a single thread that adds the rows up in order (the batch mean).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "exec.h"

namespace tessera::gpu {

namespace sm {

// Halide's Float(32).min(): the lowest finite float, the start of the row maximum.
constexpr float kLowest = -3.40282347e+38f;

// The row maximum and sum(exp(x - max)) of each row, at stats[2 * r] and
// stats[2 * r + 1]; r counts from `first_row`.
struct RowStatsKernel {
    const float *x;
    float *stats;
    int64_t classes, first_row;
    TESSERA_HD void operator()(int64_t r) const {
        const float *row = x + (first_row + r) * classes;
        float mx = kLowest;
        for (int64_t k = 0; k < classes; k++) mx = fmaxf(mx, row[k]);
        float sum = 0.0f;
        for (int64_t k = 0; k < classes; k++) sum += expf(row[k] - mx);
        stats[2 * r] = mx;
        stats[2 * r + 1] = sum;
    }
};

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

// Per row: sum(dy * y) (softmax_grad, with_y) or sum(dy) (log_softmax_grad).
struct RowDotKernel {
    const float *dy, *y;
    float *stats;
    int64_t classes, first_row;
    bool with_y;
    TESSERA_HD void operator()(int64_t r) const {
        int64_t base = (first_row + r) * classes;
        float acc = 0.0f;
        if (with_y)
            for (int64_t k = 0; k < classes; k++) acc += dy[base + k] * y[base + k];
        else
            for (int64_t k = 0; k < classes; k++) acc += dy[base + k];
        stats[r] = acc;
    }
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

// nll[r] = log(sum(exp(x - max))) - (x[label] - max).
struct XentRowKernel {
    const float *logits;
    const int32_t *labels;
    float *nll;
    int64_t classes, first_row;
    TESSERA_HD void operator()(int64_t r) const {
        const float *row = logits + (first_row + r) * classes;
        float mx = kLowest;
        for (int64_t k = 0; k < classes; k++) mx = fmaxf(mx, row[k]);
        float sum = 0.0f;
        for (int64_t k = 0; k < classes; k++) sum += expf(row[k] - mx);
        float picked = row[clamp_label(labels[first_row + r], classes)] - mx;
        nll[r] = logf(sum) - picked;
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

// dlogits = dloss * (softmax - onehot) / N, with the row statistics of RowStatsKernel.
struct XentGradKernel {
    const float *logits, *stats, *dloss;
    const int32_t *labels;
    float *dlogits;
    int64_t classes, first, first_row;
    float n;
    TESSERA_HD void operator()(int64_t i) const {
        int64_t r = i / classes, k = i % classes;
        int64_t j = first + i;
        float onehot = k == clamp_label(labels[first_row + r], classes) ? 1.0f : 0.0f;
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
    // Per-row statistics go to the workspace, at most two floats a row: rows are
    // processed in chunks that fit it.
    bool one_per_row =
        c.kind == OpKind::SoftmaxGrad || c.kind == OpKind::LogSoftmaxGrad || c.kind == OpKind::SoftmaxXent;
    int64_t per_row = one_per_row ? 1 : 2;
    int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(ex.workspace_bytes() / (sizeof(float) * per_row)));
    chunk = std::min(chunk, rows);
    float *stats = ex.workspace(static_cast<size_t>(chunk * per_row) * sizeof(float));
    float n = static_cast<float>(rows);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t nr = std::min(chunk, rows - r0), first = r0 * classes, ne = nr * classes;
        switch (c.kind) {
        case OpKind::Softmax:
            ex.for_each(nr, sm::RowStatsKernel{f32(in[0]), stats, classes, r0});
            ex.for_each(ne, sm::SoftmaxKernel{f32(in[0]), stats, f32_out(out[0]), classes, first});
            break;
        case OpKind::LogSoftmax:
            ex.for_each(nr, sm::RowStatsKernel{f32(in[0]), stats, classes, r0});
            ex.for_each(ne, sm::LogSoftmaxKernel{f32(in[0]), stats, f32_out(out[0]), classes, first});
            break;
        case OpKind::SoftmaxGrad:
            ex.for_each(nr, sm::RowDotKernel{f32(in[0]), f32(in[1]), stats, classes, r0, true});
            ex.for_each(ne, sm::SoftmaxGradKernel{f32(in[0]), f32(in[1]), stats, f32_out(out[0]), classes, first});
            break;
        case OpKind::LogSoftmaxGrad:
            ex.for_each(nr, sm::RowDotKernel{f32(in[0]), f32(in[1]), stats, classes, r0, false});
            ex.for_each(ne,
                        sm::LogSoftmaxGradKernel{f32(in[0]), f32(in[1]), stats, f32_out(out[0]), classes, first});
            break;
        case OpKind::SoftmaxXent:
            ex.for_each(nr, sm::XentRowKernel{f32(in[0]), i32(in[1]), stats, classes, r0});
            ex.for_each(1, sm::XentSumKernel{stats, f32_out(out[0]), nr, n, r0 == 0});
            break;
        case OpKind::SoftmaxXentGrad:
            ex.for_each(nr, sm::RowStatsKernel{f32(in[0]), stats, classes, r0});
            ex.for_each(ne, sm::XentGradKernel{f32(in[0]), stats, f32(in[2]), i32(in[1]), f32_out(out[0]), classes,
                                               first, r0, n});
            break;
        default: TESSERA_INTERNAL_ASSERT(false, "not a softmax operator: ", c.who());
        }
    }
}

}  // namespace tessera::gpu
