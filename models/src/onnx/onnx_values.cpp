// The importer's values and attributes: constants read from tensor protos,
// graph tensors made from constants, and the attribute reader.
#include <cmath>
#include <cstring>
#include <limits>

#include "importer.h"

namespace tessera::onnx_import {

int64_t checked_elements(const Shape &shape, int64_t limit, bool positive, const std::string &what) {
    int64_t n = 1;
    for (int64_t d : shape) {
        if (d < (positive ? 1 : 0))
            fail(what, " has shape ", shape_str(shape), "; every extent must be ", positive ? "positive" : "at least 0");
        if (d != 0 && n > limit / d)
            fail(what, " has shape ", shape_str(shape), ", more than the ", limit, " elements Tessera takes there");
        n *= d;
    }
    return n;
}

std::string ints_str(const std::vector<int64_t> &v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); i++) out += (i ? ", " : "") + std::to_string(v[i]);
    return out + "]";
}

namespace {

// Reads n elements of T, from raw_data (little-endian, as ONNX stores it) or
// from the typed repeated field.
template<typename T, typename Field>
std::vector<double> read_elements(const onnx::TensorProto &t, const Field &field, int64_t n, const std::string &where) {
    // The data must be in the file, so checking its size first bounds the
    // allocation by the file's.
    if (t.has_raw_data())
        TESSERA_CHECK(t.raw_data().size() / sizeof(T) == static_cast<size_t>(n) && t.raw_data().size() % sizeof(T) == 0,
                      where, " has ", t.raw_data().size(), " bytes of data for ", n, " elements of ", sizeof(T), " bytes");
    else
        TESSERA_CHECK(field.size() == n, where, " has ", field.size(), " values for ", n, " elements");
    std::vector<double> out;
    out.reserve(static_cast<size_t>(n));
    if (t.has_raw_data()) {
        for (int64_t i = 0; i < n; i++) {
            T x;
            std::memcpy(&x, t.raw_data().data() + i * sizeof(T), sizeof(T));
            out.push_back(static_cast<double>(x));
        }
        return out;
    }
    for (const auto &x : field) out.push_back(static_cast<double>(static_cast<T>(x)));
    return out;
}

}  // namespace

Const const_from_proto(const onnx::TensorProto &t, const std::string &where) {
    TESSERA_CHECK(t.data_location() != onnx::TensorProto::EXTERNAL, where,
                  " keeps its data in an external file, which Tessera does not read; export the model as one file");
    Const c;
    for (int64_t d : t.dims()) c.shape.push_back(d);
    const int64_t n = checked_elements(c.shape, std::numeric_limits<int64_t>::max() / 8, false, where);
    switch (t.data_type()) {
        case onnx::TensorProto::FLOAT: c.v = read_elements<float>(t, t.float_data(), n, where); break;
        case onnx::TensorProto::DOUBLE: c.v = read_elements<double>(t, t.double_data(), n, where); break;
        case onnx::TensorProto::INT64: c.v = read_elements<int64_t>(t, t.int64_data(), n, where); break;
        case onnx::TensorProto::INT32: c.v = read_elements<int32_t>(t, t.int32_data(), n, where); break;
        case onnx::TensorProto::BOOL: c.v = read_elements<uint8_t>(t, t.int32_data(), n, where); break;
        default:
            fail(where, " has ONNX element type ", t.data_type(), "; supported: float, double, int64, int32, bool");
    }
    c.is_float = t.data_type() == onnx::TensorProto::FLOAT || t.data_type() == onnx::TensorProto::DOUBLE;
    return c;
}

std::string Importer::label(const onnx::NodeProto &n) {
    return "node '" + (n.name().empty() ? n.output_size() ? n.output(0) : std::string("?") : n.name()) + "' (" +
           n.op_type() + ")";
}

const Value &Importer::value(const std::string &name) const {
    auto it = values_.find(name);
    TESSERA_INTERNAL_ASSERT(it != values_.end(), "ONNX value '", name, "' looked up before it was defined");
    return it->second;
}

bool Importer::is_constant(const onnx::NodeProto &n, int i) const {
    if (!given(n, i)) fail(n, "input ", i, " is missing");
    if (auto u = unsupported_.find(n.input(i)); u != unsupported_.end())
        fail(n, "reads '", n.input(i), "', ", u->second);
    auto it = values_.find(n.input(i));
    if (it == values_.end()) fail(n, "reads '", n.input(i), "', which no earlier node or initializer defines");
    return it->second.constant.has_value();
}

const Const &Importer::constant(const onnx::NodeProto &n, int i) const {
    if (!given(n, i)) fail(n, "input ", i, " is missing");
    if (!is_constant(n, i))
        fail(n, "input ", i, " ('", n.input(i), "') must be known when the model is imported (a constant or a ",
             "shape computation), but the graph computes it");
    return *values_.at(n.input(i)).constant;
}

std::vector<int64_t> Importer::ints(const onnx::NodeProto &n, int i) const {
    // 2^63 as a double: the first value beyond int64_t.
    constexpr double kBeyond = 9223372036854775808.0;
    std::vector<int64_t> out;
    for (double x : constant(n, i).v) {
        if (std::isnan(x)) fail(n, "input ", i, " ('", n.input(i), "') holds NaN where integers are expected");
        if (x >= kBeyond) out.push_back(std::numeric_limits<int64_t>::max());
        else if (x < -kBeyond) out.push_back(std::numeric_limits<int64_t>::min());
        else out.push_back(static_cast<int64_t>(x));
    }
    return out;
}

