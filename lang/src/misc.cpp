// embedding, embedding_grad, dropout and cast: shapes, variants and dispatch.
// Kernels see the ids (and dropout's and cast's x) flattened to one dimension.
//
// cast(x; to) converts floats between storage types: f32 to bf16 or f16 rounds
// to nearest even, the reverse is exact (base/half.h gives the same
// conversions in software). A cast to the type x already has is an error: the
// precision policy never makes one.
#include <algorithm>
#include <cstdint>

#include "family.h"

namespace tessera::lang {

namespace {

double dropout_rate(const OpCall &c) {
    double rate = c.attrs.get_float(c.who(), "rate");
    TESSERA_CHECK(rate >= 0.0 && rate < 1.0, c.who(), ": attribute 'rate' = ", rate,
                  " must be in [0, 1) (the probability of dropping an element)");
    return rate;
}

int64_t dropout_seed(const OpCall &c) {
    int64_t seed = c.attrs.get_int(c.who(), "seed");
    TESSERA_CHECK(seed >= 0 && seed <= INT32_MAX, c.who(), ": attribute 'seed' = ", seed, " must be in [0, ",
                  INT32_MAX, "]");
    return seed;
}

// The storage type a cast writes, checked against what it reads.
DType cast_target(const OpCall &c, const TensorType &x) {
    const DType to = dtype_from_name(c.attrs.get_string(c.who(), "to"), c.who() + ": attribute 'to'");
    const bool pair = (x.dtype == DType::F32 && is_half(to)) || (is_half(x.dtype) && to == DType::F32);
    TESSERA_CHECK(pair, c.who(), ": casts convert f32 to bf16 or f16 and back; cannot cast ", type_str(x), " to ",
                  dtype_name(to));
    return to;
}

}  // namespace

std::vector<TensorType> infer_misc(const OpCall &c, const std::vector<TensorType> &in) {
    switch (c.kind) {
    case OpKind::Embedding: {
        expect_dtype(c, in, 0, "table", DType::F32);
        expect_dtype(c, in, 1, "ids", DType::I32);
        expect_rank(c, in, 0, "table", 2);
        TESSERA_CHECK(in[1].rank() >= 1, c.who(), ": ", input_label(1, "ids"),
                      " must have rank at least 1, got shape ", shape_str(in[1].shape));
        Shape out = in[1].shape;
        out.push_back(in[0].shape[1]);
        return {{DType::F32, out}};
    }
    case OpKind::EmbeddingGrad: {
        expect_dtype(c, in, 0, "dy", DType::F32);
        expect_dtype(c, in, 1, "ids", DType::I32);
        TESSERA_CHECK(in[1].rank() >= 1, c.who(), ": ", input_label(1, "ids"),
                      " must have rank at least 1, got shape ", shape_str(in[1].shape));
        const Shape &dy = in[0].shape, &ids = in[1].shape;
        bool ok = dy.size() == ids.size() + 1 && std::equal(ids.begin(), ids.end(), dy.begin());
        TESSERA_CHECK(ok, c.who(), ": dy ", shape_str(dy), " must be the ids' shape ", shape_str(ids),
                      " followed by the embedding width");
        int64_t vocab = int_at_least(c, "vocab", 1);
        return {{DType::F32, {vocab, dy.back()}}};
    }
    case OpKind::Dropout: {
        expect_dtype(c, in, 0, "x", DType::F32);
        dropout_rate(c);
        dropout_seed(c);
        return {in[0]};
    }
    case OpKind::Cast: return {{cast_target(c, in[0]), in[0].shape}};
    default: TESSERA_INTERNAL_ASSERT(false, "not a misc operator: ", op_name(c.kind));
    }
}

StructMap structural_misc(const OpCall &c, const std::vector<TensorType> &in) {
    const bool own_rank = c.kind == OpKind::Dropout || c.kind == OpKind::Cast;
    return {{"rank", own_rank ? in[0].rank() : in[1].rank()}};
}

void fill_defaults_misc(OpCall &) {}  // every attribute is required

void run_misc(const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    std::string name = std::string("tk_") + op_name(c.kind);
    switch (c.kind) {
    case OpKind::Embedding: {
        int64_t n = in[1].type.elements(), width = in[0].type.shape[1];
        call_kernel(name, {{in[0], {}}, {in[1], {n}}}, {}, {{out[0], {n, width}}});
        return;
    }
    case OpKind::EmbeddingGrad: {
        int64_t n = in[1].type.elements(), width = in[0].type.shape.back();
        Scalars s;
        s.set("vocab", double(c.attrs.get_int(c.who(), "vocab")));
        call_kernel(name, {{in[0], {n, width}}, {in[1], {n}}}, s, {{out[0], {}}});
        return;
    }
    case OpKind::Dropout: {
        Shape flat = {in[0].type.elements()};
        Scalars s;
        s.set("rate", dropout_rate(c)).set("seed", double(dropout_seed(c)));
        call_kernel(name, {{in[0], flat}}, s, {{out[0], flat}});
        return;
    }
    case OpKind::Cast: {
        // One kernel per conversion: tk_cast_f32_bf16 and so on.
        Shape flat = {in[0].type.elements()};
        name += std::string("_") + dtype_name(in[0].type.dtype) + "_" + dtype_name(out[0].type.dtype);
        call_kernel(name, {{in[0], flat}}, {}, {{out[0], flat}}, false);
        return;
    }
    default: TESSERA_INTERNAL_ASSERT(false, "not a misc operator: ", op_name(c.kind));
    }
}

}  // namespace tessera::lang
