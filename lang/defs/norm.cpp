// Normalisation layers, training mode (statistics from the data, biased variance).
//   layer_norm(x [..., D], gamma [D], beta [D]; eps): normalise each row over its last axis.
//   batch_norm(x [N, C] or [N, C, H, W], gamma [C], beta [C]; eps): normalise each
//     channel over the batch (and the spatial positions).
//   *_grad(dy, x, gamma; eps) -> (dx, dgamma, dbeta), recomputing the statistics from x.
//   batch_norm_stats(x, running_mean [C], running_var [C]; momentum) -> the two
//     running statistics updated with x's batch statistics (PyTorch's buffers).
//
// Means and variances are written as sums (the mean first, then the sum of squared
// deviations from it), so that splitting an index variable they reduce over shows
// each of them as a cross-device sum. Layer norm names its axes like the
// element-wise ops ("d0".."d{rank-1}"); batch norm uses "n", "c", "h", "w".
#include <optional>

#include "defs.h"

namespace tessera::lang::defs {

using namespace Halide;

namespace {

std::string dim_name(int d) {
    std::string s = "d";
    s += std::to_string(d);
    return s;
}

std::vector<Expr> at(Expr first, const std::vector<Var> &rest) {
    std::vector<Expr> a = {std::move(first)};
    a.insert(a.end(), rest.begin(), rest.end());
    return a;
}

// (x - mean)^2 as a Func of its own: an update that mentioned x - mean twice
// would have it factored into a Let by Halide, which hides the update's sum from
// the analysis. `stat` is indexed by the rows (layer norm) or by `by` (batch norm).
Func squared_deviation(Func x, Func stat, const std::vector<Var> &v, std::optional<Var> by = std::nullopt) {
    std::vector<Expr> sv;
    if (by) sv.push_back(*by);
    else sv.assign(v.begin() + 1, v.end());
    Func f("sq_dev");
    Expr dev = x(as_exprs(v)) - stat(sv);
    f(v) = dev * dev;
    return f;
}

// A sum over the rows of a [rows, K] stage, one result per column: columns are
// independent, so blocks of them run in parallel, each walking the rows with a
// few vectors of contiguous columns. `f` must not be an output (see dgamma_sum).
void schedule_column_sum(Func f, RVar rows, const Target &t) {
    const int L = t.natural_vector_size<float>();
    Var k = f.args()[0], ko("ko"), ki("ki");
    f.compute_root().vectorize(k, L, TailStrategy::GuardWithIf);
    f.update()
        .split(k, ko, ki, 4 * L, TailStrategy::GuardWithIf)
        .reorder(ki, rows, ko)
        .vectorize(ki, L, TailStrategy::GuardWithIf)
        .parallel(ko);
}

// Rows of a [rows, K] output in parallel blocks, vectorised along K, with the
// per-row stages computed just before each row.

// ---- Layer norm ----------------------------------------------------------------

struct RowNorm {
    std::vector<Var> v, rows;  // v[0] is the normalised axis; rows the others
    Expr D;
    RDom rd;                   // over the normalised axis, named like v[0]
    Func sum_x, mean, sq_dev, rstd;
};

RowNorm row_statistics(Ctx &c, Func x, int rank, Expr eps) {
    RowNorm s;
    s.v = dim_vars(rank);
    s.rows.assign(s.v.begin() + 1, s.v.end());
    s.D = c.extent(0, rank - 1);
    s.rd = reduction({{dim_name(rank - 1), s.D}});
    const auto &rows = s.rows;
    Expr Df = cast<float>(c.whole_extent(0, rank - 1));
    Func sum_x("sum_x");
    sum_x(rows) = 0.0f;
    sum_x(rows) += x(at(s.rd.x, rows));
    s.sum_x = c.stage(sum_x);
    s.mean = Func("mean");
    s.mean(rows) = s.sum_x(rows) / Df;
    Func sq_dev("sum_sq_dev");
    sq_dev(rows) = 0.0f;
    sq_dev(rows) += squared_deviation(x, s.mean, s.v)(at(s.rd.x, rows));
    s.sq_dev = c.stage(sq_dev);
    s.rstd = Func("rstd");
    s.rstd(rows) = 1.0f / sqrt(s.sq_dev(rows) / Df + eps);
    return s;
}

OpDef layer_norm(Ctx &c) {
    int rank = c.structural("rank");
    Func x = c.input(0, Float(32), rank), gamma = c.input(1, Float(32), 1), beta = c.input(2, Float(32), 1);
    RowNorm s = row_statistics(c, x, rank, c.param_float("eps"));
    const auto &v = s.v;
    Func y("y");
    y(v) = (x(as_exprs(v)) - s.mean(s.rows)) * s.rstd(s.rows) * gamma(v[0]) + beta(v[0]);
    if (c.scheduling()) schedule_rows(y, {s.sum_x, s.mean, s.sq_dev, s.rstd}, {}, c.target());
    return shaped_like_input(c, y, rank);
}

// With xhat = (x - mean) * rstd and g = dy * gamma:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  means over the row;
//   dgamma = sum over rows of dy * xhat;  dbeta = sum over rows of dy.
OpDef layer_norm_grad(Ctx &c) {
    int rank = c.structural("rank");
    Func dy = c.input(0, Float(32), rank), x = c.input(1, Float(32), rank), gamma = c.input(2, Float(32), 1);
    RowNorm s = row_statistics(c, x, rank, c.param_float("eps"));
    const auto &v = s.v;
    const auto &rows = s.rows;
    Expr Df = cast<float>(c.whole_extent(1, rank - 1));
    Func xhat("xhat"), g("g");
    xhat(v) = (x(as_exprs(v)) - s.mean(rows)) * s.rstd(rows);
    g(v) = dy(as_exprs(v)) * gamma(v[0]);
    Func sum_g("sum_g"), sum_gx("sum_g_xhat");
    sum_g(rows) = 0.0f;
    sum_g(rows) += g(at(s.rd.x, rows));
    sum_g = c.stage(sum_g);
    sum_gx(rows) = 0.0f;
    sum_gx(rows) += g(at(s.rd.x, rows)) * xhat(at(s.rd.x, rows));
    sum_gx = c.stage(sum_gx);
    Func dx("dx");
    dx(v) = s.rstd(rows) * (g(v) - (sum_g(rows) + xhat(v) * sum_gx(rows)) / Df);

    // dgamma and dbeta reduce over every row dimension, innermost first.
    std::vector<std::pair<std::string, Expr>> row_dims;
    for (int t = rank - 2; t >= 0; t--) row_dims.emplace_back(dim_name(t), c.extent(0, t));
    RDom rr = reduction(row_dims);
    std::vector<Expr> pos = {v[0]};
    for (int j = 0; j < rr.dimensions(); j++) pos.push_back(rr[j]);
    // Accumulated in stages of their own and then copied out: a vectorised update
    // of an output Func reads the output back with masked loads that Halide 14
    // emits as aligned, which faults on caller memory that is not 64-byte aligned.
    Func gamma_sum("dgamma_sum"), beta_sum("dbeta_sum");
    gamma_sum(v[0]) = 0.0f;
    gamma_sum(v[0]) += dy(pos) * xhat(pos);
    beta_sum(v[0]) = 0.0f;
    beta_sum(v[0]) += dy(pos);
    Func dgamma("dgamma"), dbeta("dbeta");
    dgamma(v[0]) = gamma_sum(v[0]);
    dbeta(v[0]) = beta_sum(v[0]);

    if (c.scheduling()) {
        // The row statistics are read by dx and by dgamma: compute them once.
        Var row = rows[0], ro("ro"), ri("ri");
        s.mean.compute_root().split(row, ro, ri, 16, TailStrategy::GuardWithIf).parallel(ro);
        s.sum_x.compute_at(s.mean, ri);
        s.rstd.compute_root().split(row, ro, ri, 16, TailStrategy::GuardWithIf).parallel(ro);
        s.sq_dev.compute_at(s.rstd, ri);
        schedule_rows(dx, {sum_g, sum_gx}, {}, c.target());
        schedule_column_sum(gamma_sum, rr.x, c.target());
        schedule_column_sum(beta_sum, rr.x, c.target());
        schedule_elementwise(dgamma, c.target());
        schedule_elementwise(dbeta, c.target());
    }
    OpDef d;
    d.outputs = {dx, dgamma, dbeta};
    std::vector<Expr> ext;
    for (int k = 0; k < rank; k++) ext.push_back(c.extent(0, k));
    d.output_extents = {ext, {s.D}, {s.D}};
    return d;
}

// ---- Batch norm ----------------------------------------------------------------

// Indexing of [N, C] or [N, C, H, W] tensors by (n, c, h, w); h and w are ignored at rank 2.
struct NCHW {
    bool spatial;
    std::vector<Expr> operator()(Expr n, Expr c, Expr h, Expr w) const {
        if (spatial) return {w, h, c, n};
        return {c, n};
    }
};

// Batch norm's four statistics (sum_x, sum_sq_dev; the gradient's sum_dy,
// sum_dy_dev) are accumulated in double and rounded once to float before
// anything reads them. Across devices each is a partial sum all-reduced in
// double (a staged kernel's f64 stage), so the float every device reads equals
// the one process's unless two double sums of the same numbers straddle a
// float rounding boundary: batch norm's output feeds ReLUs and max pools,
// where a statistic rounded differently on N devices would flip activations
// (docs/lowering.md, "Staged reductions").
struct ChannelNorm {
    NCHW idx;
    Var n{"n"}, c{"c"}, h{"h"}, w{"w"};
    std::vector<Var> v;       // the pure vars of an [N, C(, H, W)] stage, Halide order
    Expr N, C, H, W, M;       // M = N * H * W, the count each channel's statistics average over
    RDom r;                   // over (w, h, n), innermost first
    Expr rn, rh, rw;          // r's coordinates (0 for the missing spatial ones)
    Func sum_x, mean, sq_dev, rstd;
};

// `xi` is x's input index; the count M is over the whole tensor even when the
// kernel runs on one block of it (a staged kernel after a batch split).
ChannelNorm channel_statistics(Ctx &c, Func x, int xi, Expr eps) {
    ChannelNorm s;
    int rank = c.structural("rank");
    s.idx = NCHW{rank == 4};
    s.N = c.extent(xi, 0);
    s.C = c.extent(xi, 1);
    if (s.idx.spatial) {
        s.H = c.extent(xi, 2);
        s.W = c.extent(xi, 3);
        s.r = reduction({{"w", s.W}, {"h", s.H}, {"n", s.N}});
        s.rw = s.r.x;
        s.rh = s.r.y;
        s.rn = s.r.z;
        s.v = {s.w, s.h, s.c, s.n};
        s.M = cast<float>(c.whole_extent(xi, 0)) * cast<float>(c.whole_extent(xi, 2)) *
              cast<float>(c.whole_extent(xi, 3));
    } else {
        s.H = s.W = 1;
        s.r = reduction({{"n", s.N}});
        s.rw = s.rh = 0;
        s.rn = s.r.x;
        s.v = {s.c, s.n};
        s.M = cast<float>(c.whole_extent(xi, 0));
    }
    Var ch = s.c;
    Func sum_x("sum_x");
    sum_x(ch) = cast<double>(0);
    sum_x(ch) += cast<double>(x(s.idx(s.rn, ch, s.rh, s.rw)));
    s.sum_x = c.stage(sum_x);
    s.mean = Func("mean");
    s.mean(ch) = strict_float(cast<float>(s.sum_x(ch)) / s.M);
    Func sq_dev("sum_sq_dev");
    sq_dev(ch) = cast<double>(0);
    sq_dev(ch) += cast<double>(squared_deviation(x, s.mean, s.v, ch)(s.idx(s.rn, ch, s.rh, s.rw)));
    s.sq_dev = c.stage(sq_dev);
    s.rstd = Func("rstd");
    s.rstd(ch) = strict_float(1.0f / sqrt(cast<float>(s.sq_dev(ch)) / s.M + eps));
    return s;
}

// Vector widths for rows of W floats, widest first: the natural width, then
// halves of it for short rows (the 14- and 7-wide planes of small images). Each is
// a specialisation that splits a row with ShiftInwards: the last vector of a row
// overlaps the one before it, so that no load leaves the row and no lane is
// masked (a masked accumulator would live in memory, not in a register). Rows
// narrower than every width run one lane at a time.
std::vector<int> row_widths(const Target &t) {
    const int L = t.natural_vector_size<float>();
    return {L, L / 2, L / 4};
}

// f(c) = sum over (w, h, n) as one vector of partial sums per row position:
// lanes(u, c) sums position u of every row of channel c; a whole vector of
// positions at a time (`pos`, a fixed width per specialisation, so that the
// partial sums stay in a register for the whole channel), then f sums the W
// positions. Everything runs inside `out`'s loop over the channels.
void schedule_channel_sum_at(Func f, Func out, const ChannelNorm &s, const Target &t) {
    Var u("u"), uo("uo"), ui("ui");
    Func lanes = f.update().rfactor(RVar(s.r.x), u);
    Func pos = lanes.in(f);
    f.compute_at(out, s.c);
    pos.compute_at(out, s.c);
    for (int width : row_widths(t)) {
        pos.specialize(s.W >= width).split(u, uo, ui, width, TailStrategy::ShiftInwards).vectorize(ui);
        lanes.specialize(s.W >= width).vectorize(u, width);
        lanes.update().specialize(s.W >= width).vectorize(u, width);
    }
    pos.split(u, uo, ui, 1);
    lanes.compute_at(pos, uo);
}

// Rows of `out` in vectors along w, as the sums walk them.
void vectorize_rows(Func out, const ChannelNorm &s, const Target &t) {
    Var wo("wo"), wi("wi");
    for (int width : row_widths(t))
        out.specialize(s.W >= width).split(s.w, wo, wi, width, TailStrategy::ShiftInwards).vectorize(wi);
}

// At rank 4, a channel's values are N planes of contiguous rows, a few hundred KB
// for the usual sizes: `out` walks the channels in parallel, and every per-channel
// statistic is computed just before its channel, so that the passes over that
// channel's x (and dy) after the first one read from cache.
void schedule_by_channel(Func out, const ChannelNorm &s, const std::vector<Func> &sums,
                         const std::vector<Func> &per_channel, const Target &t) {
    out.reorder(s.w, s.h, s.n, s.c).parallel(s.c);
    for (Func f : sums) schedule_channel_sum_at(f, out, s, t);
    for (Func f : per_channel) f.compute_at(out, s.c);
}

std::vector<Expr> nchw_extents(const ChannelNorm &s) {
    if (s.idx.spatial) return {s.N, s.C, s.H, s.W};
    return {s.N, s.C};
}

OpDef batch_norm(Ctx &c) {
    int rank = c.structural("rank");
    Func x = c.input(0, Float(32), rank), gamma = c.input(1, Float(32), 1), beta = c.input(2, Float(32), 1);
    ChannelNorm s = channel_statistics(c, x, 0, c.param_float("eps"));
    Var ch = s.c;
    Func y("y");
    y(s.v) = strict_float((x(as_exprs(s.v)) - s.mean(ch)) * s.rstd(ch) * gamma(ch) + beta(ch));
    if (c.scheduling()) {
        if (s.idx.spatial) {
            schedule_by_channel(y, s, {s.sum_x, s.sq_dev}, {s.mean, s.rstd}, c.target());
            vectorize_rows(y, s, c.target());
        } else {
            // [N, C]: the channels are contiguous; whole vectors of channels are
            // summed down the batch.
            schedule_column_sum(s.sum_x, RVar(s.r.x), c.target());
            schedule_column_sum(s.sq_dev, RVar(s.r.x), c.target());
            s.mean.compute_root();
            s.rstd.compute_root();
            schedule_rows(y, {}, {}, c.target());
        }
    }
    OpDef d;
    d.outputs = {y};
    d.output_extents = {nchw_extents(s)};
    return d;
}

// With xhat = (x - mean) * rstd, per channel:
//   dbeta = sum dy,  dgamma = sum dy * xhat,
//   dx = gamma * rstd * (dy - (dbeta + xhat * dgamma) / M).
OpDef batch_norm_grad(Ctx &c) {
    int rank = c.structural("rank");
    Func dy = c.input(0, Float(32), rank), x = c.input(1, Float(32), rank), gamma = c.input(2, Float(32), 1);
    ChannelNorm s = channel_statistics(c, x, 1, c.param_float("eps"));
    Var ch = s.c;
    std::vector<Expr> rpos = s.idx(s.rn, ch, s.rh, s.rw);
    Func sum_dy("sum_dy"), sum_dy_dev("sum_dy_dev");
    sum_dy(ch) = cast<double>(0);
    sum_dy(ch) += cast<double>(dy(rpos));
    sum_dy = c.stage(sum_dy);
    sum_dy_dev(ch) = cast<double>(0);
    sum_dy_dev(ch) += cast<double>(dy(rpos)) * cast<double>(x(rpos) - s.mean(ch));
    sum_dy_dev = c.stage(sum_dy_dev);
    Expr sum_dy_f = cast<float>(sum_dy(ch)), sum_dy_dev_f = cast<float>(sum_dy_dev(ch));
    Func dgamma("dgamma"), dbeta("dbeta");
    dgamma(ch) = strict_float(sum_dy_dev_f * s.rstd(ch));
    // Not a plain copy of sum_dy on purpose (the cast alone makes it none): the
    // analysis reports an output that only copies a reduction stage as a partial
    // output, and would then drop sum_dy from the cross-device reductions that
    // dx needs before it runs.
    dbeta(ch) = sum_dy_f + 0.0f;
    Func dx("dx");
    Expr xhat = (x(as_exprs(s.v)) - s.mean(ch)) * s.rstd(ch);
    Expr dgamma_c = sum_dy_dev_f * s.rstd(ch);
    dx(s.v) = strict_float(gamma(ch) * s.rstd(ch) * (dy(as_exprs(s.v)) - (sum_dy_f + xhat * dgamma_c) / s.M));
    if (c.scheduling()) {
        if (s.idx.spatial) {
            // dgamma and dbeta join dx's loop over the channels, where the
            // statistics they read are computed.
            schedule_by_channel(dx, s, {s.sum_x, s.sq_dev, sum_dy, sum_dy_dev}, {s.mean, s.rstd}, c.target());
            vectorize_rows(dx, s, c.target());
            dgamma.parallel(ch).compute_with(dx, s.c);
            dbeta.parallel(ch).compute_with(dx, s.c);
        } else {
            for (Func f : {s.sum_x, s.sq_dev, sum_dy, sum_dy_dev}) schedule_column_sum(f, RVar(s.r.x), c.target());
            s.mean.compute_root();
            s.rstd.compute_root();
            schedule_rows(dx, {}, {}, c.target());
        }
    }
    OpDef d;
    d.outputs = {dx, dgamma, dbeta};
    d.output_extents = {nchw_extents(s), {s.C}, {s.C}};
    return d;
}

// The running statistics PyTorch's BatchNorm keeps for evaluation, updated
// with this batch's: running' = (1 - momentum) * running + momentum * batch,
// where the batch's variance is unbiased (divided by M - 1, as PyTorch does;
// by 1 when M is 1). The same sums as batch_norm's, so a split of the batch
// makes the same staged cross-device reductions.
OpDef batch_norm_stats(Ctx &c) {
    int rank = c.structural("rank");
    Func x = c.input(0, Float(32), rank), mean = c.input(1, Float(32), 1), var = c.input(2, Float(32), 1);
    ChannelNorm s = channel_statistics(c, x, 0, Expr(0.0f));
    Var ch = s.c;
    Expr m = c.param_float("momentum");
    Expr unbiased = cast<float>(s.sq_dev(ch)) / max(s.M - 1.0f, 1.0f);
    // Both updates in one Func, so that one loop over the channels computes
    // each channel's sums once for the two (k = 0 the mean, 1 the variance).
    Var k("k");
    Func updated("updated");
    updated(ch, k) = strict_float(select(k == 0, m * s.mean(ch) + (1.0f - m) * mean(ch),
                                         m * unbiased + (1.0f - m) * var(ch)));
    Func new_mean("new_mean"), new_var("new_var");
    new_mean(ch) = updated(ch, 0);
    new_var(ch) = updated(ch, 1);
    if (c.scheduling()) {
        updated.compute_root().bound(k, 0, 2).reorder(k, ch).unroll(k).parallel(ch);
        if (s.idx.spatial) {
            for (Func f : {s.sum_x, s.sq_dev}) schedule_channel_sum_at(f, updated, s, c.target());
            s.mean.compute_at(updated, ch);
        } else {
            schedule_column_sum(s.sum_x, RVar(s.r.x), c.target());
            schedule_column_sum(s.sq_dev, RVar(s.r.x), c.target());
            s.mean.compute_root();
        }
    }
    OpDef d;
    d.outputs = {new_mean, new_var};
    d.output_extents = {{s.C}, {s.C}};
    return d;
}

std::vector<StructMap> ranks(std::vector<int> rs) {
    std::vector<StructMap> v;
    for (int r : rs) v.push_back({{"rank", r}});
    return v;
}

}  // namespace

void register_norm(std::vector<Description> &out) {
    // Layer norm kernels see [rows, D]; batch norm has one kernel per layout.
    std::vector<KernelVariant> rows = {{"", {{"rank", 2}}}};
    std::vector<KernelVariant> layouts = {{"nc", {{"rank", 2}}}, {"nchw", {{"rank", 4}}}};
    out.push_back({OpKind::LayerNorm, layer_norm, ranks({2, 3, 4}), rows});
    out.push_back({OpKind::LayerNormGrad, layer_norm_grad, ranks({2, 3, 4}), rows});
    out.push_back({OpKind::BatchNorm, batch_norm, ranks({2, 4}), layouts});
    out.push_back({OpKind::BatchNormGrad, batch_norm_grad, ranks({2, 4}), layouts});
    out.push_back({OpKind::BatchNormStats, batch_norm_stats, ranks({2, 4}), layouts});
}

}  // namespace tessera::lang::defs
