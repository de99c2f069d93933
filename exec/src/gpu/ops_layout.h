// GPU kernels of the layout family (see exec.h for the context they run on).
//
// Every kernel but reduce_sum is a gather: one thread per output element,
// reading the input element it comes from, so that writes are coalesced. The
// tensors are seen through the same small views as the CPU kernels
// (lang/src/layout.cpp): [outer, axis * inner] for concat and the slices,
// [outer, axis, inner] for reduce_sum, [outer, extent, inner] for broadcast.
//
// permute gathers with strided reads and no tiling through shared memory (the
// for_each concept has none), so a transpose reads at a fraction of the
// bandwidth a tiled kernel would reach. reduce_sum along the innermost axis
// runs one thread per output, walking its whole row: slow by design when there
// are few rows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "exec.h"

namespace tessera::gpu {

namespace layout_detail {

constexpr int kMaxPermuteDims = 8;

// y[i] = x[offset of i]: output dims `ext` (row-major), each with the stride
// its index has in x.
struct PermuteGather {
    const float *x;
    float *y;
    int dims;
    int64_t ext[kMaxPermuteDims], stride[kMaxPermuteDims];
    TESSERA_HD void operator()(int64_t i) const {
        int64_t rem = i, off = 0;
        for (int k = dims - 1; k >= 0; k--) {
            off += (rem % ext[k]) * stride[k];
            rem /= ext[k];
        }
        y[i] = x[off];
    }
};

// The permutation as blocks: extent-1 dimensions do not move any data and are
// dropped, and input dimensions that stay adjacent and in order in the output
// move as one block. Returns, in output order, each block's extent and its
// stride in x. Infer_types() allows at most 4 blocks.
inline std::vector<std::pair<int64_t, int64_t>> permute_blocks(const Shape &s, const std::vector<int64_t> &perm) {
    const int rank = static_cast<int>(s.size());
    // Input dims with extent > 1, in output order.
    std::vector<int> moved;
    for (int64_t d : perm)
        if (s[d] != 1) moved.push_back(static_cast<int>(d));
    // Successor of each kept input dim among the kept ones.
    std::vector<int> next_kept(rank, -1);
    for (int d = rank - 1, after = -1; d >= 0; d--) {
        next_kept[d] = after;
        if (s[d] != 1) after = d;
    }
    struct Block {
        int first;  // the block's first input dim
        int last;   // its last input dim
        int64_t extent;
    };
    std::vector<Block> blocks;
    for (int d : moved) {
        if (!blocks.empty() && next_kept[blocks.back().last] == d) {
            blocks.back().last = d;
            blocks.back().extent *= s[d];
        } else {
            blocks.push_back({d, d, s[d]});
        }
    }
    // A block's stride in x is the product of the blocks after it in input order.
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const Block &b : blocks) {
        int64_t stride = 1;
        for (const Block &o : blocks)
            if (o.first > b.first) stride *= o.extent;
        out.push_back({b.extent, stride});
    }
    return out;
}

// [outer, cols] at column offset `from` of x, whose rows are `x_cols` long, to
// [outer, cols] at column offset `to` of y, whose rows are `y_cols` long.
struct CopyColumns {
    const float *x;
    float *y;
    int64_t cols, x_cols, y_cols, from, to;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t o = i / cols, j = i % cols;
        y[o * y_cols + to + j] = x[o * x_cols + from + j];
    }
};

// dx[o, j] = dy[o, j - start] inside dy's columns, zero outside.
struct PadColumns {
    const float *dy;
    float *dx;
    int64_t dy_cols, dx_cols, start;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t o = i / dx_cols, j = i % dx_cols - start;
        dx[i] = (j >= 0 && j < dy_cols) ? dy[o * dy_cols + j] : 0.0f;
    }
};

// y[o, k] = sum over a of x[o, a, k], in order of a; i = o * inner + k, so
// consecutive threads read consecutive addresses when inner > 1.
struct SumAxis {
    const float *x;
    float *y;
    int64_t axis, inner;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t o = i / inner, k = i % inner;
        const float *p = x + o * axis * inner + k;
        float s = 0.0f;
        for (int64_t a = 0; a < axis; a++) s += p[a * inner];
        y[i] = s;
    }
};

