// Convolution and pooling: shapes and attribute validation, variant selection and
// kernel dispatch. Layout NCHW; weights [Co, Ci, KH, KW]. The window attributes are
// scalars: stride_h, stride_w (default 1 for convolutions, the kernel size for
// pooling), pad_h, pad_w (default 0); kernel_h, kernel_w for pooling and for
// conv2d_grad_weight; in_h, in_w where a gradient cannot recover the input size
// from its inputs (a strided window may skip the last rows).
#include "family.h"

namespace tessera::lang {

namespace {

bool is_pool(OpKind k) {
    return k == OpKind::MaxPool2d || k == OpKind::MaxPool2dGrad || k == OpKind::AvgPool2d ||
           k == OpKind::AvgPool2dGrad;
}

bool is_global(OpKind k) { return k == OpKind::GlobalAvgPool || k == OpKind::GlobalAvgPoolGrad; }

// Window attributes of one call, validated.
struct Window {
    int64_t kh = 0, kw = 0;  // kernel extents (from attributes or the weight)
    int64_t sh, sw, ph, pw;
};

Window window_attrs(const OpCall &c, int64_t kh, int64_t kw) {
    Window g;
    g.kh = kh;
    g.kw = kw;
    int64_t default_h = is_pool(c.kind) ? kh : 1, default_w = is_pool(c.kind) ? kw : 1;
    g.sh = int_at_least(c, "stride_h", default_h, 1);
    g.sw = int_at_least(c, "stride_w", default_w, 1);
    g.ph = int_at_least(c, "pad_h", 0, 0);
    g.pw = int_at_least(c, "pad_w", 0, 0);
    if (is_pool(c.kind)) {
        // A window entirely in the padding would have no input to pool.
        TESSERA_CHECK(2 * g.ph <= g.kh && 2 * g.pw <= g.kw, c.who(), ": padding (", g.ph, ", ", g.pw,
                      ") must be at most half the kernel (", g.kh, ", ", g.kw, ")");
    }
    return g;
}

// Output extent of a window sweep over `in` rows; errors name the dimension.
int64_t out_extent(const OpCall &c, const char *dim, int64_t in, int64_t k, int64_t pad, int64_t stride) {
    TESSERA_CHECK(in + 2 * pad >= k, c.who(), ": the input ", dim, " ", in, " with padding ", pad,
                  " on each side is smaller than the kernel ", dim, " ", k, "; the output would be empty");
    return (in + 2 * pad - k) / stride + 1;
}

// Output [N, C, OH, OW] of a window sweep over input shape [N, C, H, W].
Shape swept(const OpCall &c, const Shape &in, int64_t channels, const Window &g) {
    return {in[0], channels, out_extent(c, "height", in[2], g.kh, g.ph, g.sh),
            out_extent(c, "width", in[3], g.kw, g.pw, g.sw)};
}

void expect_dy_shape(const OpCall &c, const Shape &dy, const Shape &want, const char *why) {
    TESSERA_CHECK(dy == want, c.who(), ": dy has shape ", shape_str(dy), " but ", why, " gives ",
                  shape_str(want));
}

int64_t required_extent(const OpCall &c, const char *name) { return int_at_least(c, name, 1); }

// The window of an operator whose kernel extents are attributes (checked in order,
// so that a missing kernel_h is reported before kernel_w).
Window kernel_window(const OpCall &c) {
    int64_t kh = required_extent(c, "kernel_h");
    int64_t kw = required_extent(c, "kernel_w");
    return window_attrs(c, kh, kw);
}

}  // namespace

std::vector<TensorType> infer_conv(const OpCall &c, const std::vector<TensorType> &in) {
    switch (c.kind) {
    case OpKind::Conv2d: {
        expect_dtype(c, in, 0, "x", DType::F32);
        expect_dtype(c, in, 1, "w", DType::F32);
        expect_rank(c, in, 0, "x", 4);
        expect_rank(c, in, 1, "w", 4);
        const Shape &x = in[0].shape, &w = in[1].shape;
        TESSERA_CHECK(x[1] == w[1], c.who(), ": input has ", x[1], " channels but the weight expects ", w[1]);
        Window g = window_attrs(c, w[2], w[3]);
        return {{DType::F32, swept(c, x, w[0], g)}};
    }
    case OpKind::Conv2dGradInput: {
        expect_dtype(c, in, 0, "dy", DType::F32);
        expect_dtype(c, in, 1, "w", DType::F32);
        expect_rank(c, in, 0, "dy", 4);
        expect_rank(c, in, 1, "w", 4);
        const Shape &dy = in[0].shape, &w = in[1].shape;
        TESSERA_CHECK(dy[1] == w[0], c.who(), ": dy has ", dy[1], " channels but the weight has ", w[0],
                      " output channels");
        Window g = window_attrs(c, w[2], w[3]);
        Shape x = {dy[0], w[1], required_extent(c, "in_h"), required_extent(c, "in_w")};
        expect_dy_shape(c, dy, swept(c, x, w[0], g), "the convolution of an input of height in_h and width in_w");
        return {{DType::F32, x}};
    }
    case OpKind::Conv2dGradWeight: {
        expect_dtype(c, in, 0, "dy", DType::F32);
        expect_dtype(c, in, 1, "x", DType::F32);
        expect_rank(c, in, 0, "dy", 4);
        expect_rank(c, in, 1, "x", 4);
        const Shape &dy = in[0].shape, &x = in[1].shape;
        Window g = kernel_window(c);
        expect_dy_shape(c, dy, swept(c, x, dy[1], g), "the convolution of x with kernel_h and kernel_w");
        return {{DType::F32, {dy[1], x[1], g.kh, g.kw}}};
    }
    case OpKind::MaxPool2d:
    case OpKind::AvgPool2d: {
        expect_dtype(c, in, 0, "x", DType::F32);
        expect_rank(c, in, 0, "x", 4);
        Window g = kernel_window(c);
        return {{DType::F32, swept(c, in[0].shape, in[0].shape[1], g)}};
    }
    case OpKind::MaxPool2dGrad: {
        expect_dtype(c, in, 0, "dy", DType::F32);
        expect_dtype(c, in, 1, "x", DType::F32);
        expect_rank(c, in, 0, "dy", 4);
        expect_rank(c, in, 1, "x", 4);
        Window g = kernel_window(c);
        expect_dy_shape(c, in[0].shape, swept(c, in[1].shape, in[1].shape[1], g), "pooling x");
        return {in[1]};
    }
    case OpKind::AvgPool2dGrad: {
        expect_dtype(c, in, 0, "dy", DType::F32);
        expect_rank(c, in, 0, "dy", 4);
        const Shape &dy = in[0].shape;
        Window g = kernel_window(c);
        Shape x = {dy[0], dy[1], required_extent(c, "in_h"), required_extent(c, "in_w")};
        expect_dy_shape(c, dy, swept(c, x, dy[1], g), "pooling an input of height in_h and width in_w");
        return {{DType::F32, x}};
    }
    case OpKind::GlobalAvgPool:
        expect_dtype(c, in, 0, "x", DType::F32);
        expect_rank(c, in, 0, "x", 4);
        return {{DType::F32, {in[0].shape[0], in[0].shape[1]}}};
    case OpKind::GlobalAvgPoolGrad:
        expect_dtype(c, in, 0, "dy", DType::F32);
        expect_rank(c, in, 0, "dy", 2);
        return {{DType::F32, {in[0].shape[0], in[0].shape[1], required_extent(c, "in_h"),
                              required_extent(c, "in_w")}}};
    default: TESSERA_INTERNAL_ASSERT(false, c.who(), " is not a conv-family operator");
    }
}

// One description variant per operator: every window attribute is a scalar.
StructMap structural_conv(const OpCall &, const std::vector<TensorType> &) { return {}; }

void fill_defaults_conv(OpCall &c) {
    if (is_global(c.kind)) return;
    auto set_default = [&](const char *name, int64_t v) {
        if (!c.attrs.has(name)) c.attrs.set(name, v);
    };
    if (is_pool(c.kind)) {
        // Pooling strides default to the kernel; without a kernel there is nothing
        // to default to, and shape inference reports the missing attribute.
        if (c.attrs.has("kernel_h")) set_default("stride_h", c.attrs.get_int(c.who(), "kernel_h"));
        if (c.attrs.has("kernel_w")) set_default("stride_w", c.attrs.get_int(c.who(), "kernel_w"));
    } else {
        set_default("stride_h", 1);
        set_default("stride_w", 1);
    }
    set_default("pad_h", 0);
    set_default("pad_w", 0);
}

void run_conv(const OpCall &call, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    // Every integer attribute (defaults filled) is offered; each kernel takes the
    // ones its description names.
    OpCall c = with_defaults(call);
    Scalars s;
    for (const auto &[name, v] : c.attrs.values())
        if (auto *i = std::get_if<int64_t>(&v)) s.set(name, static_cast<double>(*i));
    std::vector<KernelArg> args;
    for (const TensorRef &t : in) args.push_back({t, {}});
    call_kernel(std::string("tk_") + op_name(c.kind), args, s, {{out[0], {}}});
}

}  // namespace tessera::lang
