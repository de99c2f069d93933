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
//
// w_new reads the moments back from their outputs rather than recomputing them,
// so every element is read before it is written: the outputs may alias the inputs
// (an in-place update). The price is a second pass over memory: Halide will not
// fuse the loops of a stage with those of a stage that reads it (compute_with).
#include "defs.h"

namespace tessera::lang::defs {

using namespace Halide;

namespace {

OpDef sgd_momentum(Ctx &c) {
    int rank = c.structural("rank");
    std::vector<Var> d = dim_vars(rank);
    std::vector<Expr> at = as_exprs(d);
    Expr w = c.input(0, Float(32), rank)(at), g = c.input(1, Float(32), rank)(at),
         v = c.input(2, Float(32), rank)(at);
    Expr lr = c.param_float("lr"), momentum = c.param_float("momentum"), wd = c.param_float("weight_decay");
    Func v_new("v_new"), w_new("w_new");
    v_new(d) = momentum * v + g + wd * w;
    w_new(d) = w - lr * v_new(at);
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
    Expr w = c.input(0, Float(32), rank)(at), g = c.input(1, Float(32), rank)(at),
         m = c.input(2, Float(32), rank)(at), v = c.input(3, Float(32), rank)(at);
    Expr t = cast<float>(max(c.input(4, Int(32), 0)(), 1));
    Expr lr = c.param_float("lr"), b1 = c.param_float("beta1"), b2 = c.param_float("beta2"),
         eps = c.param_float("eps"), wd = c.param_float("weight_decay");
    Func m_new("m_new"), v_new("v_new"), w_new("w_new");
    m_new(d) = b1 * m + (1.0f - b1) * g;
    v_new(d) = b2 * v + (1.0f - b2) * g * g;
    Expr mhat = m_new(at) / (1.0f - pow(b1, t)), vhat = v_new(at) / (1.0f - pow(b2, t));
    w_new(d) = w - lr * (mhat / (sqrt(vhat) + eps) + wd * w);
    if (c.scheduling())
        for (Func f : {m_new, v_new, w_new}) schedule_elementwise(f, c.target());
    OpDef def;
    def.outputs = {w_new, m_new, v_new};
    def.output_extents = {extents_of(c, 0, rank), extents_of(c, 0, rank), extents_of(c, 0, rank)};
    return def;
}

std::vector<StructMap> ranks() {
    std::vector<StructMap> v;
    for (int r = 1; r <= 4; r++) v.push_back({{"rank", r}});
    return v;
}

}  // namespace

void register_optim(std::vector<Description> &out) {
    std::vector<KernelVariant> flat = {{"", {{"rank", 1}}}};
    out.push_back({OpKind::SgdMomentum, sgd_momentum, ranks(), flat});
    out.push_back({OpKind::Adam, adam, ranks(), flat});
}

}  // namespace tessera::lang::defs
