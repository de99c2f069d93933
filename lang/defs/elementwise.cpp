// Element-wise operators and the bias broadcast. Each is written once for any
// rank; the kernels see every tensor as 1-D (bias: as [outer, C, inner]).
#include "defs.h"

namespace tessera::lang::defs {

using namespace Halide;

namespace {

// The shared skeleton: y(d...) = fn(inputs at d...).
OpDef pointwise(Ctx &c, int arity, const std::function<Expr(const std::vector<Expr> &)> &fn) {
    int rank = c.structural("rank");
    std::vector<Var> v = dim_vars(rank);
    std::vector<Expr> vals;
    for (int i = 0; i < arity; i++) vals.push_back(c.input(i, Float(32), rank)(as_exprs(v)));
    Func y("y");
    y(v) = fn(vals);
    if (c.scheduling()) schedule_elementwise(y, c.target());
    return shaped_like_input(c, y, rank);
}

Expr gelu_inner(Expr x) { return float(kGeluC) * (x + float(kGeluA) * x * x * x); }

OpDef add(Ctx &c) { return pointwise(c, 2, [](auto &a) { return a[0] + a[1]; }); }
OpDef sub(Ctx &c) { return pointwise(c, 2, [](auto &a) { return a[0] - a[1]; }); }
OpDef mul(Ctx &c) { return pointwise(c, 2, [](auto &a) { return a[0] * a[1]; }); }
OpDef scale(Ctx &c) {
    Expr alpha = c.param_float("alpha");
    return pointwise(c, 1, [=](auto &a) { return a[0] * alpha; });
}
OpDef relu(Ctx &c) { return pointwise(c, 1, [](auto &a) { return max(a[0], 0.0f); }); }
// relu_grad(dy, x) = dy where x > 0.
OpDef relu_grad(Ctx &c) {
    return pointwise(c, 2, [](auto &a) { return select(a[1] > 0.0f, a[0], 0.0f); });
}
OpDef gelu(Ctx &c) {
    return pointwise(c, 1, [](auto &a) { return 0.5f * a[0] * (1.0f + tanh(gelu_inner(a[0]))); });
}
// gelu_grad(dy, x): derivative of the tanh approximation.
OpDef gelu_grad(Ctx &c) {
    return pointwise(c, 2, [](auto &a) {
        Expr x = a[1], t = tanh(gelu_inner(x));
        Expr dinner = float(kGeluC) * (1.0f + 3.0f * float(kGeluA) * x * x);
        return a[0] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner);
    });
}
OpDef tanh_op(Ctx &c) { return pointwise(c, 1, [](auto &a) { return tanh(a[0]); }); }
// tanh_grad(dy, y) with y = tanh(x).
OpDef tanh_grad(Ctx &c) { return pointwise(c, 2, [](auto &a) { return a[0] * (1.0f - a[1] * a[1]); }); }
OpDef sigmoid(Ctx &c) { return pointwise(c, 1, [](auto &a) { return 1.0f / (1.0f + exp(-a[0])); }); }
// erf, the Gauss error function: PyTorch's exact GELU, x/2 (1 + erf(x/sqrt 2)),
// exports to ONNX through it.
OpDef erf_op(Ctx &c) { return pointwise(c, 1, [](auto &a) { return erf(a[0]); }); }
// erf_grad(dy, x) = dy * 2/sqrt(pi) * exp(-x^2).
OpDef erf_grad(Ctx &c) {
    return pointwise(c, 2, [](auto &a) { return a[0] * 1.1283791670955126f * exp(-a[1] * a[1]); });
}
// sigmoid_grad(dy, y) with y = sigmoid(x).
OpDef sigmoid_grad(Ctx &c) { return pointwise(c, 2, [](auto &a) { return a[0] * a[1] * (1.0f - a[1]); }); }

// bias_add(x, b): y = x + b broadcast along `axis`.
OpDef bias_add(Ctx &c) {
    int rank = c.structural("rank"), axis = c.structural("axis");
    std::vector<Var> v = dim_vars(rank);
    Func x = c.input(0, Float(32), rank), b = c.input(1, Float(32), 1);
    Func y("y");
    y(v) = x(as_exprs(v)) + b(v[rank - 1 - axis]);
    if (c.scheduling() && rank >= 3) {
        // The kernel sees [outer, C, inner]. A dense layer's bias has inner
        // 1, and vectors along it would carry one value each: then the
        // vectors run along the next dimension, contiguous there.
        const int lanes = c.target().natural_vector_size<float>();
        y.specialize(c.extent(0, rank - 1) == 1)
            .reorder(v[1], v[0])
            .vectorize(v[1], lanes, TailStrategy::GuardWithIf)
            .parallel(v.back());
        schedule_elementwise(y, c.target());
    } else if (c.scheduling()) {
        schedule_elementwise(y, c.target());
    }
    return shaped_like_input(c, y, rank);
}

// bias_add_grad(dy): db[c] = sum of dy over every dimension but `axis`.
OpDef bias_add_grad(Ctx &c) {
    int rank = c.structural("rank"), axis = c.structural("axis");
    Func dy = c.input(0, Float(32), rank);
    Var ch("d" + std::to_string(axis));
    std::vector<Expr> at(rank);
    if (rank == 1) {  // nothing to reduce: db = dy
        Func db("db");
        db(ch) = dy(ch);
        OpDef d;
        d.outputs = {db};
        d.output_extents = {{c.extent(0, 0)}};
        return d;
    }
    std::vector<std::pair<std::string, Expr>> dims;
    for (int t = rank - 1; t >= 0; t--)  // innermost first: r.x walks contiguous memory
        if (t != axis) dims.emplace_back("d" + std::to_string(t), c.extent(0, t));
    RDom r = reduction(dims);
    for (int t = rank - 1, j = 0; t >= 0; t--) at[rank - 1 - t] = t == axis ? Expr(ch) : Expr(r[j++]);
    // Summed in a stage of its own and then copied out: a vectorised update
    // of an output Func reads the output back with loads that Halide 14 emits
    // as aligned, which faults on caller memory that is not (as norm.cpp's
    // dgamma_sum says).
    Func sum("db_sum"), db("db");
    sum(ch) = 0.0f;
    sum(ch) += dy(at);
    db(ch) = sum(ch);
    if (c.scheduling()) {
        // When the dimensions inside `axis` have extent 1 (a dense layer's
        // bias), a channel's values lie a row apart: vectors of channels then
        // walk the rows together, each lane adding its own channel's values in
        // the order of the scalar loop. Otherwise one channel at a time.
        Expr inner = 1;
        for (int t = axis + 1; t < rank; t++) inner = inner * c.extent(0, t);
        const int lanes = c.target().natural_vector_size<float>();
        Var co("co"), ci("ci");
        std::vector<VarOrRVar> order{ci};
        for (int j = 0; j < r.dimensions(); j++) order.push_back(r[j]);
        order.push_back(co);
        sum.compute_root();
        sum.update()
            .specialize(inner == 1)
            .split(ch, co, ci, 4 * lanes, TailStrategy::GuardWithIf)
            .reorder(order)
            .vectorize(ci, lanes, TailStrategy::GuardWithIf)
            .parallel(co);
        sum.update().parallel(ch);
        schedule_elementwise(db, c.target());
    }
    OpDef d;
    d.outputs = {db};
    d.output_extents = {{c.extent(0, axis)}};
    return d;
}

std::vector<StructMap> ranks(int hi = 4) {
    std::vector<StructMap> v;
    for (int r = 1; r <= hi; r++) v.push_back({{"rank", r}});
    return v;
}

std::vector<StructMap> rank_axis() {
    std::vector<StructMap> v;
    for (int r = 1; r <= 4; r++)
        for (int a = 0; a < r; a++) v.push_back({{"rank", r}, {"axis", a}});
    return v;
}

}  // namespace

