// The ONNX importer's shared state, for the files under models/src/onnx/:
// the values of the ONNX graph seen so far (a graph tensor, or a constant known
// at import), the attribute reader that rejects what it does not know, and the
// two tables of operator handlers (graph operators; constant folding).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tessera/error.h"
#include "tessera/graph/builder.h"
#include "tessera/models/zoo.h"

namespace tessera::onnx_import {

// The file decides every shape, so each is bounded before it is used: a
// constant computed at import (ConstantOfShape, Range, a broadcast, a gather)
// holds at most kMaxFoldedElements values, which the importer allocates; a
// graph tensor holds at most kMaxTensorElements, which is not allocated at
// import, and is small enough that the product of two such extents, as an
// outer product or a broadcast forms, stays within int64_t.
constexpr int64_t kMaxFoldedElements = int64_t{1} << 24;
constexpr int64_t kMaxTensorElements = int64_t{1} << 31;

// The elements of `shape`, with every extent at least 0 (at least 1 where
// `positive`); an error naming `what` for another extent or a count above
// `limit`.
int64_t checked_elements(const Shape &shape, int64_t limit, bool positive, const std::string &what);

// A value known at import: a shape computation's result, a Constant node, an
// integer initializer. Integers are held exactly in doubles (up to 2^53).
struct Const {
    bool is_float = true;
    Shape shape;
    std::vector<double> v;  // row-major, num_elements(shape) values

    int64_t elements() const { return static_cast<int64_t>(v.size()); }
};

// One ONNX value: a tensor of the graph being built, or a constant.
struct Value {
    std::optional<Tensor> tensor;
    std::optional<Const> constant;
};

class Importer {
public:
    Importer(std::string path, Model &m, int64_t batch) : path_(std::move(path)), m_(m), b_(m.graph), batch_(batch) {}

    Builder &b() { return b_; }
    Model &model() { return m_; }
    const std::string &path() const { return path_; }
    int64_t batch() const { return batch_; }

    bool has(const std::string &name) const { return values_.count(name) != 0; }
    // Whether input i of n is given (ONNX leaves optional inputs empty).
    static bool given(const onnx::NodeProto &n, int i) { return i < n.input_size() && !n.input(i).empty(); }
    bool is_constant(const onnx::NodeProto &n, int i) const;
    // Input i as a constant; an error naming the node when it is computed.
    const Const &constant(const onnx::NodeProto &n, int i) const;
    // Input i as constant integers (axes, shapes, indices): values beyond
    // int64_t saturate, as PyTorch's "to the end" of a slice (2^63 - 1) does
    // once held in a double; NaN is an error naming the node.
    std::vector<int64_t> ints(const onnx::NodeProto &n, int i) const;
    // Input i as a constant of one element (a ratio, an exponent, a bound).
    double scalar(const onnx::NodeProto &n, int i) const;
    // A constant of this shape, computed at import by n, must be within
    // kMaxFoldedElements; an error naming the node otherwise.
    void check_folded(const onnx::NodeProto &n, const Shape &shape) const;
    // Input i as a graph tensor; a constant becomes a graph constant.
    Tensor tensor(const onnx::NodeProto &n, int i);
    // A constant of the graph holding `c` (f32), named after `base`.
    Tensor materialise(const Const &c, const std::string &base);
    // Output i of n; a graph tensor beyond kMaxTensorElements is an error.
    void set(const onnx::NodeProto &n, int i, Tensor t);
    void set(const onnx::NodeProto &n, int i, Const c);
    void set_value(const std::string &name, Value v) { values_[name] = std::move(v); }
    const Value &value(const std::string &name) const;
    // Outputs beyond the ones an operator imports (batch norm's running
    // statistics, max pool's indices, dropout's mask) must stay unused.
    void mark_unsupported_outputs(const onnx::NodeProto &n, int first, const std::string &why);

    // "node '/fc1/Gemm' (Gemm)"
    static std::string label(const onnx::NodeProto &n);

