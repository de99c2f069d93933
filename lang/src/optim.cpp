// sgd_momentum, adam and nonfinite_count: shapes, attribute ranges and
// dispatch. The kernels see every tensor flat; adam's step is an i32 scalar
// tensor, and the loss-scaling inputs (scale, non-finite count) f32 scalars.
#include <cmath>
#include <limits>

#include "family.h"

namespace tessera::lang {

namespace {

// A number attribute; a NaN fallback means the attribute is required.
double number(const OpCall &c, const char *name, double fallback) {
    return std::isnan(fallback) ? c.attrs.get_float(c.who(), name) : c.attrs.get_float(c.who(), name, fallback);
}

// The attribute, checked to lie in [lo, hi) (or (lo, hi) with lo_open).
double in_range(const OpCall &c, const char *name, double fallback, double lo, double hi, bool lo_open = false) {
    double v = number(c, name, fallback);
    bool ok = (lo_open ? v > lo : v >= lo) && v < hi;
    if (!ok) {
        std::string range = std::string(lo_open ? "(" : "[") + detail::concat(lo) + ", " +
                            (std::isinf(hi) ? "inf)" : detail::concat(hi) + ")");
        fail(c.who(), ": attribute '", name, "' = ", v, " must be in ", range);
    }
    return v;
}

constexpr double kRequired = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Every scalar the kernels take, validated; the defaults are the attributes' defaults.
Scalars hyperparameters(const OpCall &c) {
    Scalars s;
    s.set("lr", in_range(c, "lr", kRequired, 0.0, kInf));
    s.set("weight_decay", in_range(c, "weight_decay", 0.0, 0.0, kInf));
    if (c.kind == OpKind::SgdMomentum) {
        s.set("momentum", in_range(c, "momentum", 0.9, 0.0, 1.0));
    } else {
        s.set("beta1", in_range(c, "beta1", 0.9, 0.0, 1.0));
        s.set("beta2", in_range(c, "beta2", 0.999, 0.0, 1.0));
        s.set("eps", in_range(c, "eps", 1e-8, 0.0, kInf, true));
    }
    return s;
}

const char *input_name(OpKind k, int i) {
    static const char *sgd[] = {"w", "g", "v", "scale", "nonfinite"},
                      *adam[] = {"w", "g", "m", "v", "step", "scale", "nonfinite"};
    return k == OpKind::SgdMomentum ? sgd[i] : adam[i];
}

// The tensors an update reads besides its scalars: w, g and the state.
int update_tensors(OpKind k) { return k == OpKind::SgdMomentum ? 3 : 4; }

// The inputs an update takes without loss scaling (with it, two more).
int plain_inputs(OpKind k) { return k == OpKind::SgdMomentum ? 3 : 5; }

bool loss_scaled(const OpCall &c, size_t inputs) {
    return c.kind != OpKind::NonfiniteCount && static_cast<int>(inputs) > plain_inputs(c.kind);
}

void expect_f32_scalar(const OpCall &c, const std::vector<TensorType> &in, int i) {
    expect_dtype(c, in, i, input_name(c.kind, i), DType::F32);
    TESSERA_CHECK(in[i].rank() == 0, c.who(), ": ", input_label(i, input_name(c.kind, i)),
                  " must be a scalar (shape []), got shape ", shape_str(in[i].shape));
}

std::vector<TensorType> infer_nonfinite_count(const OpCall &c, const std::vector<TensorType> &in) {
    expect_dtype(c, in, 0, "x", DType::F32);
    expect_rank_between(c, in, 0, "x", 1, 4);
    return {TensorType{DType::F32, {}}};
}

}  // namespace

std::vector<TensorType> infer_optim(const OpCall &c, const std::vector<TensorType> &in) {
    if (c.kind == OpKind::NonfiniteCount) return infer_nonfinite_count(c, in);
    const int tensors = update_tensors(c.kind);
    TESSERA_CHECK(static_cast<int>(in.size()) == plain_inputs(c.kind) || loss_scaled(c, in.size()) &&
                      static_cast<int>(in.size()) == plain_inputs(c.kind) + 2,
                  c.who(), ": takes ", plain_inputs(c.kind), " inputs, or ", plain_inputs(c.kind) + 2,
                  " with loss scaling (the scale and the non-finite count); got ", in.size());
    for (int i = 0; i < tensors; i++) {
        expect_dtype(c, in, i, input_name(c.kind, i), DType::F32);
        if (i > 0)
            TESSERA_CHECK(in[i].shape == in[0].shape, c.who(), ": ", input_label(i, input_name(c.kind, i)),
                          " has shape ", shape_str(in[i].shape), " but w has shape ", shape_str(in[0].shape),
                          "; they must match");
    }
    if (c.kind == OpKind::Adam) {
        expect_dtype(c, in, 4, "step", DType::I32);
        TESSERA_CHECK(in[4].rank() == 0, c.who(), ": ", input_label(4, "step"),
                      " must be a scalar (shape []), got shape ", shape_str(in[4].shape));
    }
    if (loss_scaled(c, in.size()))
        for (int i = plain_inputs(c.kind); i < plain_inputs(c.kind) + 2; i++) expect_f32_scalar(c, in, i);
    hyperparameters(c);
    return std::vector<TensorType>(tensors - 1, in[0]);
}

StructMap structural_optim(const OpCall &c, const std::vector<TensorType> &in) {
    return {{"rank", in[0].rank()}, {"scaled", loss_scaled(c, in.size()) ? 1 : 0}};
}

void fill_defaults_optim(OpCall &c) {
    auto def = [&](const char *name, double v) {
        if (!c.attrs.has(name)) c.attrs.set(name, v);
    };
    if (c.kind == OpKind::NonfiniteCount) return;
    def("weight_decay", 0.0);
    if (c.kind == OpKind::SgdMomentum) {
        def("momentum", 0.9);
    } else {
        def("beta1", 0.9);
        def("beta2", 0.999);
        def("eps", 1e-8);
    }
}

void run_optim(const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    Shape flat = {in[0].type.elements()};
    std::vector<KernelArg> args, outs;
    if (c.kind == OpKind::NonfiniteCount) {
        call_kernel("tk_nonfinite_count", {{in[0], flat}}, {}, {{out[0], {}}});
        return;
    }
    for (int i = 0; i < update_tensors(c.kind); i++) args.push_back({in[i], flat});
    for (size_t i = update_tensors(c.kind); i < in.size(); i++) args.push_back({in[i], {}});
    for (const TensorRef &t : out) outs.push_back({t, flat});
    const bool scaled = loss_scaled(c, in.size());
    call_kernel(std::string("tk_") + op_name(c.kind) + (scaled ? "_scaled" : ""), args, hyperparameters(c), outs);
}

}  // namespace tessera::lang
