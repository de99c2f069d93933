// ONNX operators that become graph nodes: element-wise arithmetic with
// broadcasting, matrix products, and layout (reshape, transpose, concat,
// slice, split, gather). Layers (convolution, pooling, normalisation) are in
// onnx_layers.cpp.
#include <functional>
#include <numeric>

#include "importer.h"
#include "tessera/models/onnx_import.h"
#include "zoo_internal.h"

namespace tessera::onnx_import {

namespace {

const std::string &node_name(const onnx::NodeProto &n) { return n.name().empty() ? n.op_type() : n.name(); }

bool is_scalar(const Const &c) { return c.elements() == 1; }

// `t` repeated to `to`: its shape, less leading 1s, must be a suffix of `to`;
// each missing leading axis is a broadcast node.
Tensor broadcast_to(Importer &im, const onnx::NodeProto &n, Tensor t, const Shape &to) {
    Shape s = t.shape();
    while (!s.empty() && s.front() == 1 && s.size() >= 1) s.erase(s.begin());
    const bool suffix = s.size() <= to.size() && std::equal(s.begin(), s.end(), to.end() - static_cast<long>(s.size()));
    if (!suffix)
        im.fail(n, "broadcasting ", shape_str(t.shape()), " to ", shape_str(to), " is not supported; an operand ",
                "computed by the graph may broadcast only along leading axes (e.g. [T, D] to [B, T, D])");
    if (s != t.shape()) t = s.empty() ? im.b().reshape(t, {1}) : im.b().reshape(t, s);
    if (s.empty()) s = {1};
    for (size_t k = to.size() - s.size(); k-- > 0;) t = im.b().broadcast(t, 0, to[k]);
    return t.shape() == to ? t : im.b().reshape(t, to);
}

// Input i as a tensor of shape `to`: a constant is broadcast at import.
Tensor operand(Importer &im, const onnx::NodeProto &n, int i, const Shape &to) {
    if (im.is_constant(n, i)) {
        const Const &c = im.constant(n, i);
        if (c.shape == to) return im.tensor(n, i);
        im.check_folded(n, to);
        return im.materialise(broadcast_const(c, to), n.input(i));
    }
    Tensor t = im.tensor(n, i);
    return t.shape() == to ? t : broadcast_to(im, n, t, to);
}

Shape shape_of(Importer &im, const onnx::NodeProto &n, int i) {
    return im.is_constant(n, i) ? im.constant(n, i).shape : im.tensor(n, i).shape();
}

void binary(Importer &im, const onnx::NodeProto &n, OpKind kind) {
    NodeAttrs a(im, n, {});
    const Shape out = broadcast_shapes(im, n, shape_of(im, n, 0), shape_of(im, n, 1));
    // x + b with a bias b [C] along the last axis: one bias_add, as a Linear layer's.
    for (int i = 0; i < 2 && kind == OpKind::Add; i++) {
        if (im.is_constant(n, i) || im.is_constant(n, 1 - i)) continue;
        Tensor bias = im.tensor(n, i), x = im.tensor(n, 1 - i);
        if (bias.rank() == 1 && x.shape() == out && x.rank() >= 2 && bias.dim(0) == out.back())
            return im.set(n, 0, im.b().bias_add(x, bias, -1));
    }
    im.set(n, 0, im.b().op1(kind, {operand(im, n, 0, out), operand(im, n, 1, out)}, {}, node_name(n)));
}

void mul(Importer &im, const onnx::NodeProto &n) {
    for (int i = 0; i < 2; i++)
        if (im.is_constant(n, i) && is_scalar(im.constant(n, i)) && !im.is_constant(n, 1 - i)) {
            NodeAttrs a(im, n, {});
            return im.set(n, 0, im.b().scale(im.tensor(n, 1 - i), im.constant(n, i).v[0]));
        }
    binary(im, n, OpKind::Mul);
}

void div(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    if (!im.is_constant(n, 1))
        im.fail(n, "division by '", n.input(1), "', which the graph computes, is not supported; only division by ",
                "a constant (lang/ has no division operator)");
    Const c = im.constant(n, 1);
    for (double &x : c.v) {
        if (x == 0) im.fail(n, "divides by a constant that holds 0");
        x = 1.0 / x;
    }
    if (is_scalar(c)) return im.set(n, 0, im.b().scale(im.tensor(n, 0), c.v[0]));
    Tensor x = im.tensor(n, 0);
    const Shape out = broadcast_shapes(im, n, x.shape(), c.shape);
    im.check_folded(n, out);
    im.set(n, 0, im.b().mul(operand(im, n, 0, out), im.materialise(broadcast_const(c, out), n.input(1))));
}

void pow(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    const double p = im.scalar(n, 1);
    if (p != 1 && p != 2 && p != 3)
        im.fail(n, "exponent ", p, " is not supported; supported exponents: constants 1, 2 and 3");
    Tensor x = im.tensor(n, 0), y = x;
    for (int k = 1; k < static_cast<int>(p); k++) y = im.b().mul(y, x);
    im.set(n, 0, y);
}

void unary(Importer &im, const onnx::NodeProto &n, OpKind kind) {
    NodeAttrs a(im, n, {});
    im.set(n, 0, im.b().op1(kind, {im.tensor(n, 0)}, {}, node_name(n)));
}

void softmax(Importer &im, const onnx::NodeProto &n, OpKind kind) {
    NodeAttrs a(im, n, {"axis"});
    Tensor x = im.tensor(n, 0);
    if (normalise_axis(im, n, a.i("axis", -1), x.shape().size()) != x.rank() - 1)
        a.unsupported("axis", std::to_string(a.i("axis", -1)), "supported: the last axis (-1)");
    im.set(n, 0, im.b().op1(kind, {x}, {}, node_name(n)));
}

// [..., M, K] x [K, N] or batched [B..., M, K] x [B..., K, N].
Tensor matmul(Importer &im, const onnx::NodeProto &n, Tensor x, Tensor w) {
    if (x.rank() < 2 || w.rank() < 2) im.fail(n, "operands of rank below 2 are not supported");
    Shape out(x.shape().begin(), x.shape().end() - 1);
    out.push_back(w.dim(-1));
    if (w.rank() == 2) {
        Tensor x2 = x.rank() == 2 ? x : im.b().reshape(x, {num_elements(x.shape()) / x.dim(-1), x.dim(-1)});
        Tensor y = im.b().matmul(x2, w);
        return x.rank() == 2 ? y : im.b().reshape(y, out);
    }
    if (!std::equal(x.shape().begin(), x.shape().end() - 2, w.shape().begin(), w.shape().end() - 2) ||
        x.rank() != w.rank())
        im.fail(n, "batched operands ", shape_str(x.shape()), " and ", shape_str(w.shape()),
                " must have the same batch dimensions");
    const int64_t batch = num_elements(Shape(x.shape().begin(), x.shape().end() - 2));
    Tensor y = im.b().batch_matmul(x.rank() == 3 ? x : im.b().reshape(x, {batch, x.dim(-2), x.dim(-1)}),
                                   w.rank() == 3 ? w : im.b().reshape(w, {batch, w.dim(-2), w.dim(-1)}));
    return x.rank() == 3 ? y : im.b().reshape(y, out);
}

void matmul_op(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    im.set(n, 0, matmul(im, n, im.tensor(n, 0), im.tensor(n, 1)));
}

// Y = A' B' + C, with A' = A or A^T and B' = B or B^T: PyTorch's Linear is
// Gemm(x, weight [out, in], bias, transB=1), and the weight stays [out, in].
void gemm(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"alpha", "beta", "transA", "transB"});
    if (a.f("alpha", 1) != 1) a.unsupported("alpha", std::to_string(a.f("alpha", 1)), "supported: 1");
    if (a.f("beta", 1) != 1) a.unsupported("beta", std::to_string(a.f("beta", 1)), "supported: 1");
    Tensor y = im.b().op1(OpKind::Matmul, {im.tensor(n, 0), im.tensor(n, 1)},
                          {{"transpose_a", a.i("transA", 0)}, {"transpose_b", a.i("transB", 0)}}, node_name(n));
    if (Importer::given(n, 2)) {
        const Shape c = shape_of(im, n, 2);
        if (c.size() == 1 && c[0] == y.dim(1) && !im.is_constant(n, 2)) y = im.b().bias_add(y, im.tensor(n, 2), -1);
        else y = im.b().add(y, operand(im, n, 2, y.shape()));
    }
    im.set(n, 0, y);
}