// y[o, e, k] = x[o, k].
struct Repeat {
    const float *x;
    float *y;
    int64_t extent, inner;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t o = i / (extent * inner), k = i % inner;
        y[i] = x[o * inner + k];
    }
};

template <class Exec>
void permute(Exec &ex, const OpCall &c, const TensorRef &x, const TensorRef &y) {
    std::vector<std::pair<int64_t, int64_t>> blocks = permute_blocks(x.type.shape, c.attrs.get_ints(c.who(), "perm"));
    const int64_t n = y.type.elements();
    if (blocks.size() <= 1) {  // nothing moves relative to anything else
        ex.copy(y.data, x.data, static_cast<size_t>(n) * sizeof(float));
        return;
    }
    TESSERA_INTERNAL_ASSERT(blocks.size() <= kMaxPermuteDims, c.who(), " moves ", blocks.size(),
                            " blocks of dimensions; infer_types() allows 4");
    PermuteGather g{f32(x), f32_out(y), static_cast<int>(blocks.size()), {}, {}};
    for (size_t k = 0; k < blocks.size(); k++) {
        g.ext[k] = blocks[k].first;
        g.stride[k] = blocks[k].second;
    }
    ex.for_each(n, g);
}

// [outer, axis * inner] of `s`.
inline std::pair<int64_t, int64_t> folded(const Shape &s, int axis) {
    const int rank = static_cast<int>(s.size());
    return {extent_product(s, 0, axis), extent_product(s, axis, rank)};
}

}  // namespace layout_detail

template <class Exec>
void run_layout(Exec &ex, const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    using namespace layout_detail;
    const Shape &xs = in[0].type.shape;
    const int rank = static_cast<int>(xs.size());
    const TensorRef &y = out[0];
    const int64_t n = y.type.elements();
    switch (c.kind) {
    case OpKind::Permute: return permute(ex, c, in[0], y);
    case OpKind::Reshape:
        if (y.data != in[0].data) ex.copy(y.data, in[0].data, static_cast<size_t>(n) * sizeof(float));
        return;
    case OpKind::Concat: {
        const int axis = normalize_axis(c.attrs.get_int(c.who(), "axis"), rank);
        const int64_t y_cols = folded(y.type.shape, axis).second;
        int64_t to = 0;
        for (const TensorRef &t : in) {
            auto [outer, cols] = folded(t.type.shape, axis);
            ex.for_each(outer * cols, CopyColumns{f32(t), f32_out(y), cols, cols, y_cols, 0, to});
            to += cols;
        }
        return;
    }
    case OpKind::Slice: {
        const int axis = normalize_axis(c.attrs.get_int(c.who(), "axis"), rank);
        const int64_t inner = extent_product(xs, axis + 1, rank);
        const int64_t start = c.attrs.get_int(c.who(), "start");
        auto [outer, x_cols] = folded(xs, axis);
        const int64_t cols = folded(y.type.shape, axis).second;
        ex.for_each(outer * cols, CopyColumns{f32(in[0]), f32_out(y), cols, x_cols, cols, start * inner, 0});
        return;
    }
    case OpKind::SliceGrad: {
        const int axis = normalize_axis(c.attrs.get_int(c.who(), "axis"), rank);
        const int64_t inner = extent_product(xs, axis + 1, rank);
        const int64_t start = c.attrs.get_int(c.who(), "start");
        const int64_t dy_cols = folded(xs, axis).second, dx_cols = folded(y.type.shape, axis).second;
        ex.for_each(n, PadColumns{f32(in[0]), f32_out(y), dy_cols, dx_cols, start * inner});
        return;
    }
    case OpKind::ReduceSum: {
        const int axis = normalize_axis(c.attrs.get_int(c.who(), "axis"), rank);
        const int64_t inner = extent_product(xs, axis + 1, rank);
        ex.for_each(n, SumAxis{f32(in[0]), f32_out(y), xs[axis], inner});
        return;
    }
    case OpKind::Broadcast: {
        const int axis = normalize_axis(c.attrs.get_int(c.who(), "axis"), rank + 1);
        const int64_t inner = extent_product(xs, axis, rank);
        ex.for_each(n, Repeat{f32(in[0]), f32_out(y), c.attrs.get_int(c.who(), "extent"), inner});
        return;
    }
    default: TESSERA_INTERNAL_ASSERT(false, "not a layout operator: ", c.who());
    }
}

}  // namespace tessera::gpu
