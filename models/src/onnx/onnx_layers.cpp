// ONNX layers that become graph nodes: 2-D convolution and pooling (their
// windows checked against what lang/'s operators take), batch and layer
// normalisation.
#include <cmath>

#include "importer.h"

namespace tessera::onnx_import {

namespace {

const std::string &node_name(const onnx::NodeProto &n) { return n.name().empty() ? n.op_type() : n.name(); }

// A 2-D window: kernel, stride and symmetric padding per spatial axis.
struct Window {
    int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
};

// Reads kernel_shape (or the weight's), strides, pads and dilations, and
// rejects what lang/'s conv2d and pooling do not take.
Window read_window(const NodeAttrs &a, const std::vector<int64_t> &kernel) {
    if (kernel.size() != 2) a.unsupported("kernel_shape", ints_str(kernel), "supported: 2-D windows [kh, kw]");
    if (a.s("auto_pad", "NOTSET") != "NOTSET")
        a.unsupported("auto_pad", a.s("auto_pad", ""), "supported: NOTSET with explicit pads");
    const std::vector<int64_t> strides = a.ints("strides", {1, 1}), pads = a.ints("pads", {0, 0, 0, 0});
    const std::vector<int64_t> dilations = a.ints("dilations", {1, 1});
    if (dilations != std::vector<int64_t>{1, 1}) a.unsupported("dilations", ints_str(dilations), "supported: [1, 1]");
    if (strides.size() != 2) a.unsupported("strides", ints_str(strides), "supported: [sh, sw]");
    if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3])
        a.unsupported("pads", ints_str(pads), "supported: symmetric padding [ph, pw, ph, pw]");
    // lang/ checks the window's values; beyond the bound on a tensor's
    // elements, a pad would overflow the padded extent it computes.
    if (pads[0] > kMaxTensorElements || pads[1] > kMaxTensorElements)
        a.unsupported("pads", ints_str(pads), "pads are at most ", kMaxTensorElements);
    return {kernel[0], kernel[1], strides[0], strides[1], pads[0], pads[1]};
}

Attrs window_attrs(const Window &w, bool with_kernel) {
    Attrs at{{"stride_h", w.sh}, {"stride_w", w.sw}, {"pad_h", w.ph}, {"pad_w", w.pw}};
    if (with_kernel) at.set("kernel_h", w.kh).set("kernel_w", w.kw);
    return at;
}

void conv(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
    Tensor x = im.tensor(n, 0), w = im.tensor(n, 1);
    if (x.rank() != 4 || w.rank() != 4)
        im.fail(n, "only 2-D convolutions (input [N, C, H, W]) are supported; the input is ", shape_str(x.shape()));
    if (a.i("group", 1) != 1) a.unsupported("group", std::to_string(a.i("group", 1)), "supported: 1");
    const std::vector<int64_t> kernel = a.ints("kernel_shape", {w.dim(2), w.dim(3)});
    if (kernel != std::vector<int64_t>{w.dim(2), w.dim(3)})
        a.unsupported("kernel_shape", ints_str(kernel), "it must be the weight's, [", w.dim(2), ", ", w.dim(3), "]");
    const Window win = read_window(a, kernel);
    Tensor y = im.b().op1(OpKind::Conv2d, {x, w}, window_attrs(win, false), node_name(n));
    if (Importer::given(n, 2)) y = im.b().bias_add(y, im.tensor(n, 2), 1);
    im.set(n, 0, y);
}

void pool(Importer &im, const onnx::NodeProto &n, OpKind kind) {
    const bool max = kind == OpKind::MaxPool2d;
    std::set<std::string> known = {"auto_pad", "ceil_mode", "kernel_shape", "pads", "strides"};
    known.insert(max ? "dilations" : "count_include_pad");
    if (max) known.insert("storage_order");
    NodeAttrs a(im, n, known);
    if (a.i("ceil_mode", 0) != 0) a.unsupported("ceil_mode", std::to_string(a.i("ceil_mode", 0)), "supported: 0");
    if (a.i("storage_order", 0) != 0)
        a.unsupported("storage_order", std::to_string(a.i("storage_order", 0)), "supported: 0");
    const Window win = read_window(a, a.ints("kernel_shape", {}));
    if (!max && (win.ph || win.pw) && a.i("count_include_pad", 0) != 1)
        a.unsupported("count_include_pad", std::to_string(a.i("count_include_pad", 0)),
                      "with padding, Tessera's avg_pool2d counts the padding (count_include_pad=1)");
    if (max) im.mark_unsupported_outputs(n, 1, "(max pooling's indices) Tessera does not produce");
    Tensor x = im.tensor(n, 0);
    if (x.rank() != 4) im.fail(n, "only 2-D pooling (input [N, C, H, W]) is supported; the input is ", shape_str(x.shape()));
    im.set(n, 0, im.b().op1(kind, {x}, window_attrs(win, true), node_name(n)));
}

