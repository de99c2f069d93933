// Optimiser updates. They have no backward. Every tensor has the shape of the
// weight; the kernels see them flat (rank 1).
//   sgd_momentum(w, g, v; lr, momentum, weight_decay) -> (w_new, v_new)
//       v_new = momentum*v + g + weight_decay*w
//       w_new = w - lr*v_new
//   adam(w, g, m, v, step; lr, beta1, beta2, eps, weight_decay) -> (w_new, m_new, v_new)
//       m_new = beta1*m + (1-beta1)*g
//       v_new = beta2*v + (1-beta2)*g*g
//       w_new = w - lr*(mhat/(sqrt(vhat) + eps) + weight_decay*w)
//       with mhat = m_new/(1 - beta1^t), vhat = v_new/(1 - beta2^t), t = max(step, 1)
//   Adam's weight decay is decoupled (AdamW): it acts on w directly, not through g.
//   step is an i32 tensor of shape [] (data, so that one compiled step serves every
//   iteration); it is clamped to at least 1, where the bias corrections are finite.
//   Loss scaling (fp16) adds two f32 inputs of shape [] after the others: the
//   loss scale the gradient was made with, and the count of non-finite gradient
//   elements in the whole step. With a count of 0 the gradient is unscaled
//   (g * (1/scale)) and the update runs; otherwise every output is its input
//   unchanged (the step is skipped, as PyTorch's GradScaler skips it).
//   nonfinite_count(x) -> f32 [] counts x's elements that are inf or NaN.
//
// w_new reads the moments back from their outputs rather than recomputing them,
// so every element is read before it is written: the outputs may alias the inputs
// (an in-place update). The price is a second pass over memory: Halide will not
// fuse the loops of a stage with those of a stage that reads it (compute_with).
#include "defs.h"

namespace tessera::lang::defs {

using namespace Halide;

namespace {

// The loss-scaling inputs of an update whose own inputs number `first`: the
// gradient unscaled, and whether the step is skipped. Unscaled updates get g
// as it is and never skip.
struct Unscaled {
    Expr g, skip;
};
Unscaled unscaled(Ctx &c, Expr g, int first) {
    if (!c.structural("scaled")) return {g, Internal::const_false()};
    Expr scale = c.input(first, Float(32), 0)(), nonfinite = c.input(first + 1, Float(32), 0)();
    return {g * (1.0f / scale), nonfinite > 0.0f};
}

OpDef sgd_momentum(Ctx &c) {
    int rank = c.structural("rank");
    std::vector<Var> d = dim_vars(rank);
    std::vector<Expr> at = as_exprs(d);
    Expr w = c.input(0, Float(32), rank)(at), v = c.input(2, Float(32), rank)(at);
    const Unscaled g = unscaled(c, c.input(1, Float(32), rank)(at), 3);
    Expr lr = c.param_float("lr"), momentum = c.param_float("momentum"), wd = c.param_float("weight_decay");
    Func v_new("v_new"), w_new("w_new");
    v_new(d) = select(g.skip, v, momentum * v + g.g + wd * w);
    w_new(d) = select(g.skip, w, w - lr * v_new(at));
    if (c.scheduling())
        for (Func f : {v_new, w_new}) schedule_elementwise(f, c.target());
    OpDef def;
    def.outputs = {w_new, v_new};
    def.output_extents = {extents_of(c, 0, rank), extents_of(c, 0, rank)};
    return def;
}

OpDef adam(Ctx &c) {
    int rank = c.structural("rank");
    std::vector<Var> d = dim_vars(rank);
    std::vector<Expr> at = as_exprs(d);
    Expr w = c.input(0, Float(32), rank)(at), m = c.input(2, Float(32), rank)(at),
         v = c.input(3, Float(32), rank)(at);
    const Unscaled u = unscaled(c, c.input(1, Float(32), rank)(at), 5);
    Expr g = u.g;
    Expr t = cast<float>(max(c.input(4, Int(32), 0)(), 1));
    Expr lr = c.param_float("lr"), b1 = c.param_float("beta1"), b2 = c.param_float("beta2"),
         eps = c.param_float("eps"), wd = c.param_float("weight_decay");
    Func m_new("m_new"), v_new("v_new"), w_new("w_new");
    m_new(d) = select(u.skip, m, b1 * m + (1.0f - b1) * g);
    v_new(d) = select(u.skip, v, b2 * v + (1.0f - b2) * g * g);
    Expr mhat = m_new(at) / (1.0f - pow(b1, t)), vhat = v_new(at) / (1.0f - pow(b2, t));
    w_new(d) = select(u.skip, w, w - lr * (mhat / (sqrt(vhat) + eps) + wd * w));
    if (c.scheduling())
        for (Func f : {m_new, v_new, w_new}) schedule_elementwise(f, c.target());
    OpDef def;
    def.outputs = {w_new, m_new, v_new};
    def.output_extents = {extents_of(c, 0, rank), extents_of(c, 0, rank), extents_of(c, 0, rank)};
    return def;
}

// One sum over every element of x. The kernel sees x flat and sums in
// vector lanes (rfactor), then across them.
OpDef nonfinite_count(Ctx &c) {
    int rank = c.structural("rank");
    Func x = c.input(0, Float(32), rank);
    std::vector<std::pair<std::string, Expr>> dims;
    for (int k = rank - 1; k >= 0; k--) dims.push_back({"d" + std::to_string(k), c.extent(0, k)});
    RDom r = reduction(dims);
    std::vector<Expr> at;
    for (int k = 0; k < rank; k++) at.push_back(r[k]);
    Func y("y");
    y() = 0.0f;
    y() += select(is_finite(x(at)), 0.0f, 1.0f);
    if (c.scheduling() && rank == 1) {
        const int L = c.target().natural_vector_size<float>();
        RVar ro("ro"), ri("ri");
        Var lane("lane");
        Func partial = y.update().split(r.x, ro, ri, L, TailStrategy::GuardWithIf).rfactor(ri, lane);
        partial.compute_root().vectorize(lane);
        partial.update().vectorize(lane);
    }
    OpDef def;
    def.outputs = {y};
    def.output_extents = {{}};
    return def;
}

// Each rank, plain and (for updates) with loss scaling.
std::vector<StructMap> ranks(bool scalable) {
    std::vector<StructMap> v;
    for (int r = 1; r <= 4; r++) {
        v.push_back({{"rank", r}, {"scaled", 0}});
        if (scalable) v.push_back({{"rank", r}, {"scaled", 1}});
    }
    return v;
}

}  // namespace

void register_optim(std::vector<Description> &out) {
    std::vector<KernelVariant> updates = {{"", {{"rank", 1}, {"scaled", 0}}}, {"scaled", {{"rank", 1}, {"scaled", 1}}}};
    out.push_back({OpKind::SgdMomentum, sgd_momentum, ranks(true), updates});
    out.push_back({OpKind::Adam, adam, ranks(true), updates});
    out.push_back({OpKind::NonfiniteCount, nonfinite_count, ranks(false), {{"", {{"rank", 1}, {"scaled", 0}}}}});
}

}  // namespace tessera::lang::defs
