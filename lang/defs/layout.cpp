// Layout operators: data movement with no arithmetic, plus the sum along an axis
// and its backward, the broadcast.
//   permute(x; perm)                 y.shape[i] = x.shape[perm[i]]
//   reshape(x; shape)                the same elements under another shape
//   concat(x0..x{k-1}; axis)         inputs joined along axis
//   slice(x; axis, start, end)       y = x[start, end) along axis
//   slice_grad(dy; axis, start, extent)   zeros of the full extent, dy placed at start
//   reduce_sum(x; axis, keepdims)    sum along axis
//   broadcast(x; axis, extent)       a new dimension of size extent inserted at axis
//
// Output vars are named "d<k>" after the output dimension k (reduce_sum: after the
// input dimension, so that the summed axis keeps its name as the reduction var).
// slice and slice_grad read at an offset along the axis; the analysis sees the raw
// offset index (slice_grad's kernel reads dy through a zero boundary), so a split
// along the axis comes out as an affine region shifted by 'start'. concat writes
// each input at its offset with an update, so its axis is never split.
#include "defs.h"

namespace tessera::lang::defs {

using namespace Halide;

namespace {

// "d3": names built by appending (GCC 12 warns falsely on "literal" + std::string).
std::string indexed(const char *prefix, int k) { return std::string(prefix).append(std::to_string(k)); }

Var dvar(int k) { return Var(indexed("d", k)); }

// Tessera-order index list -> Halide-order call arguments.
std::vector<Expr> halide_order(std::vector<Expr> tessera) { return {tessera.rbegin(), tessera.rend()}; }

// ---- permute ----------------------------------------------------------------
//
// The structural attributes are the rank and p0..p{r-1}, the permutation itself.
// The analysis runs on every permutation of rank 1 to 4. The kernels cover
// fewer: the runtime first drops extent-1 dimensions and merges runs of input
// dimensions that stay adjacent and in order in the output (they move as one
// block), which leaves a permutation with no i followed by i+1. Of rank <= 4 there
// are 16 such permutations (1 + 1 + 3 + 11); each is compiled as its own small
// kernel, and any rank whose permutation reduces to at most 4 blocks runs.

// Transpose schedule: tile the output over its innermost dimension and the output
// dimension that walks the input's innermost one, and stage each input tile so
// that it is read with contiguous vector loads.
void schedule_permute(Func y, Func x, const std::vector<int> &perm, const Target &t) {
    int rank = static_cast<int>(perm.size());
    const int L = t.natural_vector_size<float>();
    std::vector<Var> v = y.args();  // Halide order: v[0] is output dim rank-1
    int j = 0;                      // output dim reading input dim rank-1
    while (perm[j] != rank - 1) j++;
    if (j == rank - 1) {  // the innermost dimension is contiguous in both
        schedule_elementwise(y, t);
        return;
    }
    Var a = v[0], b = v[rank - 1 - j], ao("ao"), bo("bo"), ai("ai"), bi("bi");
    const int T = 2 * L;
    y.split(a, ao, ai, T, TailStrategy::GuardWithIf).split(b, bo, bi, T, TailStrategy::GuardWithIf);
    std::vector<VarOrRVar> order = {ai, bi, ao, bo};
    for (const Var &o : v)
        if (o.name() != a.name() && o.name() != b.name()) order.push_back(o);
    y.reorder(order).vectorize(ai, L, TailStrategy::GuardWithIf);
    y.parallel(order.back().var);
    x.compute_at(y, ao).vectorize(x.args()[0], L, TailStrategy::GuardWithIf);
}

OpDef permute(Ctx &c) {
    int rank = c.structural("rank");
    std::vector<int> perm;
    for (int i = 0; i < rank; i++) perm.push_back(c.structural(indexed("p", i)));
    Func x = c.input(0, Float(32), rank);
    // Output dim i reads input dim perm[i].
    std::vector<Expr> at(rank);
    for (int i = 0; i < rank; i++) at[perm[i]] = dvar(i);
    Func y("y");
    y(dim_vars(rank)) = x(halide_order(at));
    if (c.scheduling()) schedule_permute(y, x, perm, c.target());
    OpDef d;
    d.outputs = {y};
    std::vector<Expr> ext;
    for (int i = 0; i < rank; i++) ext.push_back(c.extent(0, perm[i]));
    d.output_extents = {ext};
    return d;
}

// Permutations of rank r (all of them, or only those with no i followed by i+1).
void permutations(int r, bool canonical_only, std::vector<std::vector<int>> &out) {
    std::vector<int> p(r);
    for (int i = 0; i < r; i++) p[i] = i;
    do {
        bool has_run = false;
        for (int i = 0; i + 1 < r; i++) has_run = has_run || p[i + 1] == p[i] + 1;
        if (!canonical_only || !has_run) out.push_back(p);
    } while (std::next_permutation(p.begin(), p.end()));
}

StructMap perm_map(const std::vector<int> &p) {
    StructMap m{{"rank", static_cast<int>(p.size())}};
    for (int i = 0; i < static_cast<int>(p.size()); i++) m[indexed("p", i)] = p[i];
    return m;
}

// ---- reshape ----------------------------------------------------------------
//
// Structural: in_rank, out_rank and prefix, the number of leading dimensions whose
// extents are equal in input and output. The prefix dimensions are the same index
// variables on both sides, so the analysis shows them splittable. The rest of the
// output reads a row-major linear index into the input's remaining dimensions,
// x_flat. x_flat is written by a scatter over the input's suffix (an RDom named
// "x<k>" after input dimension k) rather than by div/mod of the linear index:
// Halide cannot bound f % E to [0, E-1] for a symbolic E (E might be negative),
// and the analysis would then need the whole input even for a prefix split. The
// scatter's reads are exactly [0, E-1], and it hides the suffix from the analysis,
// which is the right answer: a split of a reshaped dimension is not a box of the
// input, so it replicates the input. The output's suffix extents are the symbols
// "shape.<k>" (entries of the list attribute "shape"); they only bound x_flat and
// never reach a region of an input.
// The kernel is a 1-D copy (the variant in_rank = out_rank = prefix = 1).

OpDef reshape(Ctx &c) {
    int in_rank = c.structural("in_rank"), out_rank = c.structural("out_rank"), prefix = c.structural("prefix");
    Func x = c.input(0, Float(32), in_rank);
    std::vector<Expr> out_ext;
    for (int k = 0; k < out_rank; k++)
        out_ext.push_back(k < prefix ? c.extent(0, k) : c.param_int(indexed("shape.", k)));
    std::vector<Var> pv;  // prefix vars, Halide order
    for (int k = prefix - 1; k >= 0; k--) pv.push_back(dvar(k));
    auto with_prefix = [&](std::vector<Expr> suffix) {  // suffix in Halide order
        suffix.insert(suffix.end(), pv.begin(), pv.end());
        return suffix;
    };

    Func source = x;  // x read as (suffix index, prefix...)
    if (in_rank > prefix) {
        std::vector<std::pair<std::string, Expr>> dims;
        for (int k = in_rank - 1; k >= prefix; k--) dims.emplace_back(indexed("x", k), c.extent(0, k));
        RDom r = reduction(dims);
        Expr flat = 0;
        std::vector<Expr> at;
        for (int k = prefix, j = in_rank - 1 - prefix; k < in_rank; k++, j--) {
            flat = flat * c.extent(0, k) + r[j];
            at.insert(at.begin(), r[j]);
        }
        Var f("flat");
        Func xf("x_flat");
        std::vector<Var> args = {f};
        args.insert(args.end(), pv.begin(), pv.end());
        xf(args) = undef<float>();
        xf(with_prefix({flat})) = x(with_prefix(at));
        source = xf;
    }
    Expr flat = 0;
    for (int k = prefix; k < out_rank; k++) flat = flat * out_ext[k] + dvar(k);
    Func y("y");
    y(dim_vars(out_rank)) = in_rank > prefix ? source(with_prefix({flat})) : source(with_prefix({}));
    if (c.scheduling()) schedule_elementwise(y, c.target());
    OpDef d;
    d.outputs = {y};
    d.output_extents = {out_ext};
    return d;
}

std::vector<StructMap> reshape_variants() {
    std::vector<StructMap> v;
    for (int i = 1; i <= 4; i++)
        for (int o = 1; o <= 4; o++)
            for (int p = 0; p <= std::min(i, o); p++)
                if (!(i == o && p == i - 1))  // equal counts: the last extents would match too
                    v.push_back({{"in_rank", i}, {"out_rank", o}, {"prefix", p}});
    return v;
}

// ---- concat -----------------------------------------------------------------
//
// Structural: rank, axis and arity. Each input is copied to its offset along the
// axis by an update over its own extent there (an RDom named after the axis), so
// every copy is a plain contiguous loop; a select between the inputs would read
// each of them at every position. The analysis splits every other dimension
// across all inputs; the axis itself is rejected, as its positions are written by
// the updates. The kernels see every tensor as [outer, axis * inner], which keeps
// the copies long whatever the axis.

OpDef concat(Ctx &c) {
    int rank = c.structural("rank"), axis = c.structural("axis"), arity = c.structural("arity");
    std::vector<Var> v = dim_vars(rank);
    int a = rank - 1 - axis;  // the axis, in Halide order
    Func y("y");
    y(v) = undef<float>();
    Expr offset = 0;
    std::vector<RDom> rs;
    for (int i = 0; i < arity; i++) {
        Func x = c.input(i, Float(32), rank);
        RDom r = reduction({{indexed("d", axis), c.extent(i, axis)}});
        std::vector<Expr> to(v.begin(), v.end()), from(v.begin(), v.end());
        to[a] = r.x + offset;
        from[a] = r.x;
        y(to) = x(from);
        offset = offset + c.extent(i, axis);
        rs.push_back(r);
    }
    if (c.scheduling()) {
        const int L = c.target().natural_vector_size<float>();
        for (int i = 0; i < arity; i++) {
            y.update(i).vectorize(rs[i].x, L, TailStrategy::GuardWithIf);
            if (rank > 1) y.update(i).parallel(v.back());
        }
    }
    OpDef d;
    d.outputs = {y};
    std::vector<Expr> ext = extents_of(c, 0, rank);
    ext[axis] = offset;
    d.output_extents = {ext};
    return d;
}

// ---- slice and slice_grad ---------------------------------------------------
//
// Structural: rank and axis. The kernels see [outer, axis * inner] with start and
// the extents scaled by inner (the runtime passes the scaled values).

OpDef slice(Ctx &c) {
    int rank = c.structural("rank"), axis = c.structural("axis");
    Func x = c.input(0, Float(32), rank);
    Expr start = c.param_int("start"), end = c.param_int("end");
    std::vector<Var> v = dim_vars(rank);
    std::vector<Expr> at(v.begin(), v.end());
    at[rank - 1 - axis] = v[rank - 1 - axis] + start;
    Func y("y");
    y(v) = x(at);
    if (c.scheduling()) schedule_elementwise(y, c.target());
    OpDef d;
    d.outputs = {y};
    std::vector<Expr> ext = extents_of(c, 0, rank);
    ext[axis] = end - start;
    d.output_extents = {ext};
    return d;
}

// dx = dy at [start, start + dy's extent) along axis, zero elsewhere: the kernel
// reads dy through a zero boundary.
OpDef slice_grad(Ctx &c) {
    int rank = c.structural("rank"), axis = c.structural("axis");
    Func dy = c.input(0, Float(32), rank, Boundary::Zero);
    Expr start = c.param_int("start"), extent = c.param_int("extent");
    std::vector<Var> v = dim_vars(rank);
    std::vector<Expr> at(v.begin(), v.end());
    at[rank - 1 - axis] = v[rank - 1 - axis] - start;
    Func dx("dx");
    dx(v) = dy(at);
    if (c.scheduling()) schedule_elementwise(dx, c.target());
    OpDef d;
    d.outputs = {dx};
    std::vector<Expr> ext = extents_of(c, 0, rank);
    ext[axis] = extent;
    d.output_extents = {ext};
    return d;
}

// ---- reduce_sum and broadcast -------------------------------------------------
//
// reduce_sum structural: rank, axis, keepdims. The reduction var is named after
// the summed input dimension; with keepdims the kept extent-1 output dimension
// carries the same name, so splitting it is the same partial-sum strategy. The
// kernels see [outer, axis, inner] -> [outer, inner], or [outer, axis] -> [outer]
// when inner is 1.

OpDef reduce_sum(Ctx &c) {
    int rank = c.structural("rank"), axis = c.structural("axis");
    bool keep = c.structural("keepdims");
    Func x = c.input(0, Float(32), rank);
    RDom r = reduction({{indexed("d", axis), c.extent(0, axis)}});
    std::vector<Var> ov;  // Halide order
    std::vector<Expr> at, ext;
    for (int k = rank - 1; k >= 0; k--) {
        if (k == axis) {
            at.push_back(r.x);
            if (keep) ov.push_back(dvar(k));
        } else {
            at.push_back(dvar(k));
            ov.push_back(dvar(k));
        }
    }
    for (int k = 0; k < rank; k++)
        if (k != axis) ext.push_back(c.extent(0, k));
        else if (keep) ext.push_back(1);
    Func y("y");
    y(ov) = 0.0f;
    y(ov) += x(at);
    if (c.scheduling() && !ov.empty()) {
        const int L = c.target().natural_vector_size<float>();
        if (axis == rank - 1 && !keep) {
            // Along the innermost axis: vector partial sums (rfactor) per row.
            RVar ro("ro"), ri("ri");
            Var lane("lane");
            Func partial = y.update().split(r.x, ro, ri, L, TailStrategy::GuardWithIf).rfactor(ri, lane);
            partial.compute_at(y, ov.back()).vectorize(lane);
            partial.update().vectorize(lane);
            y.parallel(ov.back());
            y.update().parallel(ov.back());
        } else {
            y.vectorize(ov[0], L, TailStrategy::GuardWithIf).parallel(ov.back());
            y.update().reorder(ov[0], r.x).vectorize(ov[0], L, TailStrategy::GuardWithIf);
            if (ov.size() > 1) y.update().parallel(ov.back());
        }
    }
    OpDef d;
    d.outputs = {y};
    d.output_extents = {ext};
    return d;
}

// broadcast structural: rank (of x, 0 to 3) and axis (0 to rank). The kernel sees
// x as [outer, inner] and y as [outer, extent, inner].
OpDef broadcast(Ctx &c) {
    int rank = c.structural("rank"), axis = c.structural("axis");
    Func x = c.input(0, Float(32), rank);
    std::vector<Expr> at;
    for (int k = 0; k <= rank; k++)
        if (k != axis) at.push_back(dvar(k));
    Func y("y");
    std::vector<Var> v = dim_vars(rank + 1);
    y(v) = x(halide_order(at));
    if (c.scheduling() && rank > 0) {
        // Along the last axis the inner extent is 1: vectorize the repeats instead.
        const int L = c.target().natural_vector_size<float>();
        Var inner = v[0], rep = v[rank - axis];
        y.specialize(c.extent(0, rank - 1) == 1).vectorize(rep, L, TailStrategy::GuardWithIf).parallel(v.back());
        y.vectorize(inner, L, TailStrategy::GuardWithIf).parallel(v.back());
    }
    OpDef d;
    d.outputs = {y};
    std::vector<Expr> ext;
    for (int k = 0, j = 0; k <= rank; k++) ext.push_back(k == axis ? c.param_int("extent") : c.extent(0, j++));
    d.output_extents = {ext};
    return d;
}

std::vector<StructMap> rank_axis(int lo, int hi, bool axis_past_end) {
    std::vector<StructMap> v;
    for (int r = lo; r <= hi; r++)
        for (int a = 0; a < r + (axis_past_end ? 1 : 0); a++) v.push_back({{"rank", r}, {"axis", a}});
    return v;
}

}  // namespace

void register_layout(std::vector<Description> &out) {
    std::vector<std::vector<int>> all, canonical;
    for (int r = 1; r <= 4; r++) {
        permutations(r, false, all);
        permutations(r, true, canonical);
    }
    std::vector<StructMap> perm_variants;
    for (const auto &p : all) perm_variants.push_back(perm_map(p));
    std::vector<KernelVariant> perm_kernels;
    for (const auto &p : canonical) {
        std::string suffix;
        for (int i : p) suffix += std::to_string(i);
        perm_kernels.push_back({suffix, perm_map(p)});
    }
    out.push_back({OpKind::Permute, permute, perm_variants, perm_kernels});

    out.push_back({OpKind::Reshape, reshape, reshape_variants(),
                   {{"", {{"in_rank", 1}, {"out_rank", 1}, {"prefix", 1}}}}});

    std::vector<StructMap> concat_variants;
    std::vector<KernelVariant> concat_kernels;
    for (int k = 2; k <= 4; k++) {
        for (StructMap m : rank_axis(1, 4, false)) {
            m["arity"] = k;
            concat_variants.push_back(m);
        }
        concat_kernels.push_back({std::to_string(k), {{"rank", 2}, {"axis", 1}, {"arity", k}}});
    }
    out.push_back({OpKind::Concat, concat, concat_variants, concat_kernels});

    KernelVariant folded = {"", {{"rank", 2}, {"axis", 1}}};
    out.push_back({OpKind::Slice, slice, rank_axis(1, 4, false), {folded}});
    out.push_back({OpKind::SliceGrad, slice_grad, rank_axis(1, 4, false), {folded}});

    std::vector<StructMap> reduce_variants;
    for (StructMap m : rank_axis(1, 4, false))
        for (int keep = 0; keep < 2; keep++) {
            m["keepdims"] = keep;
            reduce_variants.push_back(m);
        }
    // [outer, axis, inner], and [outer, axis] for sums along the innermost axis.
    out.push_back({OpKind::ReduceSum, reduce_sum, reduce_variants,
                   {{"", {{"rank", 3}, {"axis", 1}, {"keepdims", 0}}},
                    {"last", {{"rank", 2}, {"axis", 1}, {"keepdims", 0}}}}});
    out.push_back({OpKind::Broadcast, broadcast, rank_axis(0, 3, true), {{"", {{"rank", 2}, {"axis", 1}}}}});
}

}  // namespace tessera::lang::defs
