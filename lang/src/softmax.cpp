// Softmax, log-softmax and cross-entropy: shapes, variants and dispatch.
#include "family.h"

namespace tessera::lang {

namespace {

bool is_xent(OpKind k) { return k == OpKind::SoftmaxXent || k == OpKind::SoftmaxXentGrad; }

// softmax_xent and its gradient: logits [N, C] f32, labels [N] i32 (, dloss [] f32).
void check_xent(const OpCall &c, const std::vector<TensorType> &in) {
    expect_dtype(c, in, 0, "logits", DType::F32);
    expect_dtype(c, in, 1, "labels", DType::I32);
    expect_rank(c, in, 0, "logits", 2);
    expect_rank(c, in, 1, "labels", 1);
    TESSERA_CHECK(in[1].shape[0] == in[0].shape[0], c.who(), ": labels ", shape_str(in[1].shape), " have ",
                  in[1].shape[0], " entries but logits ", shape_str(in[0].shape), " have a batch of ",
                  in[0].shape[0], "; expected one label per row");
    if (c.kind == OpKind::SoftmaxXentGrad) {
        expect_dtype(c, in, 2, "dloss", DType::F32);
        TESSERA_CHECK(in[2].rank() == 0, c.who(), ": input 2 (dloss) must be a scalar of shape [], got shape ",
                      shape_str(in[2].shape));
    }
}

// [rows, classes]: every dimension but the last folded into the rows.
Shape rows_view(const Shape &s) {
    int r = static_cast<int>(s.size());
    return {extent_product(s, 0, r - 1), s[r - 1]};
}

}  // namespace

std::vector<TensorType> infer_softmax(const OpCall &c, const std::vector<TensorType> &in) {
    if (is_xent(c.kind)) {
        check_xent(c, in);
        if (c.kind == OpKind::SoftmaxXent) return {{DType::F32, {}}};
        return {in[0]};
    }
    bool grad = c.kind == OpKind::SoftmaxGrad || c.kind == OpKind::LogSoftmaxGrad;
    const char *first = grad ? "dy" : "x";
    expect_dtype(c, in, 0, first, DType::F32);
    TESSERA_CHECK(in[0].rank() >= 1, c.who(), ": ", input_label(0, first),
                  " must have rank at least 1 (the classes are its last axis), got a scalar");
    if (grad) {
        expect_dtype(c, in, 1, "y", DType::F32);
        expect_same_shape(c, in, 0, 1);
    }
    return {in[0]};
}

StructMap structural_softmax(const OpCall &c, const std::vector<TensorType> &in) {
    if (is_xent(c.kind)) return {};
    return {{"rank", in[0].rank()}};
}

void fill_defaults_softmax(OpCall &) {}  // no attributes

void run_softmax(const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    std::string name = std::string("tk_") + op_name(c.kind);
    if (is_xent(c.kind)) {
        std::vector<KernelArg> args;
        for (const TensorRef &t : in) args.push_back({t, {}});
        call_kernel(name, args, {}, {{out[0], {}}});
        return;
    }
    Shape view = rows_view(in[0].type.shape);
    std::vector<KernelArg> args;
    for (const TensorRef &t : in) args.push_back({t, view});
    call_kernel(name, args, {}, {{out[0], view}});
}

}  // namespace tessera::lang
