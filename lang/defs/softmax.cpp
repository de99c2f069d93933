// Softmax and cross-entropy.
//   softmax(x), log_softmax(x): over the last axis of x (any rank >= 1).
//   softmax_grad(dy, y):      dx = y * (dy - sum(dy * y)),   y = softmax(x)
//   log_softmax_grad(dy, y):  dx = dy - exp(y) * sum(dy),    y = log_softmax(x)
//   softmax_xent(logits [N, C], labels [N]) -> loss []: mean of -log_softmax(logits)[label]
//   softmax_xent_grad(logits, labels, dloss []) -> dlogits = dloss * (softmax - onehot) / N
//
// The class index is named like the element-wise ops name the last dimension
// ("d{rank-1}"), and every reduction over the classes uses the same name, so that
// splitting the classes shows the row maximum and the row sum as cross-device
// reductions. Cross-entropy uses "n" (batch) and "c" (classes).
#include "defs.h"

namespace tessera::lang::defs {

using namespace Halide;

namespace {

// The arguments of a row-wise stage with the class index replaced by `cls`.
std::vector<Expr> at(Expr cls, const std::vector<Var> &rest) {
    std::vector<Expr> a = {std::move(cls)};
    a.insert(a.end(), rest.begin(), rest.end());
    return a;
}

// The class reduction of a rank-r row-wise op, named like the class Var.
RDom classes(Ctx &c, int rank) {
    std::string name = "d";
    name += std::to_string(rank - 1);
    return reduction({{name, c.extent(0, rank - 1)}});
}

// Rows are independent: parallel over blocks of rows, each row's statistics
// computed just before the row is written, and the row vectorised along the
// classes. `per_row` are stages with one value per row; `per_elem` are stages
// with one value per element that several loops of the row read.
struct RowStats {
    Func max;      // the row maximum
    Func shifted;  // x - max
    Func e;        // exp(x - max)
    Func sum;      // the row sum of e
};

// Numerically stable: subtracting the row maximum keeps every exp() in (0, 1].
RowStats row_stats(Ctx &c, Func x, const std::vector<Var> &v, RDom r) {
    std::vector<Var> rest(v.begin() + 1, v.end());
    RowStats s{Func("row_max"), Func("shifted"), Func("e"), Func("row_sum")};
    s.max(rest) = Float(32).min();
    s.max(rest) = max(s.max(rest), x(at(r.x, rest)));
    s.max = c.stage(s.max);
    s.shifted(v) = x(as_exprs(v)) - s.max(rest);
    s.e(v) = exp(s.shifted(v));
    s.sum(rest) = 0.0f;
    s.sum(rest) += s.e(at(r.x, rest));
    s.sum = c.stage(s.sum);
    return s;
}

// A row-wise operator over the last axis: its rank, its dims v (the class
// dim first, as Halide orders them) and the rest, and its output.
struct RowOp {
    int rank;
    std::vector<Var> v, rest;

    explicit RowOp(Ctx &c) : rank(c.structural("rank")), v(dim_vars(rank)), rest(v.begin() + 1, v.end()) {}

    Func input(Ctx &c, int i) const { return c.input(i, Float(32), rank); }