void reshape(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"allowzero"});
    if (a.i("allowzero", 0) != 0) a.unsupported("allowzero", std::to_string(a.i("allowzero", 0)), "supported: 0");
    Tensor x = im.tensor(n, 0);
    const Shape to = reshape_target(im, n, x.shape(), im.ints(n, 1));
    im.set(n, 0, to == x.shape() ? x : im.b().reshape(x, to));
}

void flatten(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"axis"});
    Tensor x = im.tensor(n, 0);
    const int64_t axis = a.i("axis", 1) < 0 ? a.i("axis", 1) + x.rank() : a.i("axis", 1);
    if (axis < 0 || axis > x.rank()) a.unsupported("axis", std::to_string(a.i("axis", 1)), "it must lie in [-rank, rank]");
    const Shape to = {num_elements(Shape(x.shape().begin(), x.shape().begin() + axis)),
                      num_elements(Shape(x.shape().begin() + axis, x.shape().end()))};
    im.set(n, 0, to == x.shape() ? x : im.b().reshape(x, to));
}

// Unsqueeze and Squeeze of graph tensors: reshapes, with the axes folded.
void unsqueeze(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    Tensor x = im.tensor(n, 0);
    Shape s = x.shape();
    for (int64_t ax : unsqueeze_axes(im, n, s.size())) s.insert(s.begin() + ax, 1);
    im.set(n, 0, im.b().reshape(x, s));
}