double Importer::scalar(const onnx::NodeProto &n, int i) const {
    const Const &c = constant(n, i);
    if (c.elements() != 1)
        fail(n, "input ", i, " ('", n.input(i), "') has shape ", shape_str(c.shape), "; it must hold one value");
    return c.v[0];
}

void Importer::check_folded(const onnx::NodeProto &n, const Shape &shape) const {
    checked_elements(shape, kMaxFoldedElements, false,
                     "ONNX model '" + path_ + "': " + label(n) + ": the constant it computes at import");
}

Tensor Importer::materialise(const Const &c, const std::string &base) {
    const std::string name = m_.graph.unique_name(base);
    const DType dtype = c.is_float ? DType::F32 : DType::I32;
    TensorId id = m_.graph.add_constant(name, TensorType{dtype, c.shape}, Init::zeros());
    TensorValues values{dtype, {}, {}};
    for (double x : c.v) {
        if (c.is_float) {
            values.f32.push_back(static_cast<float>(x));
            continue;
        }
        if (!(x >= std::numeric_limits<int32_t>::min() && x <= std::numeric_limits<int32_t>::max()))
            fail_model("constant '", base, "' holds ", x, ", which is not a 32-bit integer (Tessera's graph holds ",
                       "integers as int32)");
        values.i32.push_back(static_cast<int32_t>(x));
    }
    m_.values[name] = std::move(values);
    return Tensor{id, &m_.graph};
}

Tensor Importer::tensor(const onnx::NodeProto &n, int i) {
    if (!given(n, i)) fail(n, "input ", i, " is missing");
    if (!is_constant(n, i)) return *values_.at(n.input(i)).tensor;
    return materialise(*values_.at(n.input(i)).constant, n.input(i));
}

void Importer::set(const onnx::NodeProto &n, int i, Tensor t) {
    if (i >= n.output_size()) fail(n, "has ", n.output_size(), " outputs; the operator writes output ", i);
    checked_elements(t.shape(), kMaxTensorElements, true,
                     "ONNX model '" + path_ + "': " + label(n) + ": output '" + n.output(i) + "'");
    values_[n.output(i)] = Value{t, std::nullopt};
}
void Importer::set(const onnx::NodeProto &n, int i, Const c) {
    if (i >= n.output_size()) fail(n, "has ", n.output_size(), " outputs; the operator writes output ", i);
    values_[n.output(i)] = Value{std::nullopt, std::move(c)};
}

void Importer::mark_unsupported_outputs(const onnx::NodeProto &n, int first, const std::string &why) {
    for (int i = first; i < n.output_size(); i++)
        if (!n.output(i).empty())
            unsupported_[n.output(i)] = "output " + std::to_string(i) + " of " + label(n) + ", which " + why;
}

NodeAttrs::NodeAttrs(const Importer &im, const onnx::NodeProto &n, std::set<std::string> known) : im_(im), n_(n) {
    for (const auto &a : n.attribute()) {
        if (!known.count(a.name())) {
            std::string list;
            for (const std::string &k : known) list += (list.empty() ? "" : ", ") + k;
            im.fail(n, "attribute '", a.name(), "' is not supported; supported attributes of ", n.op_type(), ": ",
                    list.empty() ? "none" : list);
        }
        attrs_[a.name()] = &a;
    }
}

const onnx::AttributeProto *NodeAttrs::get(const std::string &name) const {
    auto it = attrs_.find(name);
    return it == attrs_.end() ? nullptr : it->second;
}

int64_t NodeAttrs::i(const std::string &name, int64_t fallback) const {
    const auto *a = get(name);
    return a ? a->i() : fallback;
}
double NodeAttrs::f(const std::string &name, double fallback) const {
    const auto *a = get(name);
    return a ? a->f() : fallback;
}
std::vector<int64_t> NodeAttrs::ints(const std::string &name, std::vector<int64_t> fallback) const {
    const auto *a = get(name);
    return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : fallback;
}
std::string NodeAttrs::s(const std::string &name, std::string fallback) const {
    const auto *a = get(name);
    return a ? a->s() : fallback;
}

Shape broadcast_shapes(const Importer &im, const onnx::NodeProto &n, const Shape &a, const Shape &b) {
    const size_t rank = std::max(a.size(), b.size());
    Shape out(rank);
    for (size_t d = 0; d < rank; d++) {
        const int64_t x = d + a.size() >= rank ? a[d + a.size() - rank] : 1;
        const int64_t y = d + b.size() >= rank ? b[d + b.size() - rank] : 1;
        if (x != y && x != 1 && y != 1)
            im.fail(n, "shapes ", shape_str(a), " and ", shape_str(b), " do not broadcast");
        out[d] = std::max(x, y);
    }
    return out;
}

Const broadcast_const(const Const &c, const Shape &to) {
    Const out{c.is_float, to, std::vector<double>(static_cast<size_t>(num_elements(to)))};
    const size_t rank = to.size(), off = rank - c.shape.size();
    std::vector<int64_t> index(rank, 0);
    for (size_t e = 0; e < out.v.size(); e++) {
        int64_t src = 0;
        for (size_t d = off; d < rank; d++) src = src * c.shape[d - off] + (c.shape[d - off] == 1 ? 0 : index[d]);
        out.v[e] = c.v[static_cast<size_t>(src)];
        for (size_t d = rank; d-- > 0;) {
            if (++index[d] < to[d]) break;
            index[d] = 0;
        }
    }
    return out;
}

}  // namespace tessera::onnx_import
