// Subgraphs that an older opset exports for one operator, recognised so that
// they import as that operator. Before opset 17 PyTorch writes nn.LayerNorm as
//
//   mean = ReduceMean(x), d = Sub(x, mean), var = ReduceMean(Pow(d, 2)),
//   y = Add(Mul(Div(d, Sqrt(Add(var, eps))), weight), bias)
//
// over the last axis, which becomes one layer_norm(x, weight, bias, eps); lang/
// has no square root or division by a tensor to build it from.
#include "importer.h"

namespace tessera::onnx_import {

namespace {

// Input or output i of a node, or "" where it has none: the expansion is
// matched on any graph, also one whose nodes lack the arguments it expects.
const std::string &input(const onnx::NodeProto &n, int i) {
    static const std::string none;
    return i < n.input_size() ? n.input(i) : none;
}
const std::string &output(const onnx::NodeProto &n, int i) {
    static const std::string none;
    return i < n.output_size() ? n.output(i) : none;
}

// The graph's nodes by what they read and write.
class GraphIndex {
public:
    explicit GraphIndex(const onnx::GraphProto &g) : g_(g) {
        for (int i = 0; i < g.node_size(); i++) {
            for (const std::string &in : g.node(i).input()) readers_[in].push_back(i);
            for (const std::string &out : g.node(i).output()) producer_[out] = i;
        }
        for (const auto &t : g.initializer()) initializers_[t.name()] = &t;
    }

    // The one node that reads `value`, if it is `op`; -1 otherwise.
    int only_reader(const std::string &value, const std::string &op) const {
        auto it = readers_.find(value);
        if (value.empty() || it == readers_.end() || it->second.size() != 1) return -1;
        return g_.node(it->second[0]).op_type() == op ? it->second[0] : -1;
    }
    const std::vector<int> &readers(const std::string &value) const {
        static const std::vector<int> none;
        auto it = readers_.find(value);
        return it == readers_.end() ? none : it->second;
    }
    // A scalar constant's value: a Constant node's or an initializer's.
    std::optional<double> scalar(const std::string &value) const {
        const onnx::TensorProto *t = nullptr;
        if (auto it = initializers_.find(value); it != initializers_.end()) t = it->second;
        if (auto p = producer_.find(value); !t && p != producer_.end()) {
            const onnx::NodeProto &n = g_.node(p->second);
            if (n.op_type() == "Constant" && n.attribute_size() == 1 && n.attribute(0).name() == "value")
                t = &n.attribute(0).t();
        }
        if (!t) return std::nullopt;
        const Const c = const_from_proto(*t, "constant '" + value + "'");
        if (c.elements() != 1) return std::nullopt;
        return c.v[0];
    }
    bool is_initializer(const std::string &value) const { return initializers_.count(value) != 0; }
    const onnx::NodeProto &node(int i) const { return g_.node(i); }

private:
    const onnx::GraphProto &g_;
    std::map<std::string, std::vector<int>> readers_;
    std::map<std::string, int> producer_;
    std::map<std::string, const onnx::TensorProto *> initializers_;
};

bool reduces_last_axis(const onnx::NodeProto &n) {
    bool last = false, keep = true;
    for (const auto &a : n.attribute()) {
        if (a.name() == "axes") last = a.ints_size() == 1 && a.ints(0) == -1;
        if (a.name() == "keepdims") keep = a.i() != 0;
    }
    return last && keep && n.input_size() == 1;
}

// The input of binary node n that is not `value`.
std::string other_input(const onnx::NodeProto &n, const std::string &value) {
    return input(n, 0) == value ? input(n, 1) : input(n, 0);
}

}  // namespace

std::optional<LayerNormExpansion> match_layer_norm(const onnx::GraphProto &g, int first) {
    const GraphIndex ix(g);
    const onnx::NodeProto &mean = ix.node(first);
    if (mean.op_type() != "ReduceMean" || !reduces_last_axis(mean)) return std::nullopt;
    const std::string x = input(mean, 0);
    const int sub = ix.only_reader(output(mean, 0), "Sub");
    if (sub < 0 || input(ix.node(sub), 0) != x) return std::nullopt;
    const std::string d = output(ix.node(sub), 0);
    int pow = -1, div = -1;
    for (int r : ix.readers(d)) {
        if (ix.node(r).op_type() == "Pow" && input(ix.node(r), 0) == d) pow = r;
        if (ix.node(r).op_type() == "Div" && input(ix.node(r), 0) == d) div = r;
    }
    if (pow < 0 || div < 0 || ix.readers(d).size() != 2 || ix.scalar(input(ix.node(pow), 1)) != 2.0)
        return std::nullopt;
    const int var = ix.only_reader(output(ix.node(pow), 0), "ReduceMean");
    if (var < 0 || !reduces_last_axis(ix.node(var))) return std::nullopt;
    const int add_eps = ix.only_reader(output(ix.node(var), 0), "Add");
    if (add_eps < 0) return std::nullopt;
    const std::optional<double> eps = ix.scalar(other_input(ix.node(add_eps), output(ix.node(var), 0)));
    const int sqrt = ix.only_reader(output(ix.node(add_eps), 0), "Sqrt");
    if (!eps || sqrt < 0 || ix.only_reader(output(ix.node(sqrt), 0), "Div") != div) return std::nullopt;
    const int mul = ix.only_reader(output(ix.node(div), 0), "Mul");
    if (mul < 0) return std::nullopt;
    const int add = ix.only_reader(output(ix.node(mul), 0), "Add");
    if (add < 0) return std::nullopt;
    LayerNormExpansion e{x, other_input(ix.node(mul), output(ix.node(div), 0)),
                         other_input(ix.node(add), output(ix.node(mul), 0)), output(ix.node(add), 0), *eps,
                         {sub, pow, var, add_eps, sqrt, div, mul, add}};
    if (!ix.is_initializer(e.weight) || !ix.is_initializer(e.bias)) return std::nullopt;
    return e;
}

}  // namespace tessera::onnx_import