void squeeze(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    Tensor x = im.tensor(n, 0);
    const Shape s = squeezed(im, n, x.shape());
    im.set(n, 0, s == x.shape() ? x : im.b().reshape(x, s.empty() ? Shape{1} : s));
}

void transpose(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"perm"});
    Tensor x = im.tensor(n, 0);
    std::vector<int64_t> identity(static_cast<size_t>(x.rank())), perm;
    std::iota(identity.begin(), identity.end(), 0);
    perm = a.ints("perm", std::vector<int64_t>(identity.rbegin(), identity.rend()));
    im.set(n, 0, perm == identity ? x : im.b().permute(x, perm));
}

void concat(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"axis"});
    std::vector<Tensor> parts;
    for (int i = 0; i < n.input_size(); i++) parts.push_back(im.tensor(n, i));
    const int axis = normalise_axis(im, n, a.i("axis", 0), parts[0].shape().size());
    im.set(n, 0, parts.size() == 1 ? parts[0] : zoo::concat_all(im.b(), parts, axis));
}

void slice(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    Tensor x = im.tensor(n, 0);
    for (const SliceRange &r : slice_ranges(im, n, x.shape()))
        if (r.start != 0 || r.end != x.dim(r.axis)) x = im.b().slice(x, r.axis, r.start, r.end);
    im.set(n, 0, x);
}

void split(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"axis"});
    Tensor x = im.tensor(n, 0);
    const int axis = normalise_axis(im, n, a.i("axis", 0), x.shape().size());
    if (n.output_size() == 0) im.fail(n, "has no outputs");
    std::vector<int64_t> sizes(static_cast<size_t>(n.output_size()), x.dim(axis) / n.output_size());
    if (Importer::given(n, 1)) sizes = im.ints(n, 1);
    if (sizes.size() != static_cast<size_t>(n.output_size()))
        im.fail(n, "split sizes ", ints_str(sizes), " are ", sizes.size(), " for ", n.output_size(), " outputs");
    int64_t total = 0;
    for (int64_t size : sizes) {
        if (size < 1 || size > x.dim(axis) - total)
            im.fail(n, "split sizes ", ints_str(sizes), " do not divide extent ", x.dim(axis), " of ",
                    shape_str(x.shape()), " into positive parts");
        total += size;
    }
    if (total != x.dim(axis)) im.fail(n, "split sizes ", ints_str(sizes), " do not add up to ", x.dim(axis));
    int64_t start = 0;
    for (size_t i = 0; i < sizes.size(); i++) {
        im.set(n, static_cast<int>(i), im.b().slice(x, axis, start, start + sizes[i]));
        start += sizes[i];
    }
}

// Whether c holds k, k+1, ..., k+m-1: a slice rather than a lookup.
bool consecutive(const Const &c) {
    for (int64_t i = 1; i < c.elements(); i++)
        if (c.v[static_cast<size_t>(i)] != c.v[0] + static_cast<double>(i)) return false;
    return c.elements() > 0 && c.v[0] >= 0;
}

