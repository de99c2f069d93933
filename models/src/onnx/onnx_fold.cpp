// Constant folding: operators evaluated at import when their inputs are known,
// which is how PyTorch's shape computations (Shape, Gather, Unsqueeze, Concat,
// then Reshape) become plain attributes of the graph.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "importer.h"

namespace tessera::onnx_import {

int normalise_axis(const Importer &im, const onnx::NodeProto &n, int64_t axis, size_t rank) {
    const int64_t r = static_cast<int64_t>(rank);
    if (axis < -r || axis >= r) im.fail(n, "axis ", axis, " is out of range for rank ", rank);
    return static_cast<int>(axis < 0 ? axis + r : axis);
}

Shape reshape_target(const Importer &im, const onnx::NodeProto &n, const Shape &in, const std::vector<int64_t> &spec) {
    Shape out;
    int infer = -1;
    for (size_t d = 0; d < spec.size(); d++) {
        if (spec[d] == 0) {
            if (d >= in.size()) im.fail(n, "shape ", ints_str(spec), " copies dimension ", d, " of a rank-", in.size(),
                                        " input");
            out.push_back(in[d]);
        } else if (spec[d] < -1) {
            im.fail(n, "shape ", ints_str(spec), " has the extent ", spec[d], "; extents are positive, 0 (copy) or -1 ",
                    "(infer)");
        } else if (spec[d] == -1) {
            if (infer >= 0) im.fail(n, "shape ", ints_str(spec), " has more than one -1");
            infer = static_cast<int>(d);
            out.push_back(1);
        } else {
            out.push_back(spec[d]);
        }
    }
    const int64_t total = num_elements(in);
    const int64_t known = checked_elements(out, std::numeric_limits<int64_t>::max(), false,
                                           "ONNX model '" + im.path() + "': " + Importer::label(n) + ": the target");
    if (infer >= 0 && known > 0 && total % known == 0) out[static_cast<size_t>(infer)] = total / known;
    if (num_elements(out) != total)
        im.fail(n, "cannot reshape ", shape_str(in), " to ", ints_str(spec), " (", total, " elements)");
    return out;
}

std::vector<SliceRange> slice_ranges(const Importer &im, const onnx::NodeProto &n, const Shape &in) {
    const std::vector<int64_t> starts = im.ints(n, 1), ends = im.ints(n, 2);
    std::vector<int64_t> axes(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
    if (Importer::given(n, 3)) axes = im.ints(n, 3);
    if (Importer::given(n, 4))
        for (int64_t step : im.ints(n, 4))
            if (step != 1) im.fail(n, "steps ", ints_str(im.ints(n, 4)), " are not supported (only 1)");
    if (ends.size() != starts.size() || axes.size() != starts.size())
        im.fail(n, "starts, ends and axes differ in length");
    std::vector<SliceRange> out;
    for (size_t i = 0; i < starts.size(); i++) {
        const int axis = normalise_axis(im, n, axes[i], in.size());
        const int64_t extent = in[static_cast<size_t>(axis)];
        auto clamp = [extent](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + extent : v, 0, extent); };
        out.push_back({axis, clamp(starts[i]), std::max(clamp(starts[i]), clamp(ends[i]))});
    }
    return out;
}

std::vector<int64_t> unsqueeze_axes(const Importer &im, const onnx::NodeProto &n, size_t rank) {
    std::vector<int64_t> axes = im.ints(n, 1);
    for (int64_t &x : axes) x = normalise_axis(im, n, x, rank + axes.size());
    std::sort(axes.begin(), axes.end());
    if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
        im.fail(n, "axes ", ints_str(im.ints(n, 1)), " name an axis twice");
    return axes;
}

Shape squeezed(const Importer &im, const onnx::NodeProto &n, const Shape &in) {
    std::vector<int64_t> axes;
    if (Importer::given(n, 1))
        for (int64_t x : im.ints(n, 1)) axes.push_back(normalise_axis(im, n, x, in.size()));
    Shape kept;
    for (size_t d = 0; d < in.size(); d++) {
        const bool listed = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
        if (listed && in[d] != 1)
            im.fail(n, "axis ", d, " of ", shape_str(in), " has extent ", in[d], "; only axes of extent 1 squeeze");
        if (!(axes.empty() ? in[d] == 1 : listed)) kept.push_back(in[d]);
    }
    return kept;
}

namespace {

void fold_constant(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"value", "value_float", "value_floats", "value_int", "value_ints"});
    if (const auto *t = a.get("value")) return im.set(n, 0, const_from_proto(t->t(), Importer::label(n)));
    if (a.has("value_float")) return im.set(n, 0, Const{true, {}, {a.f("value_float", 0)}});
    if (a.has("value_int")) return im.set(n, 0, Const{false, {}, {static_cast<double>(a.i("value_int", 0))}});
    if (const auto *f = a.get("value_floats"))
        return im.set(n, 0, Const{true, {f->floats_size()}, {f->floats().begin(), f->floats().end()}});
    if (const auto *v = a.get("value_ints")) {
        std::vector<double> vals(v->ints().begin(), v->ints().end());
        return im.set(n, 0, Const{false, {v->ints_size()}, vals});
    }
    im.fail(n, "has no value attribute; supported: value, value_float(s), value_int(s)");
}

