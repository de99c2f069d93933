// Two-level sums for the GPU kernels (see exec.h for the context they run on).
//
// A sum over many values owned by one output (a channel's N * H * W values, a
// column's rows) is slow as one thread walking all of them: a batch norm at
// batch 128 over 64x64 maps is 524288 values a thread, on as many threads as
// there are channels. Here it is two passes, both deterministic (every run
// adds in the same order) and free of atomics:
//   1. lanes: `lanes` threads per output each add a strided share of its
//      values, in order, into the workspace;
//   2. totals: one thread per output adds its lanes' partial sums in lane
//      order.
// The order differs from the CPU kernel's (a description's serial order), so
// results agree with it within rounding, as the host test's tolerances allow.
//
// Three layouts, so that adjacent threads read adjacent addresses:
//   channels: an [N, C, S] tensor, channel c's values n * S + s; the lanes of
//             one channel are adjacent threads (i = c * lanes + lane), and
//             lane l takes values l, l + lanes, ... (batch norm, and a bias
//             gradient with an inner extent);
//   columns:  a row-major [rows, D] tensor, column d's values its rows; the
//             columns of one lane are adjacent threads (i = lane * D + d), and
//             lane l takes rows l, l + lanes, ... (layer norm's dgamma, a
//             dense layer's bias gradient);
//   rows:     a row-major [rows, D] tensor, row r's values its D columns; the
//             lanes of one row are adjacent threads (i = r * kRowLanes +
//             lane), and lane l takes columns l, l + kRowLanes, ... (layer
//             norm's row statistics: one thread a row read addresses D apart,
//             74 to 108 GB/s on an H100).
//
// A Term says what is added for value k: `using Acc` (float or double), `static
// constexpr int kValues` (sums kept per lane) and `TESSERA_HD void add(Acc *acc,
// int64_t k, int64_t owner) const` (owner: the chunk channel, or the row).
#pragma once

#include <algorithm>
#include <cstdint>

#include "exec.h"

namespace tessera::gpu::lanes {

struct ChannelView {
    int64_t N, C, S;
    float M;        // N * S as a description computes it, in float (batch norm's divisor)
    int64_t lanes;  // threads per channel in the first pass
};

inline constexpr int64_t kChannelLanes = 256;
// Column lanes: 32, or one for every 32 rows up to 256 (a dense layer's bias
// gradient over 4096 rows of 768 had 24576 threads walking 128 rows each).
inline constexpr int64_t kColumnLanes = 32, kMaxColumnLanes = 256, kRowsPerColumnLane = 32;
inline constexpr int64_t kRowLanes = 32;

inline ChannelView channel_view(int64_t N, int64_t C, int64_t S, float M = 0.0f) {
    return {N, C, S, M, std::max<int64_t>(1, std::min(kChannelLanes, N * S))};
}

// Pass 1, channels: for i = c * lanes + lane, Term's sums over every lanes-th
// value of channel c0 + c, into partial[i * kValues + q]. Value f = n * S + s
// of the channel advances by (lanes / S, lanes % S) with a carry: no
// division per value.
template <class Term>
struct ChannelLanes {
    Term term;
    ChannelView v;
    int64_t c0;
    typename Term::Acc *partial;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t c = i / v.lanes, ch = c0 + c, lane = i % v.lanes;
        const int64_t dn = v.lanes / v.S, ds = v.lanes % v.S;
        typename Term::Acc acc[Term::kValues] = {};
        for (int64_t n = lane / v.S, s = lane % v.S; n < v.N;) {
            term.add(acc, (n * v.C + ch) * v.S + s, c);
            n += dn;
            s += ds;
            if (s >= v.S) {
                s -= v.S;
                n++;
            }
        }
        for (int q = 0; q < Term::kValues; q++) partial[i * Term::kValues + q] = acc[q];
    }
};

// Pass 2, channels: sum q of chunk channel c, its lanes added in order.
template <class Acc>
TESSERA_HD Acc channel_total(const Acc *partial, int64_t c, int64_t lanes, int values, int q) {
    Acc total = 0;
    for (int64_t l = 0; l < lanes; l++) total += partial[(c * lanes + l) * values + q];
    return total;
}

// Pass 1, columns: for i = lane * D + d, Term's sums over rows lane, lane +
// lanes, ... of column d, into partial[i * kValues + q].
template <class Term>
struct ColumnLanes {
    Term term;
    int64_t rows, D, lanes;
    typename Term::Acc *partial;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t d = i % D;
        typename Term::Acc acc[Term::kValues] = {};
        for (int64_t r = i / D; r < rows; r += lanes) term.add(acc, r * D + d, r);
        for (int q = 0; q < Term::kValues; q++) partial[i * Term::kValues + q] = acc[q];
    }
};

// Pass 2, columns: sum q of column d, its lanes added in order.
template <class Acc>
TESSERA_HD Acc column_total(const Acc *partial, int64_t d, int64_t D, int64_t lanes, int values, int q) {
    Acc total = 0;
    for (int64_t l = 0; l < lanes; l++) total += partial[(l * D + d) * values + q];
    return total;
}

