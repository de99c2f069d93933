// Operators whose indexing or values come from data: the embedding lookup, its
// scatter-add backward, and dropout.
//   embedding(table [V, D], ids [b0, .., b{r-1}])      y[b.., e] = table[clamp(ids[b..], 0, V-1), e]
//   embedding_grad(dy [b.., D], ids [b..]; vocab)      dtable[v, e] = sum of dy[b.., e] over ids[b..] == v
//   dropout(x; rate, seed)                             y = x * keep / (1 - rate)
//   cast(x; to)                                        y = x converted to `to` (f32 <-> bf16, f16)
//
// Out-of-range ids are data, not errors: both the lookup and the scatter clamp
// them into [0, V-1] (an id below 0 reads row 0, one past the end reads row V-1),
// which keeps every access in bounds whatever the ids hold.
//
// The id dimensions are the vars "b0".."b{r-1}" and the embedding column is "e".
// Because the row read from the table is an id, the analysis marks embedding as
// opaque: it can split the ids' dimensions (the batch) with the table replicated,
// or the column e, but never the table's vocabulary.
#include "defs.h"

namespace tessera::lang::defs {

using namespace Halide;

namespace {

// Id vars in Halide order: {b{r-1}, .., b0}.
std::vector<Var> id_vars(int rank) { return dim_vars(rank, "b"); }

OpDef embedding(Ctx &c) {
    int rank = c.structural("rank");
    Func table = c.input(0, Float(32), 2), ids = c.input(1, Int(32), rank);
    Expr V = c.extent(0, 0), D = c.extent(0, 1);
    Var e("e");
    std::vector<Var> b = id_vars(rank);
    std::vector<Var> args = {e};
    args.insert(args.end(), b.begin(), b.end());
    Func y("y");
    y(args) = table(e, clamp(ids(as_exprs(b)), 0, V - 1));
    if (c.scheduling()) {
        const int L = c.target().natural_vector_size<float>();
        y.vectorize(e, L, TailStrategy::GuardWithIf).parallel(b.back());
    }
    OpDef d;
    d.outputs = {y};
    std::vector<Expr> ext;
    for (int k = 0; k < rank; k++) ext.push_back(c.extent(1, k));
    ext.push_back(D);
    d.output_extents = {ext};
    return d;
}

// The scatter-add: an update over every id position whose written row is the id.
// Splitting an id dimension gives partial tables to be summed; the row index v
// cannot be split (it is written at positions read from data).
OpDef embedding_grad(Ctx &c) {
    int rank = c.structural("rank");
    Func dy = c.input(0, Float(32), rank + 1), ids = c.input(1, Int(32), rank);
    Expr vocab = c.param_int("vocab"), D = c.extent(0, rank);
    std::vector<std::pair<std::string, Expr>> dims;
    for (int k = rank - 1; k >= 0; k--) dims.emplace_back(std::string("b").append(std::to_string(k)), c.extent(1, k));
    RDom r = reduction(dims);
    std::vector<Expr> at;  // id position, Halide order
    for (int j = 0; j < rank; j++) at.push_back(r[j]);
    std::vector<Expr> dy_at = {Var("e")};
    dy_at.insert(dy_at.end(), at.begin(), at.end());
    Var e("e"), v("v");
    Func dt("dtable");
    dt(e, v) = 0.0f;
    dt(e, clamp(ids(at), 0, vocab - 1)) += dy(dy_at);
    if (c.scheduling()) {
        // Rows may repeat, so the scatter runs in id order; it is vectorised and
        // split in parallel along the embedding column, which never collides.
        const int L = c.target().natural_vector_size<float>();
        Var eo("eo"), ei("ei");
        dt.vectorize(e, L, TailStrategy::GuardWithIf).parallel(v);
        dt.update().split(e, eo, ei, 8 * L, TailStrategy::GuardWithIf).vectorize(ei, L, TailStrategy::GuardWithIf);
        dt.update().reorder(ei, r.x, eo).parallel(eo);
    }
    OpDef d;
    d.outputs = {dt};
    d.output_extents = {{vocab, D}};
    return d;
}

// The mask of dropout: a counter-based hash of (seed, flat element index), so that
// the same seed gives the same mask on any device and in any order of evaluation,
// and dropout's backward is dropout of dy with the same seed.
//   mix(u)  = u ^= u >> 16; u *= 0x7feb352d; u ^= u >> 15; u *= 0x846ca68b; u ^= u >> 16
//   h       = mix(mix(seed) ^ index)                   (uint32 arithmetic)
//   uniform = (h >> 8) * 2^-24, in [0, 1)
//   keep    = uniform >= rate
// (mix is an invertible integer hash with good avalanche: the xor-shift-multiply
// finaliser known as lowbias32.) The index is the row-major position in x.
Expr mix32(Expr u) {
    u = u ^ (u >> 16);
    u = u * Expr(uint32_t(0x7feb352du));
    u = u ^ (u >> 15);
    u = u * Expr(uint32_t(0x846ca68bu));
    return u ^ (u >> 16);
}

OpDef dropout(Ctx &c) {
    int rank = c.structural("rank");
    Func x = c.input(0, Float(32), rank);
    Expr rate = c.param_float("rate"), seed = c.param_int("seed");
    std::vector<Var> v = dim_vars(rank);
    Expr index = 0;
    for (int k = 0; k < rank; k++) index = index * c.extent(0, k) + v[rank - 1 - k];
    Expr h = mix32(mix32(cast<uint32_t>(seed)) ^ cast<uint32_t>(index));
    Expr uniform = cast<float>(h >> 8) * (1.0f / 16777216.0f);
    Func y("y");
    y(v) = select(uniform >= rate, x(as_exprs(v)) * (1.0f / (1.0f - rate)), 0.0f);
    if (c.scheduling()) schedule_elementwise(y, c.target());
    return shaped_like_input(c, y, rank);
}

// A storage type's Halide type, by its DType code (the structural attributes
// "from" and "to" of a cast's kernel variants).
Type storage_type(int dtype) {
    switch (static_cast<DType>(dtype)) {
    case DType::F32: return Float(32);
    case DType::BF16: return BFloat(16);
    case DType::F16: return Float(16);
    default: throw std::runtime_error("cast: no storage type for dtype code " + std::to_string(dtype));
    }
}

// The analysis sees one conversion (f32 to bf16): which types are converted
// does not change what a block of y reads.
OpDef cast_op(Ctx &c) {
    const int rank = c.structural("rank");
    const bool typed = c.structurals().count("from") != 0;
    Type from = typed ? storage_type(c.structural("from")) : Float(32);
    Type to = typed ? storage_type(c.structural("to")) : BFloat(16);
    Func x = c.input(0, from, rank);
    std::vector<Var> v = dim_vars(rank);
    Func y("y");
    Expr value = x(as_exprs(v));
    // Halide 14 narrows an f32 NaN to an f16 infinity, and to a bf16 one where
    // the payload rounds away (0x7f800001) on CPUs without AVX-512 BF16, whose
    // conversion it does in software; keep every NaN a (quiet) NaN.
    const bool narrowing = to.bits() == 16;
    if (narrowing) {
        const int quiet_nan = to == Float(16) ? 0x7e00 : 0x7fc0;
        value = select(is_nan(value), reinterpret(to, cast(UInt(16), quiet_nan)), cast(to, value));
    }
    y(v) = narrowing ? value : cast(to, value);
    if (c.scheduling()) schedule_elementwise(y, c.target());
    return shaped_like_input(c, y, rank);
}

// The kernels: one per conversion, on the flattened tensor.
std::vector<KernelVariant> cast_kernels() {
    std::vector<KernelVariant> v;
    for (DType half : {DType::BF16, DType::F16}) {
        const int f = static_cast<int>(DType::F32), h = static_cast<int>(half);
        v.push_back({std::string("f32_") + dtype_name(half), {{"rank", 1}, {"from", f}, {"to", h}}});
        v.push_back({std::string(dtype_name(half)) + "_f32", {{"rank", 1}, {"from", h}, {"to", f}}});
    }
    return v;
}

std::vector<StructMap> ranks(int lo, int hi) {
    std::vector<StructMap> v;
    for (int r = lo; r <= hi; r++) v.push_back({{"rank", r}});
    return v;
}

}  // namespace

void register_misc(std::vector<Description> &out) {
    // Kernels see the ids flattened to one dimension.
    std::vector<KernelVariant> flat = {{"", {{"rank", 1}}}};
    out.push_back({OpKind::Embedding, embedding, ranks(1, 3), flat});
    out.push_back({OpKind::EmbeddingGrad, embedding_grad, ranks(1, 3), flat});
    out.push_back({OpKind::Dropout, dropout, ranks(1, 4), flat});
    out.push_back({OpKind::Cast, cast_op, ranks(1, 4), cast_kernels()});
}

}  // namespace tessera::lang::defs
