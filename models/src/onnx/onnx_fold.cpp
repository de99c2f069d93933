// Constant folding: operators evaluated at import when their inputs are known,
// which is how PyTorch's shape computations (Shape, Gather, Unsqueeze, Concat,
// then Reshape) become plain attributes of the graph.
#include <cmath>
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
        } else if (spec[d] == -1) {
            if (infer >= 0) im.fail(n, "shape ", ints_str(spec), " has more than one -1");
            infer = static_cast<int>(d);
            out.push_back(1);
        } else {
            out.push_back(spec[d]);
        }
    }
    const int64_t known = num_elements(out), total = num_elements(in);
    if (infer >= 0 && known > 0 && total % known == 0) out[static_cast<size_t>(infer)] = total / known;
    if (num_elements(out) != total)
        im.fail(n, "cannot reshape ", shape_str(in), " to ", ints_str(spec), " (", total, " elements)");
    return out;
}

std::vector<SliceRange> slice_ranges(const Importer &im, const onnx::NodeProto &n, const Shape &in) {
    const std::vector<int64_t> starts = im.constant(n, 1).ints(), ends = im.constant(n, 2).ints();
    std::vector<int64_t> axes(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
    if (Importer::given(n, 3)) axes = im.constant(n, 3).ints();
    if (Importer::given(n, 4))
        for (int64_t step : im.constant(n, 4).ints())
            if (step != 1) im.fail(n, "steps ", ints_str(im.constant(n, 4).ints()), " are not supported (only 1)");
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
    const int axis = normalise_axis(im, n, a.i("axis", 0), data.shape.size());
    const int64_t outer = num_elements(Shape(data.shape.begin(), data.shape.begin() + axis));
    const int64_t extent = data.shape[static_cast<size_t>(axis)];
    const int64_t inner = num_elements(Shape(data.shape.begin() + axis + 1, data.shape.end()));
    Const out{data.is_float, Shape(data.shape.begin(), data.shape.begin() + axis), {}};
    out.shape.insert(out.shape.end(), idx.shape.begin(), idx.shape.end());
    out.shape.insert(out.shape.end(), data.shape.begin() + axis + 1, data.shape.end());
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i : idx.ints()) {
            if (i < -extent || i >= extent) im.fail(n, "index ", i, " is out of range for extent ", extent);
            const int64_t at = (o * extent + (i < 0 ? i + extent : i)) * inner;
            out.v.insert(out.v.end(), data.v.begin() + at, data.v.begin() + at + inner);
        }
    im.set(n, 0, std::move(out));
}

void fold_unsqueeze(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    Const c = im.constant(n, 0);
    std::vector<int64_t> axes = im.constant(n, 1).ints();
    const size_t rank = c.shape.size() + axes.size();
    for (int64_t &x : axes) x = normalise_axis(im, n, x, rank);
    std::sort(axes.begin(), axes.end());
    for (int64_t x : axes) c.shape.insert(c.shape.begin() + x, 1);
    im.set(n, 0, std::move(c));
}

void fold_squeeze(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    Const c = im.constant(n, 0);
    Shape kept;
    std::vector<int64_t> axes;
    if (Importer::given(n, 1))
        for (int64_t x : im.constant(n, 1).ints()) axes.push_back(normalise_axis(im, n, x, c.shape.size()));
    for (size_t d = 0; d < c.shape.size(); d++) {
        const bool listed = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
        if (!(axes.empty() ? c.shape[d] == 1 : listed)) kept.push_back(c.shape[d]);
    }
    c.shape = kept;
    im.set(n, 0, std::move(c));
}

void fold_concat(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {"axis"});
    const Const &first = im.constant(n, 0);
    const int axis = normalise_axis(im, n, a.i("axis", 0), first.shape.size());
    const int64_t outer = num_elements(Shape(first.shape.begin(), first.shape.begin() + axis));
    Const out{first.is_float, first.shape, {}};
    out.shape[static_cast<size_t>(axis)] = 0;
    for (int i = 0; i < n.input_size(); i++) out.shape[static_cast<size_t>(axis)] += im.constant(n, i).shape[axis];
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
    c.shape = reshape_target(im, n, c.shape, im.constant(n, 1).ints());
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
    const Shape shape = im.constant(n, 0).ints();
    Const fill{true, {}, {0.0}};
    if (const auto *t = a.get("value")) fill = const_from_proto(t->t(), Importer::label(n));
    im.set(n, 0, Const{fill.is_float, shape, std::vector<double>(static_cast<size_t>(num_elements(shape)), fill.v[0])});
}

void fold_range(Importer &im, const onnx::NodeProto &n) {
    NodeAttrs a(im, n, {});
    const double start = im.constant(n, 0).v.at(0), limit = im.constant(n, 1).v.at(0), delta = im.constant(n, 2).v.at(0);
    if (delta == 0) im.fail(n, "delta is 0");
    Const out{im.constant(n, 0).is_float, {0}, {}};
    for (double x = start; delta > 0 ? x < limit : x > limit; x += delta) out.v.push_back(x);
    out.shape[0] = out.elements();
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
