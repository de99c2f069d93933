// Element-wise operators and bias broadcast: shapes, variants and dispatch.
#include "family.h"

namespace tessera::lang {

namespace {

bool is_bias(OpKind k) { return k == OpKind::BiasAdd || k == OpKind::BiasAddGrad; }

const char *input_name(OpKind k, int i) {
    switch (k) {
    case OpKind::ReluGrad:
    case OpKind::GeluGrad:
    case OpKind::ErfGrad: return i == 0 ? "dy" : "x";
    case OpKind::TanhGrad:
    case OpKind::SigmoidGrad: return i == 0 ? "dy" : "y";
    case OpKind::BiasAddGrad: return "dy";
    default: return i == 0 ? "x" : "y";
    }
}

}  // namespace

std::vector<TensorType> infer_elementwise(const OpCall &c, const std::vector<TensorType> &in) {
    for (size_t i = 0; i < in.size(); i++) expect_dtype(c, in, int(i), input_name(c.kind, int(i)), DType::F32);
    if (c.kind == OpKind::BiasAdd) {
        TESSERA_CHECK(in[0].rank() >= 1, c.who(), ": input 0 (x) must have rank at least 1");
        expect_rank(c, in, 1, "bias", 1);
        int axis = normalize_axis(c, c.attrs.get_int(c.who(), "axis", -1), in[0].rank());
        TESSERA_CHECK(in[0].shape[axis] == in[1].shape[0], c.who(), ": x ", shape_str(in[0].shape),
                      " has ", in[0].shape[axis], " elements along axis ", axis, " but the bias has ",
                      in[1].shape[0]);
        return {in[0]};
    }
    if (c.kind == OpKind::BiasAddGrad) {
        TESSERA_CHECK(in[0].rank() >= 1, c.who(), ": input 0 (dy) must have rank at least 1");
        int axis = normalize_axis(c, c.attrs.get_int(c.who(), "axis", -1), in[0].rank());
        return {{DType::F32, {in[0].shape[axis]}}};
    }
    if (c.kind == OpKind::Scale) c.attrs.get_float(c.who(), "alpha");
    if (in.size() == 2) expect_same_shape(c, in, 0, 1);
    return {in[0]};
}

StructMap structural_elementwise(const OpCall &c, const std::vector<TensorType> &in) {
    StructMap s{{"rank", in[0].rank()}};
    if (is_bias(c.kind)) s["axis"] = normalize_axis(c, c.attrs.get_int(c.who(), "axis", -1), in[0].rank());
    return s;
}

void fill_defaults_elementwise(OpCall &c) {
    if (is_bias(c.kind) && !c.attrs.has("axis")) c.attrs.set("axis", int64_t{-1});
}

void run_elementwise(const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    std::string name = std::string("tk_") + op_name(c.kind);
    if (is_bias(c.kind)) {
        const Shape &s = in[0].type.shape;
        int axis = normalize_axis(c, c.attrs.get_int(c.who(), "axis", -1), int(s.size()));
        Shape view = {extent_product(s, 0, axis), s[axis], extent_product(s, axis + 1, int(s.size()))};
        if (c.kind == OpKind::BiasAdd) call_kernel(name, {{in[0], view}, {in[1], {}}}, {}, {{out[0], view}});
        else call_kernel(name, {{in[0], view}}, {}, {{out[0], {}}});
        return;
    }
    Shape flat = {in[0].type.elements()};
    std::vector<KernelArg> args;
    for (const auto &t : in) args.push_back({t, flat});
    Scalars s;
    if (c.kind == OpKind::Scale) s.set("alpha", c.attrs.get_float(c.who(), "alpha"));
    call_kernel(name, args, s, {{out[0], flat}});
}

}  // namespace tessera::lang