// Pass 1, rows: for i = r * kRowLanes + lane, Term's sums over columns lane,
// lane + kRowLanes, ... of row r, into partial[i * kValues + q].
template <class Term>
struct RowLanes {
    Term term;
    int64_t D;
    typename Term::Acc *partial;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t r = i / kRowLanes;
        typename Term::Acc acc[Term::kValues] = {};
        for (int64_t d = i % kRowLanes; d < D; d += kRowLanes) term.add(acc, r * D + d, r);
        for (int q = 0; q < Term::kValues; q++) partial[i * Term::kValues + q] = acc[q];
    }
};

// Pass 2, rows: sum q of row r, its lanes added in order.
template <class Acc>
TESSERA_HD Acc row_total(const Acc *partial, int64_t r, int values, int q) {
    Acc total = 0;
    for (int64_t l = 0; l < kRowLanes; l++) total += partial[(r * kRowLanes + l) * values + q];
    return total;
}

// The column lanes whose partial sums (`values` floats a lane and column) fit
// in `floats` of workspace beside `reserve` floats: kColumnLanes or one for
// every kRowsPerColumnLane rows, up to kMaxColumnLanes, no
// more than the rows, at least 1; 0 when not even one lane fits.
inline int64_t column_lanes(int64_t floats, int64_t rows, int64_t D, int values, int64_t reserve) {
    const int64_t wanted = std::clamp(rows / kRowsPerColumnLane, kColumnLanes, kMaxColumnLanes);
    int64_t lanes = std::max<int64_t>(1, std::min(wanted, rows));
    while (lanes > 0 && lanes * D * values + reserve > floats) lanes /= 2;
    return lanes;
}

template <class A>
struct SumOf {  // x
    using Acc = A;
    static constexpr int kValues = 1;
    const float *x;
    TESSERA_HD void add(Acc *acc, int64_t k, int64_t) const { acc[0] += x[k]; }
};

// A chunk of channels and its workspace: 2 floats a channel (kernels keep
// statistics there), then the lanes' partial sums, then room for them folded
// (fold_lanes).
template <class Acc>
struct ChannelChunk {
    int64_t c0, cc;
    float *ws;
    Acc *partial;
    Acc *folded;
};

// Pass 2 is one thread a channel adding its lanes in order: with 256 lanes
// and a few dozen channels (a ResNet's batch norm over small maps) that is a
// chain of 256 loads on a few threads, and the statistics kernels ran at 90
// to 150 GB/s on an H200. Folding first, kFold lanes into one (in order, one
// thread per channel and group), leaves pass 2 lanes / kFold loads.
inline constexpr int64_t kFold = 16;

inline int64_t folded_lanes(int64_t lanes) { return lanes % kFold == 0 && lanes >= 2 * kFold ? lanes / kFold : lanes; }

template <class Acc>
struct FoldLanes {
    const Acc *in;
    Acc *out;
    int64_t lanes_out;
    int values;
    TESSERA_HD void operator()(int64_t i) const {  // i = (c * lanes_out + g) * values + q
        const int64_t q = i % values, cg = i / values;
        Acc total = 0;
        for (int64_t j = 0; j < kFold; j++) total += in[(cg * kFold + j) * values + q];
        out[i] = total;
    }
};

// The chunk's lanes as pass 2 should read them: folded into k.folded when
// there are enough, else as they are; `v` with the lanes it then has.
template <class Acc>
struct FoldedLanes {
    ChannelView v;
    const Acc *partial;
};

template <class Acc, class Exec>
FoldedLanes<Acc> fold_lanes(Exec &ex, ChannelView v, const ChannelChunk<Acc> &k, int values) {
    const int64_t lanes = folded_lanes(v.lanes);
    if (lanes == v.lanes) return {v, k.partial};
    ex.for_each(k.cc * lanes * values, FoldLanes<Acc>{k.partial, k.folded, lanes, values});
    v.lanes = lanes;
    return {v, k.folded};
}

// Runs body(chunk) over chunks of channels whose partial sums (`values` of
// type Acc a lane), and their fold, fit the workspace.
template <class Acc, class Exec, class Body>
void for_channel_chunks(Exec &ex, const ChannelView &v, int values, Body body) {
    const int64_t acc_floats = static_cast<int64_t>(sizeof(Acc) / sizeof(float));
    const int64_t partial_floats = v.lanes * values * acc_floats;
    const int64_t folded_floats = folded_lanes(v.lanes) == v.lanes ? 0 : folded_lanes(v.lanes) * values * acc_floats;
    const int64_t floats_each = 2 + partial_floats + folded_floats;
    const int64_t cap = static_cast<int64_t>(ex.workspace_bytes() / sizeof(float)) / floats_each;
    TESSERA_INTERNAL_ASSERT(cap >= 1, "a workspace of ", ex.workspace_bytes(), " bytes holds the sums of no channel");
    for (int64_t c0 = 0; c0 < v.C; c0 += cap) {
        const int64_t cc = std::min(cap, v.C - c0);
        float *ws = ex.workspace(static_cast<size_t>(cc * floats_each) * sizeof(float));
        // 2 * cc floats keep the partial sums 8-byte aligned, for double.
        Acc *partial = reinterpret_cast<Acc *>(ws + 2 * cc);
        body(ChannelChunk<Acc>{c0, cc, ws, partial, reinterpret_cast<Acc *>(ws + 2 * cc + cc * partial_floats)});
    }
}

}  // namespace tessera::gpu::lanes