void register_elementwise(std::vector<Description> &out) {
    std::vector<KernelVariant> flat = {{"", {{"rank", 1}}}};
    std::vector<KernelVariant> bias = {{"", {{"rank", 3}, {"axis", 1}}}};
    out.push_back({OpKind::BiasAdd, bias_add, rank_axis(), bias});
    out.push_back({OpKind::BiasAddGrad, bias_add_grad, rank_axis(), bias});
    out.push_back({OpKind::Add, add, ranks(), flat});
    out.push_back({OpKind::Sub, sub, ranks(), flat});
    out.push_back({OpKind::Mul, mul, ranks(), flat});
    out.push_back({OpKind::Scale, scale, ranks(), flat});
    out.push_back({OpKind::Relu, relu, ranks(), flat});
    out.push_back({OpKind::ReluGrad, relu_grad, ranks(), flat});
    out.push_back({OpKind::Gelu, gelu, ranks(), flat});
    out.push_back({OpKind::GeluGrad, gelu_grad, ranks(), flat});
    out.push_back({OpKind::Tanh, tanh_op, ranks(), flat});
    out.push_back({OpKind::TanhGrad, tanh_grad, ranks(), flat});
    out.push_back({OpKind::Sigmoid, sigmoid, ranks(), flat});
    out.push_back({OpKind::SigmoidGrad, sigmoid_grad, ranks(), flat});
    out.push_back({OpKind::Erf, erf_op, ranks(), flat});
    out.push_back({OpKind::ErfGrad, erf_grad, ranks(), flat});
}

}  // namespace tessera::lang::defs
