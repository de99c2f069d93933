// Layer norm and batch norm (and batch norm's running statistics): shapes,
// variants and dispatch.
#include "family.h"

#include <cmath>

namespace tessera::lang {

namespace {

constexpr double kDefaultEps = 1e-5;
constexpr double kDefaultMomentum = 0.1;  // PyTorch's BatchNorm default

bool is_grad(OpKind k) { return k == OpKind::LayerNormGrad || k == OpKind::BatchNormGrad; }
bool is_batch(OpKind k) {
    return k == OpKind::BatchNorm || k == OpKind::BatchNormGrad || k == OpKind::BatchNormStats;
}
bool is_stats(OpKind k) { return k == OpKind::BatchNormStats; }

double eps_of(const OpCall &c) {
    double eps = c.attrs.get_float(c.who(), "eps", kDefaultEps);
    TESSERA_CHECK(std::isfinite(eps) && eps > 0, c.who(), ": attribute 'eps' = ", eps,
                  " must be a positive number (it keeps 1/sqrt(variance + eps) finite); the default is 1e-05");
    return eps;
}

double momentum_of(const OpCall &c) {
    double m = c.attrs.get_float(c.who(), "momentum", kDefaultMomentum);
    TESSERA_CHECK(std::isfinite(m) && m > 0 && m <= 1, c.who(), ": attribute 'momentum' = ", m,
                  " must lie in (0, 1] (the weight of the batch's statistics in the running ones); the default is 0.1");
    return m;
}

// Inputs: (x, gamma, beta) forward, (dy, x, gamma) backward, (x, running_mean,
// running_var) for the running statistics.
int x_index(OpKind k) { return is_grad(k) ? 1 : 0; }

// gamma (and beta) must have one element per normalised feature.
void expect_affine(const OpCall &c, const std::vector<TensorType> &in, int i, const char *what, int64_t want,
                   const char *feature) {
    expect_dtype(c, in, i, what, DType::F32);
    const TensorType &x = in[x_index(c.kind)];
    TESSERA_CHECK(in[i].rank() == 1 && in[i].shape[0] == want, c.who(), ": ", what, " ",
                  shape_str(in[i].shape), " must have shape [", want, "], one element per ", feature,
                  " of x ", shape_str(x.shape));
}

}  // namespace

std::vector<TensorType> infer_norm(const OpCall &c, const std::vector<TensorType> &in) {
    bool grad = is_grad(c.kind);
    int xi = x_index(c.kind);
    if (grad) expect_dtype(c, in, 0, "dy", DType::F32);
    expect_dtype(c, in, xi, "x", DType::F32);
    const Shape &x = in[xi].shape;
    int64_t features;
    const char *feature;
    if (is_batch(c.kind)) {
        TESSERA_CHECK(in[xi].rank() == 2 || in[xi].rank() == 4, c.who(), ": ", input_label(xi, "x"),
                      " must have rank 2 ([N, C]) or 4 ([N, C, H, W]), got shape ", shape_str(x));
        features = x[1];
        feature = "channel (dim 1)";
    } else {
        TESSERA_CHECK(in[xi].rank() >= 1, c.who(), ": ", input_label(xi, "x"),
                      " must have rank at least 1 (it is normalised over its last axis), got a scalar");
        features = x.back();
        feature = "element of the last axis";
    }
    if (is_stats(c.kind)) {
        expect_affine(c, in, 1, "running_mean", features, feature);
        expect_affine(c, in, 2, "running_var", features, feature);
        momentum_of(c);
        TensorType f{DType::F32, {features}};
        return {f, f};
    }
    if (grad) {
        expect_same_shape(c, in, 0, 1);
        expect_affine(c, in, 2, "gamma", features, feature);
    } else {
        expect_affine(c, in, 1, "gamma", features, feature);
        expect_affine(c, in, 2, "beta", features, feature);
    }
    eps_of(c);
    TensorType xt = in[xi];
    if (!grad) return {xt};
    TensorType f{DType::F32, {features}};
    return {xt, f, f};
}

StructMap structural_norm(const OpCall &c, const std::vector<TensorType> &in) {
    return {{"rank", in[x_index(c.kind)].rank()}};
}

void fill_defaults_norm(OpCall &c) {
    if (is_stats(c.kind)) {
        if (!c.attrs.has("momentum")) c.attrs.set("momentum", kDefaultMomentum);
    } else if (!c.attrs.has("eps")) {
        c.attrs.set("eps", kDefaultEps);
    }
}

void run_norm(const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    std::string name = std::string("tk_") + op_name(c.kind);
    Scalars s;
    if (is_stats(c.kind)) s.set("momentum", momentum_of(c));
    else s.set("eps", eps_of(c));
    const Shape &x = in[x_index(c.kind)].type.shape;
    int rank = static_cast<int>(x.size());
    Shape view;  // batch norm: the tensors' own shapes; layer norm: [rows, D]
    if (is_batch(c.kind)) name += rank == 4 ? "_nchw" : "_nc";
    else view = {extent_product(x, 0, rank - 1), x[rank - 1]};
    // Inputs and outputs are (x|dy, ...) with the first one or two x-shaped.
    int x_shaped = is_grad(c.kind) ? 2 : 1;
    std::vector<KernelArg> args, outs;
    for (int i = 0; i < static_cast<int>(in.size()); i++) args.push_back({in[i], i < x_shaped ? view : Shape{}});
    for (int i = 0; i < static_cast<int>(out.size()); i++) outs.push_back({out[i], i == 0 ? view : Shape{}});
    call_kernel(name, args, s, outs);
}

}  // namespace tessera::lang
