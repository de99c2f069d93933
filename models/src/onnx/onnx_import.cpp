// ONNX import, the model level: the file, its opset, inputs and initializers,
// the walk over the nodes, and the loss on the chosen output. The operators
// are in onnx_ops.cpp, onnx_layers.cpp (graph nodes), onnx_fold.cpp
// (constants) and onnx_patterns.cpp (expansions imported as one operator).
#include "tessera/models/onnx_import.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "importer.h"
#include "tessera/input_file.h"
#include "zoo_internal.h"

namespace tessera {

namespace onnx_import {

namespace {

constexpr int64_t kMinOpset = 13, kMaxOpset = 17;

onnx::ModelProto read_model_file(const std::string &path) {
    check_regular_file(path, "the ONNX model");
    std::ifstream in(path, std::ios::binary);
    TESSERA_CHECK(in.good(), "ONNX model '", path, "': cannot open the file (", std::strerror(errno), ")");
    onnx::ModelProto proto;
    TESSERA_CHECK(proto.ParseFromIstream(&in), "ONNX model '", path,
                  "': not an ONNX model (the protobuf does not parse); export one with torch.onnx.export");
    TESSERA_CHECK(proto.has_graph() && proto.graph().node_size() > 0, "ONNX model '", path, "' has no graph nodes");
    return proto;
}

void check_opset(const Importer &im, const onnx::ModelProto &proto) {
    bool found = false;
    for (const auto &op : proto.opset_import()) {
        if (!op.domain().empty() && op.domain() != "ai.onnx")
            im.fail_model("uses the operator domain '", op.domain(), "'; only the default ONNX domain is supported");
        found = true;
        if (op.version() < kMinOpset || op.version() > kMaxOpset)
            im.fail_model("has opset ", op.version(), "; supported opsets are ", kMinOpset, " to ", kMaxOpset,
                          " (torch.onnx.export(..., opset_version=17))");
    }
    if (!found) im.fail_model("declares no opset; supported opsets are ", kMinOpset, " to ", kMaxOpset);
}

// One floating-point initializer: a trainable parameter (or, for batch norm's
// running statistics, optimizer-like state that the step updates) with its
// values, in the layout the file stores (PyTorch's).
void add_persistent(Importer &im, const onnx::TensorProto &t, const Const &c, bool running_statistic) {
    std::vector<float> values(c.v.begin(), c.v.end());
    Tensor p = running_statistic ? im.b().state(t.name(), c.shape, Init::zeros())
                                 : im.b().param(t.name(), c.shape, Init::zeros());
    im.model().values[t.name()] = TensorValues{DType::F32, std::move(values), {}};
    im.set_value(t.name(), Value{p, std::nullopt});
}

// Batch norm's running statistics: inputs 3 and 4 of BatchNormalization.
std::set<std::string> running_statistics(const onnx::GraphProto &g) {
    std::set<std::string> names;
    for (const auto &n : g.node())
        if (n.op_type() == "BatchNormalization")
            for (int i = 3; i < std::min(5, n.input_size()); i++) names.insert(n.input(i));
    return names;
}

// A NaN, an infinity or a value beyond f32's range in a weight would
// surface much later as divergence; it is the model file's fault, said so.
void check_finite_initializer(const Importer &im, const std::string &name, const Const &c) {
    if (!c.is_float) return;
    for (size_t i = 0; i < c.v.size(); i++)
        if (!std::isfinite(static_cast<float>(c.v[i])))
            im.fail_model("initializer '", name, "' holds ", c.v[i], " at element ", i,
                          ": non-finite values in the model file (as f32)");
}

// Initializers: floating-point ones are parameters, except running statistics
// (state the step updates) and PyTorch's generated constants ("onnx::...");
// integer ones are constants for shape computations.
void add_initializers(Importer &im, const onnx::GraphProto &g) {
    const std::set<std::string> stats = running_statistics(g);
    for (const auto &t : g.initializer()) {
        Const c = const_from_proto(t, "initializer '" + t.name() + "'");
        check_finite_initializer(im, t.name(), c);
        const bool generated = t.name().rfind("onnx::", 0) == 0;
        if (c.is_float && (stats.count(t.name()) || !generated)) {
            add_persistent(im, t, c, stats.count(t.name()) != 0);
            continue;
        }
        im.set_value(t.name(), Value{std::nullopt, std::move(c)});
    }
}

DType input_dtype(const Importer &im, const onnx::ValueInfoProto &v) {
    switch (v.type().tensor_type().elem_type()) {
        case onnx::TensorProto::FLOAT: return DType::F32;
        case onnx::TensorProto::INT64:
        case onnx::TensorProto::INT32: return DType::I32;  // token ids
        default:
            im.fail_model("input '", v.name(), "' has ONNX element type ", v.type().tensor_type().elem_type(),
                          "; supported: float (values) and int64 or int32 (token ids)");
    }
}

// The graph's one data input. Its first dimension is the batch.
Tensor add_input(Importer &im, const onnx::GraphProto &g) {
    std::vector<const onnx::ValueInfoProto *> inputs;
    for (const auto &v : g.input())
        if (!im.has(v.name())) inputs.push_back(&v);
    if (inputs.size() != 1)
        im.fail_model("has ", inputs.size(), " data inputs; Tessera trains models with exactly one (besides the labels)");
    const onnx::ValueInfoProto &v = *inputs[0];
    const auto &dims = v.type().tensor_type().shape().dim();
    if (dims.empty()) im.fail_model("input '", v.name(), "' has no shape; export with an example input");
    Shape shape;
    for (int d = 0; d < dims.size(); d++) {
        if (d == 0) {
            if (dims[0].has_dim_value() && dims[0].dim_value() != im.batch())
                im.fail_model("was exported with batch ", dims[0].dim_value(), " (input '", v.name(), "' is ",
                              "fixed at that size) but the run's batch is ", im.batch(), "; pass --batch ",
                              dims[0].dim_value(), " or export with dynamic_axes={'", v.name(), "': {0: 'batch'}}");
            shape.push_back(im.batch());
        } else if (dims[d].has_dim_value()) {
            shape.push_back(dims[d].dim_value());
        } else {
            im.fail_model("input '", v.name(), "' has a symbolic dimension ", d, " ('", dims[d].dim_param(),
                          "'); only the batch (dimension 0) may be symbolic");
        }
    }
    checked_elements(shape, kMaxTensorElements, true, "ONNX model '" + im.path() + "': input '" + v.name() + "'");
    Tensor x = im.b().data(v.name(), shape, input_dtype(im, v));
    im.set_value(v.name(), Value{x, std::nullopt});
    return x;
}

std::string supported_list() {
    std::string out;
    for (const std::string &name : onnx_supported_operators()) out += (out.empty() ? "" : ", ") + name;
    return out;
}

// A ReduceMean that starts nn.LayerNorm's expansion becomes one layer_norm;
// the expansion's other nodes join `absorbed`.
bool import_layer_norm_expansion(Importer &im, const onnx::GraphProto &g, int i, std::set<int> &absorbed) {
    if (g.node(i).op_type() != "ReduceMean") return false;
    const std::optional<LayerNormExpansion> e = match_layer_norm(g, i);
    if (!e || !im.has(e->x) || !im.has(e->weight) || !im.has(e->bias) || e->output.empty()) return false;
    const Value &x = im.value(e->x), &w = im.value(e->weight), &b = im.value(e->bias);
    if (!x.tensor || !w.tensor || !b.tensor) return false;
    Tensor y = im.b().op1(OpKind::LayerNorm, {*x.tensor, *w.tensor, *b.tensor}, {{"eps", e->eps}},
                          g.node(i).name().empty() ? "layer_norm" : g.node(i).name());
    im.set_value(e->output, Value{y, std::nullopt});
    absorbed.insert(e->nodes.begin(), e->nodes.end());
    return true;
}

void import_node(Importer &im, const onnx::NodeProto &n) {
    if (!n.domain().empty() && n.domain() != "ai.onnx")
        im.fail(n, "the operator domain '", n.domain(), "' is not supported; supported operators: ", supported_list());
    bool all_constant = true;
    for (int i = 0; i < n.input_size(); i++)
        if (Importer::given(n, i) && !im.is_constant(n, i)) all_constant = false;
    const auto &fold = fold_ops();
    if (auto f = fold.find(n.op_type()); f != fold.end() && (all_constant || n.op_type() == "Shape")) {
        f->second(im, n);
        return;
    }
    const auto &ops = graph_ops();
    auto op = ops.find(n.op_type());
    if (op == ops.end()) {
        if (fold.count(n.op_type()))
            im.fail(n, "operator ", n.op_type(), " is supported only on constants (shape computations), but input '",
                    n.input(0), "' is computed by the graph; graph operators: ", supported_list());
        im.fail(n, "operator ", n.op_type(), " is not supported; supported operators: ", supported_list());
    }
    op->second(im, n);
}

// The logits: the chosen output, [batch, classes] or [batch, seq, classes].
Tensor pick_output(Importer &im, const onnx::GraphProto &g, const std::string &wanted, int64_t &label_elements) {
    std::string names;
    for (const auto &o : g.output()) names += (names.empty() ? "'" : ", '") + o.name() + "'";
    std::string name = wanted;
    if (name.empty()) {
        if (g.output_size() != 1)
            im.fail_model("has ", g.output_size(), " outputs (", names, "); name the logits with ", im.path(),
                          ":output=NAME");
        name = g.output(0).name();
    }
    if (!im.has(name)) im.fail_model("has no output '", name, "'; its outputs: ", names);
    const Value &v = im.value(name);
    if (!v.tensor) im.fail_model("output '", name, "' is a constant; the logits must depend on the input");
    Tensor logits = *v.tensor;
    label_elements = 1;
    if (logits.rank() == 3) {
        label_elements = logits.dim(1);
        logits = im.b().reshape(logits, {logits.dim(0) * logits.dim(1), logits.dim(2)});
    } else if (logits.rank() != 2 || logits.dim(0) != im.batch()) {
        im.fail_model("output '", name, "' has shape ", shape_str(logits.shape()), "; the loss needs logits [batch, ",
                      "classes] or [batch, seq, classes] with batch ", im.batch());
    }
    return logits;
}

}  // namespace

}  // namespace onnx_import

bool onnx_import_built() { return true; }

Model import_onnx(const ModelSpec &spec, int64_t batch) {
    using namespace onnx_import;
    for (const auto &[key, value] : spec.params)
        TESSERA_CHECK(key == "output", "ONNX model '", spec.name, "' has no parameter '", key,
                      "'; its one parameter is output=NAME (the graph output that holds the logits)");
    TESSERA_CHECK(batch >= 1, "ONNX model '", spec.name, "': the batch size must be at least 1, got ", batch);
    const onnx::ModelProto proto = read_model_file(spec.name);
    Model m;
    m.imported = true;
    Importer im(spec.name, m, batch);
    check_opset(im, proto);
    const onnx::GraphProto &g = proto.graph();
    add_initializers(im, g);
    Tensor input = add_input(im, g);
    std::set<int> absorbed;
    for (int i = 0; i < g.node_size(); i++)
        if (!absorbed.count(i) && !import_layer_norm_expansion(im, g, i, absorbed)) import_node(im, g.node(i));
    int64_t label_elements = 1;
    auto it = spec.params.find("output");
    Tensor logits = pick_output(im, g, it == spec.params.end() ? "" : it->second, label_elements);
    Tensor labels = im.b().data(m.graph.unique_name("labels"), {logits.dim(0)}, DType::I32);
    zoo::finish(m, im.b(), input, labels, logits, label_elements, "onnx " + spec.name);
    return m;
}

}  // namespace tessera