Shape shape_of(Importer &im, const onnx::NodeProto &n) {
    return im.is_constant(n, 0) ? im.constant(n, 0).shape : im.tensor(n, 0).shape();
}

void fold_shape(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"start", "end"});
    const Shape s = shape_of(im, n);
    const int64_t r = static_cast<int64_t>(s.size());
    auto clamp = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
    const int64_t lo = clamp(a.i("start", 0)), hi = clamp(a.i("end", r));
    Const c{false, {std::max<int64_t>(0, hi - lo)}, {}};
    for (int64_t d = lo; d < hi; d++) c.v.push_back(static_cast<double>(s[static_cast<size_t>(d)]));
    im.set(n, 0, std::move(c));
}

void fold_gather(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"axis"});
    const Const &data = im.constant(n, 0), &idx = im.constant(n, 1);
    const std::vector<int64_t> indices = im.ints(n, 1);
    const int axis = normalise_axis(im, n, a.i("axis", 0), data.shape.size());
    const int64_t outer = num_elements(Shape(data.shape.begin(), data.shape.begin() + axis));
    const int64_t extent = data.shape[static_cast<size_t>(axis)];
    const int64_t inner = num_elements(Shape(data.shape.begin() + axis + 1, data.shape.end()));
    Const out{data.is_float, Shape(data.shape.begin(), data.shape.begin() + axis), {}};
    out.shape.insert(out.shape.end(), idx.shape.begin(), idx.shape.end());
    out.shape.insert(out.shape.end(), data.shape.begin() + axis + 1, data.shape.end());
    im.check_folded(n, out.shape);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i : indices) {
            if (i < -extent || i >= extent) im.fail(n, "index ", i, " is out of range for extent ", extent);
            const int64_t at = (o * extent + (i < 0 ? i + extent : i)) * inner;
            out.v.insert(out.v.end(), data.v.begin() + at, data.v.begin() + at + inner);
        }
    im.set(n, 0, std::move(out));
}

void fold_unsqueeze(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    Const c = im.constant(n, 0);
    for (int64_t x : unsqueeze_axes(im, n, c.shape.size())) c.shape.insert(c.shape.begin() + x, 1);
    im.set(n, 0, std::move(c));
}

void fold_squeeze(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    Const c = im.constant(n, 0);
    c.shape = squeezed(im, n, c.shape);
    im.set(n, 0, std::move(c));
}

void fold_concat(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"axis"});
    const Const &first = im.constant(n, 0);
    const int axis = normalise_axis(im, n, a.i("axis", 0), first.shape.size());
    const int64_t outer = num_elements(Shape(first.shape.begin(), first.shape.begin() + axis));
    Const out{first.is_float, first.shape, {}};
    out.shape[static_cast<size_t>(axis)] = 0;
    for (int i = 0; i < n.input_size(); i++) {
        const Shape &s = im.constant(n, i).shape;
        Shape others = s;
        if (s.size() == first.shape.size()) others[static_cast<size_t>(axis)] = first.shape[static_cast<size_t>(axis)];
        if (others != first.shape)
            im.fail(n, "input ", i, " has shape ", shape_str(s), ", which does not join ", shape_str(first.shape),
                    " along axis ", axis);
        out.shape[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
        im.check_folded(n, out.shape);
    }
    for (int64_t o = 0; o < outer; o++)
        for (int i = 0; i < n.input_size(); i++) {
            const Const &c = im.constant(n, i);
            const int64_t block = c.elements() / std::max<int64_t>(1, outer);
            out.v.insert(out.v.end(), c.v.begin() + o * block, c.v.begin() + (o + 1) * block);
        }
    im.set(n, 0, std::move(out));
}

void fold_cast(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"to"});
    Const c = im.constant(n, 0);
    const int64_t to = a.i("to", onnx::TensorProto::FLOAT);
    c.is_float = to == onnx::TensorProto::FLOAT || to == onnx::TensorProto::DOUBLE;
    if (!c.is_float)
        for (double &x : c.v) x = std::trunc(x);
    im.set(n, 0, std::move(c));
}