// Embedding lookups: Gather(table, ids) along axis 0.
void gather(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"axis"});
    Tensor data = im.tensor(n, 0);
    const int axis = normalise_axis(im, n, a.i("axis", 0), data.shape().size());
    if (im.is_constant(n, 1) && consecutive(im.constant(n, 1))) {
        const Const &idx = im.constant(n, 1);
        const int64_t first = im.ints(n, 1)[0];
        if (first > data.dim(axis) - idx.elements())
            im.fail(n, "indices from ", first, " (", idx.elements(), " of them) are out of range for extent ",
                    data.dim(axis));
        Tensor y = im.b().slice(data, axis, first, first + idx.elements());
        Shape s(data.shape().begin(), data.shape().begin() + axis);
        s.insert(s.end(), idx.shape.begin(), idx.shape.end());
        s.insert(s.end(), data.shape().begin() + axis + 1, data.shape().end());
        return im.set(n, 0, s == y.shape() ? y : im.b().reshape(y, s.empty() ? Shape{1} : s));
    }
    if (axis != 0) a.unsupported("axis", std::to_string(axis), "a lookup by computed indices supports axis 0");
    Tensor ids = im.tensor(n, 1);
    if (ids.type().dtype != DType::I32) im.fail(n, "indices '", n.input(1), "' are not integers");
    im.set(n, 0, im.b().op1(OpKind::Embedding, {data, ids}, {}, node_name(n)));
}

void identity(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    im.set(n, 0, im.tensor(n, 0));
}

void cast(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"to"});
    Tensor x = im.tensor(n, 0);
    const int64_t to = a.i("to", 0);
    const bool to_float = to == onnx::TensorProto::FLOAT, to_int = to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32;
    if ((x.type().dtype == DType::F32 && !to_float) || (x.type().dtype == DType::I32 && !to_int))
        a.unsupported("to", std::to_string(to), "a cast of a graph tensor must keep it float (1) or integer (6, 7)");
    im.set(n, 0, x);
}

// Dropout in training mode with a positive ratio is lang's dropout, whose
// mask is a hash of (seed, index): the same in every run, not PyTorch's.
void dropout(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"seed"});
    im.mark_unsupported_outputs(n, 1, "(the dropout mask) Tessera does not produce");
    const double ratio = Importer::given(n, 1) ? im.scalar(n, 1) : 0.5;
    const bool training = Importer::given(n, 2) && im.scalar(n, 2) != 0;
    Tensor x = im.tensor(n, 0);
    if (!training || ratio == 0) return im.set(n, 0, x);
    const int64_t seed = a.i("seed", static_cast<int64_t>(std::hash<std::string>()(node_name(n)) & 0x7fffffff));
    im.set(n, 0, im.b().dropout(x, ratio, seed));
}

}  // namespace

const std::map<std::string, OpHandler> &graph_ops() {
    static const std::map<std::string, OpHandler> ops = [] {
        std::map<std::string, OpHandler> m = {
            {"Add", [](Importer &im, const onnx::NodeProto &n) { binary(im, n, OpKind::Add); }},
            {"Sub", [](Importer &im, const onnx::NodeProto &n) { binary(im, n, OpKind::Sub); }},
            {"Mul", mul},
            {"Div", div},
            {"Pow", pow},
            {"Relu", [](Importer &im, const onnx::NodeProto &n) { unary(im, n, OpKind::Relu); }},
            {"Tanh", [](Importer &im, const onnx::NodeProto &n) { unary(im, n, OpKind::Tanh); }},
            {"Sigmoid", [](Importer &im, const onnx::NodeProto &n) { unary(im, n, OpKind::Sigmoid); }},
            {"Erf", [](Importer &im, const onnx::NodeProto &n) { unary(im, n, OpKind::Erf); }},
            {"Softmax", [](Importer &im, const onnx::NodeProto &n) { softmax(im, n, OpKind::Softmax); }},
            {"LogSoftmax", [](Importer &im, const onnx::NodeProto &n) { softmax(im, n, OpKind::LogSoftmax); }},
            {"MatMul", matmul_op},
            {"Gemm", gemm},
            {"Reshape", reshape},
            {"Flatten", flatten},
            {"Unsqueeze", unsqueeze},
            {"Squeeze", squeeze},
            {"Transpose", transpose},
            {"Concat", concat},
            {"Slice", slice},
            {"Split", split},
            {"Gather", gather},
            {"Identity", identity},
            {"Cast", cast},
            {"Dropout", dropout},
        };
        add_layer_ops(m);
        return m;
    }();
    return ops;
}

}  // namespace tessera::onnx_import

namespace tessera {

std::vector<std::string> onnx_supported_operators() {
    std::set<std::string> names;
    for (const auto &[name, f] : onnx_import::graph_ops()) names.insert(name);
    for (const auto &[name, f] : onnx_import::fold_ops()) names.insert(name);
    return {names.begin(), names.end()};
}

}  // namespace tessera