    template<typename... Args>
    [[noreturn]] void fail(const onnx::NodeProto &n, const Args &...args) const {
        tessera::fail("ONNX model '", path_, "': ", label(n), ": ", args...);
    }
    template<typename... Args>
    [[noreturn]] void fail_model(const Args &...args) const {
        tessera::fail("ONNX model '", path_, "': ", args...);
    }

private:
    std::string path_;
    Model &m_;
    Builder b_;
    int64_t batch_;
    std::map<std::string, Value> values_;
    std::map<std::string, std::string> unsupported_;  // value name -> why
};

// Reads a node's attributes. Constructed with the names an operator
// understands; any other attribute present is an error naming it and listing
// those. Getters return the fallback when the attribute is absent.
class NodeAttrs {
public:
    NodeAttrs(const Importer &im, const onnx::NodeProto &n, std::set<std::string> known);
    bool has(const std::string &name) const { return attrs_.count(name) != 0; }
    int64_t i(const std::string &name, int64_t fallback) const;
    double f(const std::string &name, double fallback) const;
    std::vector<int64_t> ints(const std::string &name, std::vector<int64_t> fallback) const;
    std::string s(const std::string &name, std::string fallback) const;
    const onnx::AttributeProto *get(const std::string &name) const;

    // An attribute whose value the importer does not support: an error naming
    // the node, the attribute and its value, and saying what is supported.
    template<typename... Args>
    [[noreturn]] void unsupported(const std::string &name, const std::string &value, const Args &...what) const {
        im_.fail(n_, "attribute '", name, "' = ", value, " is not supported; ", what...);
    }

private:
    const Importer &im_;
    const onnx::NodeProto &n_;
    std::map<std::string, const onnx::AttributeProto *> attrs_;
};

std::string ints_str(const std::vector<int64_t> &v);  // "[1, 2]"

// Converts an initializer or a Constant node's tensor; `where` names it in errors.
Const const_from_proto(const onnx::TensorProto &t, const std::string &where);

using OpHandler = void (*)(Importer &, const onnx::NodeProto &);

// Operators that build graph nodes (onnx_ops.cpp, onnx_layers.cpp).
const std::map<std::string, OpHandler> &graph_ops();
void add_layer_ops(std::map<std::string, OpHandler> &ops);  // Conv, pools, norms (onnx_layers.cpp)
// Operators evaluated at import when every input is a constant (onnx_fold.cpp).
const std::map<std::string, OpHandler> &fold_ops();

// What Reshape, Slice and Unsqueeze mean for a given input shape, shared by
// the folding and graph code; errors name the node.
Shape reshape_target(const Importer &im, const onnx::NodeProto &n, const Shape &in, const std::vector<int64_t> &spec);
struct SliceRange {
    int axis;
    int64_t start, end;  // clamped to the extent; step 1
};
std::vector<SliceRange> slice_ranges(const Importer &im, const onnx::NodeProto &n, const Shape &in);
int normalise_axis(const Importer &im, const onnx::NodeProto &n, int64_t axis, size_t rank);
// Unsqueeze's axes for an input of rank `rank`: normalised, sorted, distinct.
std::vector<int64_t> unsqueeze_axes(const Importer &im, const onnx::NodeProto &n, size_t rank);
// Squeeze's result: the extents of `in` that stay (every 1 when no axes are
// given); a listed axis whose extent is not 1 is an error.
Shape squeezed(const Importer &im, const onnx::NodeProto &n, const Shape &in);

// nn.LayerNorm as opsets before 17 export it (onnx_patterns.cpp): the
// ReduceMean at node `first` starts it; `nodes` are the rest, which the
// layer_norm replaces.
struct LayerNormExpansion {
    std::string x, weight, bias, output;
    double eps;
    std::vector<int> nodes;
};
std::optional<LayerNormExpansion> match_layer_norm(const onnx::GraphProto &g, int first);

// Broadcasting helpers shared by the folding and graph code.
Shape broadcast_shapes(const Importer &im, const onnx::NodeProto &n, const Shape &a, const Shape &b);
Const broadcast_const(const Const &c, const Shape &to);

}  // namespace tessera::onnx_import
