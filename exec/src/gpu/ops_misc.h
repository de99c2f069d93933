// GPU kernels of the misc family (see exec.h for the context they run on):
// embedding, embedding_grad and dropout. As for the CPU kernels, the ids (and
// dropout's x) are seen flattened to one dimension.
//
// embedding_grad is slow by design: ids may repeat, and without atomics the
// only race-free split is along the embedding column, so one thread per column
// walks every id in order (which also keeps the sums in the CPU kernel's order,
// and deterministic). With a narrow embedding most of the device is idle.
#pragma once

#include <cstdint>
#include <vector>

#include "exec.h"

namespace tessera::gpu {

namespace misc_detail {

// Out-of-range ids are data: they read (and write) the nearest row.
TESSERA_HD inline int64_t clamp_row(int32_t id, int64_t rows) {
    return id < 0 ? 0 : (id >= rows ? rows - 1 : static_cast<int64_t>(id));
}

// y[n, e] = table[clamp(ids[n]), e]; i = n * D + e.
struct Lookup {
    const float *table;
    const int32_t *ids;
    float *y;
    int64_t V, D;
    TESSERA_HD void operator()(int64_t i) const {
        const int64_t n = i / D, e = i % D;
        y[i] = table[clamp_row(ids[n], V) * D + e];
    }
};

// dtable[v, e] += dy[n, e] for every n with clamp(ids[n]) == v, one thread per
// column e, ids in order; dtable must start at zero.
struct ScatterAddColumn {
    const float *dy;
    const int32_t *ids;
    float *dtable;
    int64_t count, vocab, D;
    TESSERA_HD void operator()(int64_t e) const {
        for (int64_t n = 0; n < count; n++) dtable[clamp_row(ids[n], vocab) * D + e] += dy[n * D + e];
    }
};

// The mask hash of lang/defs/misc.cpp (lowbias32), in the same uint32
// arithmetic, so that the GPU drops exactly the elements the CPU drops.
TESSERA_HD inline uint32_t mix32(uint32_t u) {
    u ^= u >> 16;
    u *= 0x7feb352du;
    u ^= u >> 15;
    u *= 0x846ca68bu;
    u ^= u >> 16;
    return u;
}

struct Dropout {
    const float *x;
    float *y;
    uint32_t mixed_seed;  // mix32(seed), the same for every element
    float rate, scale;    // scale = 1 / (1 - rate), in float as the CPU kernel computes it
    TESSERA_HD void operator()(int64_t i) const {
        // The CPU kernel's flat index is an int32 reinterpreted as uint32.
        const uint32_t h = mix32(mixed_seed ^ static_cast<uint32_t>(i));
        const float uniform = static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
        y[i] = uniform >= rate ? x[i] * scale : 0.0f;
    }
};

}  // namespace misc_detail

template <class Exec>
void run_misc(Exec &ex, const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    using namespace misc_detail;
    switch (c.kind) {
    case OpKind::Embedding: {
        const int64_t V = in[0].type.shape[0], D = in[0].type.shape[1];
        ex.for_each(out[0].type.elements(), Lookup{f32(in[0]), i32(in[1]), f32_out(out[0]), V, D});
        return;
    }
    case OpKind::EmbeddingGrad: {
        const int64_t vocab = c.attrs.get_int(c.who(), "vocab"), D = in[0].type.shape.back();
        ex.fill_zero(out[0].data, static_cast<size_t>(out[0].type.bytes()));
        ex.for_each(D, ScatterAddColumn{f32(in[0]), i32(in[1]), f32_out(out[0]), in[1].type.elements(), vocab, D});
        return;
    }
    case OpKind::Dropout: {
        // The CPU kernel takes rate as a float and seed as an int32 parameter.
        const float rate = static_cast<float>(c.attrs.get_float(c.who(), "rate"));
        const auto seed = static_cast<int32_t>(c.attrs.get_int(c.who(), "seed"));
        const float scale = 1.0f / (1.0f - rate);
        ex.for_each(in[0].type.elements(),
                    Dropout{f32(in[0]), f32_out(out[0]), mix32(static_cast<uint32_t>(seed)), rate, scale});
        return;
    }
    default: TESSERA_INTERNAL_ASSERT(false, "not a misc operator: ", c.who());
    }
}

}  // namespace tessera::gpu