void global_average_pool(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    Tensor x = im.tensor(n, 0);
    if (x.rank() != 4) im.fail(n, "only [N, C, H, W] inputs are supported; the input is ", shape_str(x.shape()));
    Tensor y = im.b().op1(OpKind::GlobalAvgPool, {x}, {}, node_name(n));
    im.set(n, 0, im.b().reshape(y, {x.dim(0), x.dim(1), 1, 1}));
}

// Training-mode batch normalisation: batch statistics, as lang's batch_norm,
// and the running statistics updated in place as PyTorch does. ONNX's momentum
// weighs the old running value (PyTorch's 0.1 exports as 0.9, a float), so
// lang's is 1 - it, rounded to 7 places to undo the float.
void batch_normalization(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"epsilon", "momentum", "training_mode"});
    if (a.i("training_mode", 0) != 1)
        a.unsupported("training_mode", std::to_string(a.i("training_mode", 0)),
                      "Tessera trains with batch statistics; export in training mode "
                      "(torch.onnx.export(..., training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False))");
    const double onnx_momentum = a.f("momentum", 0.9);
    if (!(onnx_momentum >= 0 && onnx_momentum < 1))
        a.unsupported("momentum", std::to_string(onnx_momentum),
                      "supported: 0 <= momentum < 1 (the weight of the old running statistics)");
    im.mark_unsupported_outputs(n, 1, "(a running statistic) Tessera updates in place rather than outputs");
    Tensor x = im.tensor(n, 0);
    const std::string name = node_name(n);
    im.set(n, 0, im.b().op1(OpKind::BatchNorm, {x, im.tensor(n, 1), im.tensor(n, 2)}, {{"eps", a.f("epsilon", 1e-5)}},
                            name));
    Tensor mean = im.tensor(n, 3), var = im.tensor(n, 4);
    auto role = [](Tensor t) { return t.graph->tensor(t.id).role; };
    if (role(mean) != TensorRole::OptState || role(var) != TensorRole::OptState)
        im.fail(n, "its running statistics (inputs 3 and 4) must be initializers, as torch.onnx.export writes them");
    const double momentum = std::round((1.0 - onnx_momentum) * 1e7) / 1e7;
    im.b().track_running_statistics(x, mean, var, momentum, name + ".running_stats");
}

void layer_normalization(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"axis", "epsilon", "stash_type"});
    Tensor x = im.tensor(n, 0);
    if (normalise_axis(im, n, a.i("axis", -1), x.shape().size()) != x.rank() - 1)
        a.unsupported("axis", std::to_string(a.i("axis", -1)), "supported: the last axis (-1)");
    if (!Importer::given(n, 2)) im.fail(n, "has no bias input; supported: LayerNormalization with scale and bias");
    im.mark_unsupported_outputs(n, 1, "(the mean or inverse deviation) Tessera does not produce");
    im.set(n, 0, im.b().op1(OpKind::LayerNorm, {x, im.tensor(n, 1), im.tensor(n, 2)}, {{"eps", a.f("epsilon", 1e-5)}},
                            node_name(n)));
}

}  // namespace

void add_layer_ops(std::map<std::string, OpHandler> &ops) {
    ops["Conv"] = conv;
    ops["MaxPool"] = [](Importer &im, const onnx::NodeProto &n) { pool(im, n, OpKind::MaxPool2d); };
    ops["AveragePool"] = [](Importer &im, const onnx::NodeProto &n) { pool(im, n, OpKind::AvgPool2d); };
    ops["GlobalAveragePool"] = global_average_pool;
    ops["BatchNormalization"] = batch_normalization;
    ops["LayerNormalization"] = layer_normalization;
}

}  // namespace tessera::onnx_import