template<typename F>
void fold_binary(Importer &im, const onnx::NodeProto &n, F f) {
    NodeAttrs a(im, n, {});
    const Const &x = im.constant(n, 0), &y = im.constant(n, 1);
    const Shape shape = broadcast_shapes(im, n, x.shape, y.shape);
    im.check_folded(n, shape);
    const Const bx = broadcast_const(x, shape), by = broadcast_const(y, shape);
    Const out{x.is_float || y.is_float, shape, std::vector<double>(bx.v.size())};
    for (size_t i = 0; i < out.v.size(); i++) out.v[i] = f(bx.v[i], by.v[i]);
    if (!out.is_float)
        for (double &v : out.v) v = std::trunc(v);
    im.set(n, 0, std::move(out));
}

void fold_reshape(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"allowzero"});
    Const c = im.constant(n, 0);
    c.shape = reshape_target(im, n, c.shape, im.ints(n, 1));
    im.set(n, 0, std::move(c));
}

void fold_slice(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    Const c = im.constant(n, 0);
    for (const SliceRange &r : slice_ranges(im, n, c.shape)) {
        const int64_t outer = num_elements(Shape(c.shape.begin(), c.shape.begin() + r.axis));
        const int64_t extent = c.shape[static_cast<size_t>(r.axis)];
        const int64_t inner = num_elements(Shape(c.shape.begin() + r.axis + 1, c.shape.end()));
        std::vector<double> v;
        for (int64_t o = 0; o < outer; o++)
            v.insert(v.end(), c.v.begin() + (o * extent + r.start) * inner, c.v.begin() + (o * extent + r.end) * inner);
        c.v = std::move(v);
        c.shape[static_cast<size_t>(r.axis)] = r.end - r.start;
    }
    im.set(n, 0, std::move(c));
}

void fold_constant_of_shape(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"value"});
    const Shape shape = im.ints(n, 0);
    im.check_folded(n, shape);
    Const fill{true, {}, {0.0}};
    if (const auto *t = a.get("value")) fill = const_from_proto(t->t(), Importer::label(n));
    if (fill.elements() != 1) im.fail(n, "value has shape ", shape_str(fill.shape), "; it must hold one value");
    im.set(n, 0, Const{fill.is_float, shape, std::vector<double>(static_cast<size_t>(num_elements(shape)), fill.v[0])});
}

void fold_range(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    const double start = im.scalar(n, 0), limit = im.scalar(n, 1), delta = im.scalar(n, 2);
    if (delta == 0) im.fail(n, "delta is 0");
    // ONNX's count, max(ceil((limit - start) / delta), 0), bounded before it is made.
    const double count = std::max(0.0, std::ceil((limit - start) / delta));
    if (!(count <= static_cast<double>(kMaxFoldedElements)))
        im.fail(n, "the range from ", start, " to ", limit, " by ", delta, " has more than the ", kMaxFoldedElements,
                " values Tessera computes at import");
    Const out{im.constant(n, 0).is_float, {static_cast<int64_t>(count)}, {}};
    for (int64_t k = 0; k < out.shape[0]; k++) out.v.push_back(start + static_cast<double>(k) * delta);
    im.set(n, 0, std::move(out));
}

void fold_identity(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    im.set(n, 0, im.constant(n, 0));
}

void fold_sqrt(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    Const c = im.constant(n, 0);
    for (double &x : c.v) x = std::sqrt(x);
    im.set(n, 0, std::move(c));
}

}  // namespace

const std::map<std::string, OpHandler> &fold_ops() {
    static const std::map<std::string, OpHandler> ops = {
        {"Constant", fold_constant},
        {"Shape", fold_shape},
        {"Gather", fold_gather},
        {"Unsqueeze", fold_unsqueeze},
        {"Squeeze", fold_squeeze},
        {"Concat", fold_concat},
        {"Cast", fold_cast},
        {"Add", [](Importer &im, const onnx::NodeProto &n) { fold_binary(im, n, std::plus<double>()); }},
        {"Sub", [](Importer &im, const onnx::NodeProto &n) { fold_binary(im, n, std::minus<double>()); }},
        {"Mul", [](Importer &im, const onnx::NodeProto &n) { fold_binary(im, n, std::multiplies<double>()); }},
        {"Div", [](Importer &im, const onnx::NodeProto &n) { fold_binary(im, n, std::divides<double>()); }},
        {"Reshape", fold_reshape},
        {"Slice", fold_slice},
        {"ConstantOfShape", fold_constant_of_shape},
        {"Range", fold_range},
        {"Identity", fold_identity},
        {"Sqrt", fold_sqrt},
    };
    return ops;
}

}  // namespace tessera::onnx_import
