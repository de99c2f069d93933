// sgd_momentum and adam: shapes, attribute ranges and dispatch. The kernels see
// every tensor flat; adam's step is an i32 scalar tensor.
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
    static const char *sgd[] = {"w", "g", "v"}, *adam[] = {"w", "g", "m", "v", "step"};
    return k == OpKind::SgdMomentum ? sgd[i] : adam[i];
}

}  // namespace

std::vector<TensorType> infer_optim(const OpCall &c, const std::vector<TensorType> &in) {
    int tensors = c.kind == OpKind::SgdMomentum ? 3 : 4;
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
    hyperparameters(c);
    return std::vector<TensorType>(tensors - 1, in[0]);
}

StructMap structural_optim(const OpCall &, const std::vector<TensorType> &in) { return {{"rank", in[0].rank()}}; }

void fill_defaults_optim(OpCall &c) {
    auto def = [&](const char *name, double v) {
        if (!c.attrs.has(name)) c.attrs.set(name, v);
    };
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
    for (int i = 0; i < (c.kind == OpKind::SgdMomentum ? 3 : 4); i++) args.push_back({in[i], flat});
    if (c.kind == OpKind::Adam) args.push_back({in[4], {}});
    for (const TensorRef &t : out) outs.push_back({t, flat});
    call_kernel(std::string("tk_") + op_name(c.kind), args, hyperparameters(c), outs);
}

}  // namespace tessera::lang