    // The output `name`(v) = value, scheduled after the row stages `per_row`,
    // with the element stages `per_elem` stored (schedule_rows).
    OpDef output(Ctx &c, const char *name, const Expr &value, const std::vector<Func> &per_row,
                 const std::vector<Func> &per_elem) const {
        Func out(name);
        out(v) = value;
        if (c.scheduling()) schedule_rows(out, per_row, per_elem, c.target());
        return shaped_like_input(c, out, rank);
    }
};

OpDef softmax(Ctx &c) {
    const RowOp op(c);
    Func x = op.input(c, 0);
    RowStats s = row_stats(c, x, op.v, classes(c, op.rank));
    return op.output(c, "y", s.e(op.v) / s.sum(op.rest), {s.max, s.sum}, {s.e});
}

OpDef log_softmax(Ctx &c) {
    const RowOp op(c);
    Func x = op.input(c, 0);
    RowStats s = row_stats(c, x, op.v, classes(c, op.rank));
    // x - max is stored, and log(sum) subtracted from it: left as one expression,
    // Halide would fold max + log(sum) first, and that sum rounds at the magnitude
    // of the logits rather than of the result.
    return op.output(c, "y", s.shifted(op.v) - log(s.sum(op.rest)), {s.max, s.sum}, {s.shifted});
}

OpDef softmax_grad(Ctx &c) {
    const RowOp op(c);
    Func dy = op.input(c, 0), y = op.input(c, 1);
    RDom r = classes(c, op.rank);
    Func dot("dot");
    dot(op.rest) = 0.0f;
    dot(op.rest) += dy(at(r.x, op.rest)) * y(at(r.x, op.rest));
    dot = c.stage(dot);
    return op.output(c, "dx", y(as_exprs(op.v)) * (dy(as_exprs(op.v)) - dot(op.rest)), {dot}, {});
}

OpDef log_softmax_grad(Ctx &c) {
    const RowOp op(c);
    Func dy = op.input(c, 0), y = op.input(c, 1);
    RDom r = classes(c, op.rank);
    Func total("dy_sum");
    total(op.rest) = 0.0f;
    total(op.rest) += dy(at(r.x, op.rest));
    total = c.stage(total);
    return op.output(c, "dx", dy(as_exprs(op.v)) - exp(y(as_exprs(op.v))) * total(op.rest), {total}, {});
}

// Cross-entropy pieces shared by the loss and its gradient.
struct Xent {
    Func logits, label;  // label(n), clamped into [0, C)
    Expr class0;         // the first class of this block of logits (0 unless staged)
    RowStats stats;
    Expr N, C;
    Var n{"n"}, cls{"c"};
};

Xent xent_inputs(Ctx &c) {
    Xent x;
    x.logits = c.input(0, Float(32), 2);
    Func labels = c.input(1, Int(32), 1);
    x.N = c.extent(0, 0);
    x.C = c.extent(0, 1);
    // Labels are data: a bad one cannot be refused from shapes, so it is clamped
    // into range, and it only ever selects a class (it never indexes memory).
    x.label = Func("label");
    x.label(x.n) = clamp(labels(x.n), 0, c.whole_extent(0, 1) - 1);
    x.class0 = c.origin(0, 1);
    x.stats = row_stats(c, x.logits, {x.cls, x.n}, reduction({{"c", x.C}}));
    return x;
}

OpDef softmax_xent(Ctx &c) {
    Xent x = xent_inputs(c);
    Var n = x.n;
    // The logit at the label, already shifted by the row maximum (so that the
    // large terms cancel exactly before log(sum) is added), picked by a sum over
    // the classes rather than read at the label: an index read from data would
    // hide from the analysis that each row of logits is needed only by its own
    // batch entry. The row is in cache for the max and the sum anyway.
    RDom rc = reduction({{"c", x.C}});
    Func picked("label_logit");
    picked(n) = 0.0f;
    picked(n) += select(rc.x + x.class0 == x.label(n), x.stats.shifted(rc.x, n), 0.0f);
    picked = c.stage(picked);
    // -log_softmax at the label: log(sum) - (logit[label] - max).
    Func nll("nll");
    nll(n) = log(x.stats.sum(n)) - picked(n);
    // The batch mean as one sum whose terms are already divided by N, so that a
    // split batch gives partial losses that simply add up.
    RDom rn = reduction({{"n", x.N}});
    Func loss("loss");
    loss() = 0.0f;
    loss() += nll(rn.x) / cast<float>(x.N);
    if (c.scheduling()) {
        Var no("no"), ni("ni");
        nll.compute_root().split(n, no, ni, 16, TailStrategy::GuardWithIf).parallel(no);
        x.stats.max.compute_at(nll, ni);
        x.stats.sum.compute_at(nll, ni);
        picked.compute_at(nll, ni);
    }
    OpDef d;
    d.outputs = {loss};
    d.output_extents = {{}};
    return d;
}

OpDef softmax_xent_grad(Ctx &c) {
    Xent x = xent_inputs(c);
    Func dloss = c.input(2, Float(32), 0);
    Var n = x.n, cls = x.cls;
    Func dlogits("dlogits");
    Expr onehot = select(cls + x.class0 == x.label(n), 1.0f, 0.0f);
    dlogits(cls, n) = dloss() * (x.stats.e(cls, n) / x.stats.sum(n) - onehot) / cast<float>(x.N);
    if (c.scheduling()) schedule_rows(dlogits, {x.stats.max, x.stats.sum}, {x.stats.e}, c.target());
    OpDef d;
    d.outputs = {dlogits};
    d.output_extents = {{x.N, x.C}};
    return d;
}

std::vector<StructMap> ranks() {
    std::vector<StructMap> v;
    for (int r = 1; r <= 4; r++) v.push_back({{"rank", r}});
    return v;
}

}  // namespace

void register_softmax(std::vector<Description> &out) {
    // Kernels see [rows, classes]: every leading dimension folded into the rows.
    std::vector<KernelVariant> rows = {{"", {{"rank", 2}}}};
    std::vector<KernelVariant> plain = {{"", StructMap{}}};
    std::vector<StructMap> one = {StructMap{}};
    out.push_back({OpKind::Softmax, softmax, ranks(), rows});
    out.push_back({OpKind::SoftmaxGrad, softmax_grad, ranks(), rows});
    out.push_back({OpKind::LogSoftmax, log_softmax, ranks(), rows});
    out.push_back({OpKind::LogSoftmaxGrad, log_softmax_grad, ranks(), rows});
    out.push_back({OpKind::SoftmaxXent, softmax_xent, one, plain});
    out.push_back({OpKind::SoftmaxXentGrad, softmax_xent_grad, one, plain});
}

}  // namespace tessera::lang::defs
