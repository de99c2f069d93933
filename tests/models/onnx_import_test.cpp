// ONNX import on models written here with libonnx's protobuf classes: what a
// PyTorch export's operators become, shape computations folded, weights kept
// in PyTorch's layout, and every user-facing error with a test of its own.
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <gtest/gtest.h>

#include "expect_error.h"
#include "tessera/models/onnx_import.h"

namespace tessera {
namespace {

using test::error_of;
using test::expect_error;

// A file name of this process under the temporary directory.
std::string temp_path(const std::string &stem) {
    return (std::filesystem::temp_directory_path() / (stem + "_" + std::to_string(::getpid()) + ".onnx")).string();
}

// Builds a small ONNX graph: one float input [batch, features], initializers,
// nodes, one output.
class OnnxFile {
public:
    explicit OnnxFile(int64_t opset = 17) {
        auto *op = proto_.add_opset_import();
        op->set_domain("");
        op->set_version(opset);
        proto_.set_ir_version(8);
    }

    onnx::ValueInfoProto &input(const std::string &name, std::vector<int64_t> dims, bool symbolic_batch = true,
                                int elem = onnx::TensorProto::FLOAT) {
        auto *v = g().add_input();
        v->set_name(name);
        auto *t = v->mutable_type()->mutable_tensor_type();
        t->set_elem_type(elem);
        for (size_t d = 0; d < dims.size(); d++) {
            auto *dim = t->mutable_shape()->add_dim();
            if (d == 0 && symbolic_batch) dim->set_dim_param("batch");
            else dim->set_dim_value(dims[d]);
        }
        return *v;
    }

    void initializer(const std::string &name, std::vector<int64_t> dims, std::vector<float> values) {
        auto *t = g().add_initializer();
        t->set_name(name);
        t->set_data_type(onnx::TensorProto::FLOAT);
        for (int64_t d : dims) t->add_dims(d);
        for (float v : values) t->add_float_data(v);
    }

    void int_initializer(const std::string &name, std::vector<int64_t> values) {
        auto *t = g().add_initializer();
        t->set_name(name);
        t->set_data_type(onnx::TensorProto::INT64);
        t->add_dims(static_cast<int64_t>(values.size()));
        for (int64_t v : values) t->add_int64_data(v);
    }

    onnx::NodeProto &node(const std::string &op, std::vector<std::string> in, std::vector<std::string> out,
                          const std::string &name = "") {
        auto *n = g().add_node();
        n->set_op_type(op);
        n->set_name(name.empty() ? "/" + op : name);
        for (auto &i : in) n->add_input(i);
        for (auto &o : out) n->add_output(o);
        return *n;
    }

    void output(const std::string &name) { g().add_output()->set_name(name); }

    // Writes the file and returns its path.
    std::string write(const std::string &stem) {
        const std::string path = temp_path(stem);
        std::ofstream out(path, std::ios::binary);
        EXPECT_TRUE(proto_.SerializeToOstream(&out));
        return path;
    }

    onnx::GraphProto &g() { return *proto_.mutable_graph(); }

private:
    onnx::ModelProto proto_;
};

void set_int(onnx::NodeProto &n, const std::string &name, int64_t v) {
    auto *a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
}

void set_ints(onnx::NodeProto &n, const std::string &name, std::vector<int64_t> v) {
    auto *a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
}

void set_float(onnx::NodeProto &n, const std::string &name, float v) {
    auto *a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
}

// A Linear layer as PyTorch exports it: Gemm(x, weight [out, in], bias, transB=1).
OnnxFile linear_model(int64_t in = 3, int64_t out = 2) {
    OnnxFile f;
    f.input("input", {4, in});
    std::vector<float> w(static_cast<size_t>(in * out));
    for (size_t i = 0; i < w.size(); i++) w[i] = 0.1f * static_cast<float>(i);
    f.initializer("fc.weight", {out, in}, w);
    f.initializer("fc.bias", {out}, std::vector<float>(static_cast<size_t>(out), 0.5f));
    set_int(f.node("Gemm", {"input", "fc.weight", "fc.bias"}, {"logits"}, "/fc/Gemm"), "transB", 1);
    f.output("logits");
    return f;
}

// A conv model whose Conv node a test adjusts.
OnnxFile conv_model(onnx::NodeProto **conv) {
    OnnxFile f;
    f.input("input", {2, 1, 4, 4});
    f.initializer("conv.weight", {2, 1, 3, 3}, std::vector<float>(18, 0.1f));
    *conv = &f.node("Conv", {"input", "conv.weight"}, {"c"}, "/conv/Conv");
    set_ints(**conv, "pads", {1, 1, 1, 1});
    f.node("GlobalAveragePool", {"c"}, {"p"});
    f.node("Flatten", {"p"}, {"logits"});
    f.output("logits");
    return f;
}

// An input [batch, 3] and a batch norm's four initializers, for a test's
// BatchNormalization node.
OnnxFile batch_norm_inputs(float mean0 = 0) {
    OnnxFile f;
    f.input("input", {2, 3});
    f.initializer("bn.weight", {3}, {1, 1, 1});
    f.initializer("bn.bias", {3}, {0, 0, 0});
    f.initializer("bn.running_mean", {3}, {mean0, 0, 0});
    f.initializer("bn.running_var", {3}, {1, 1, 1});
    return f;
}

const Node &node_of(const Model &m, OpKind kind) {
    for (const Node &n : m.graph.nodes())
        if (n.call.kind == kind) return n;
    ADD_FAILURE() << "no " << op_name(kind) << " node";
    return m.graph.nodes().front();
}

TEST(OnnxImport, GemmKeepsPyTorchsLayoutAndValues) {
    const std::string path = linear_model().write("linear");
    Model m = build_model(path, 4);
    const TensorInfo &w = m.graph.tensor(m.graph.tensor_named("fc.weight"));
    EXPECT_EQ(w.role, TensorRole::Param);
    EXPECT_EQ(w.type.shape, (Shape{2, 3}));  // [out, in], as stored
    EXPECT_EQ(m.values.at("fc.weight").f32[5], 0.5f);
    EXPECT_EQ(m.values.at("fc.bias").f32, (std::vector<float>{0.5f, 0.5f}));
    const Node &mm = node_of(m, OpKind::Matmul);
    EXPECT_EQ(mm.call.attrs.get_int("", "transpose_b"), 1);
    EXPECT_EQ(m.num_classes, 2);
    EXPECT_EQ(m.graph.tensor(m.input).type.shape, (Shape{4, 3}));
    EXPECT_TRUE(m.imported);
}

TEST(OnnxImport, ShapeSubgraphsFoldToAReshape) {
    OnnxFile f;
    f.input("input", {4, 2, 3});
    f.initializer("fc.weight", {2, 6}, std::vector<float>(12, 0.1f));
    f.int_initializer("zero", {0});
    f.int_initializer("minus_one", {-1});
    f.node("Shape", {"input"}, {"shape"});
    f.node("Gather", {"shape", "zero"}, {"batch"});  // [batch]
    f.node("Concat", {"batch", "minus_one"}, {"target"});
    set_int(*f.g().mutable_node(2), "axis", 0);
    f.node("Reshape", {"input", "target"}, {"flat"});
    set_int(f.node("Gemm", {"flat", "fc.weight"}, {"logits"}), "transB", 1);
    f.output("logits");
    Model m = build_model(f.write("fold"), 5);
    const Node &r = node_of(m, OpKind::Reshape);
    EXPECT_EQ(r.call.attrs.get_ints("", "shape"), (std::vector<int64_t>{5, 6}));
    for (const Node &n : m.graph.nodes()) EXPECT_NE(n.call.kind, OpKind::Concat) << n.call.name;
}

TEST(OnnxImport, BatchNormRunningStatisticsAreModuleState) {
    OnnxFile f = batch_norm_inputs(0.5f);
    auto &bn = f.node("BatchNormalization", {"input", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"},
                      {"logits", "rm", "rv"});
    set_int(bn, "training_mode", 1);
    f.output("logits");
    Model m = build_model(f.write("bn"), 2);
    ASSERT_EQ(m.module_state.size(), 3u);
    EXPECT_EQ(m.module_state[0].name, "bn.running_mean");
    EXPECT_EQ(m.module_state[0].f32[0], 0.5f);
    EXPECT_EQ(m.module_state[2].name, "bn.num_batches_tracked");
    EXPECT_TRUE(m.module_state[2].step_counter);
    EXPECT_FALSE(m.graph.find_tensor("bn.running_mean").has_value());
}

TEST(OnnxImport, SequenceOutputsGiveALabelPerPosition) {
    OnnxFile f;
    f.input("input", {2, 5}, true, onnx::TensorProto::INT64);
    f.initializer("tok.weight", {7, 4}, std::vector<float>(28, 0.1f));
    f.node("Gather", {"tok.weight", "input"}, {"logits"});
    f.output("logits");
    Model m = build_model(f.write("seq"), 3);
    EXPECT_EQ(m.graph.tensor(m.input).type.dtype, DType::I32);
    EXPECT_EQ(m.label_elements, 5);
    EXPECT_EQ(m.graph.tensor(m.logits).type.shape, (Shape{15, 4}));
    EXPECT_EQ(m.graph.tensor(m.labels).type.shape, (Shape{15}));
    node_of(m, OpKind::Embedding);
}

// ---- errors: one test each ----------------------------------------------------------

TEST(OnnxImportError, UnsupportedOperatorNamesTheNodeAndListsTheSupported) {
    OnnxFile f = linear_model();
    f.g().mutable_node(0)->set_output(0, "z");
    f.node("Where", {"z"}, {"logits"}, "/act/Where");
    const std::string e = error_of([&] { build_model(f.write("where"), 4); });
    EXPECT_NE(e.find("node '/act/Where' (Where): operator Where is not supported; supported operators: "), std::string::npos)
        << e;
    EXPECT_NE(e.find("BatchNormalization"), std::string::npos) << e;
    EXPECT_NE(e.find("Gemm"), std::string::npos) << e;
}

TEST(OnnxImportError, UnknownAttributeNamesItAndTheSupportedOnes) {
    onnx::NodeProto *conv;
    OnnxFile f = conv_model(&conv);
    set_int(*conv, "foo", 1);
    expect_error([&] { build_model(f.write("attr"), 2); },
                 "node '/conv/Conv' (Conv): attribute 'foo' is not supported; supported attributes of Conv: auto_pad, "
                 "dilations, group, kernel_shape, pads, strides");
}

TEST(OnnxImportError, GroupedConvolution) {
    onnx::NodeProto *conv;
    OnnxFile f = conv_model(&conv);
    set_int(*conv, "group", 2);
    expect_error([&] { build_model(f.write("group"), 2); },
                 "node '/conv/Conv' (Conv): attribute 'group' = 2 is not supported; supported: 1");
}

TEST(OnnxImportError, DilatedConvolution) {
    onnx::NodeProto *conv;
    OnnxFile f = conv_model(&conv);
    set_ints(*conv, "dilations", {2, 2});
    expect_error([&] { build_model(f.write("dilation"), 2); },
                 "attribute 'dilations' = [2, 2] is not supported; supported: [1, 1]");
}

TEST(OnnxImportError, AsymmetricPadding) {
    onnx::NodeProto *conv;
    OnnxFile f = conv_model(&conv);
    conv->mutable_attribute(0)->set_ints(2, 0);
    expect_error([&] { build_model(f.write("pads"), 2); },
                 "attribute 'pads' = [1, 1, 0, 1] is not supported; supported: symmetric padding");
}

TEST(OnnxImportError, GemmAlpha) {
    OnnxFile f = linear_model();
    set_float(*f.g().mutable_node(0), "alpha", 2);
    expect_error([&] { build_model(f.write("alpha"), 4); },
                 "node '/fc/Gemm' (Gemm): attribute 'alpha' = 2.000000 is not supported; supported: 1");
}

TEST(OnnxImportError, SoftmaxOverAnotherAxis) {
    OnnxFile f = linear_model();
    f.g().mutable_node(0)->set_output(0, "z");
    set_int(f.node("Softmax", {"z"}, {"logits"}), "axis", 0);
    expect_error([&] { build_model(f.write("softmax"), 4); },
                 "(Softmax): attribute 'axis' = 0 is not supported; supported: the last axis (-1)");
}

TEST(OnnxImportError, MaxPoolCeilMode) {
    onnx::NodeProto *conv;
    OnnxFile f = conv_model(&conv);
    f.g().mutable_node(1)->set_input(0, "m");
    auto &pool = f.node("MaxPool", {"c"}, {"m"}, "/pool/MaxPool");
    set_ints(pool, "kernel_shape", {2, 2});
    set_int(pool, "ceil_mode", 1);
    // Keep the nodes in order: the pool after the conv, before the global pool.
    f.g().mutable_node()->SwapElements(1, 3);
    f.g().mutable_node()->SwapElements(2, 3);
    expect_error([&] { build_model(f.write("ceil"), 2); },
                 "node '/pool/MaxPool' (MaxPool): attribute 'ceil_mode' = 1 is not supported; supported: 0");
}

TEST(OnnxImportError, BatchNormInInferenceMode) {
    OnnxFile f = batch_norm_inputs();
    f.node("BatchNormalization", {"input", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}, {"logits"},
           "/bn/BatchNormalization");
    f.output("logits");
    expect_error([&] { build_model(f.write("bn_eval"), 2); },
                 "node '/bn/BatchNormalization' (BatchNormalization): attribute 'training_mode' = 0 is not supported; "
                 "Tessera trains with batch statistics; export in training mode");
}

TEST(OnnxImportError, ARunningStatisticOutputIsRead) {
    OnnxFile f = batch_norm_inputs();
    auto &bn = f.node("BatchNormalization", {"input", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"},
                      {"y", "rm"}, "/bn/BatchNormalization");
    set_int(bn, "training_mode", 1);
    f.node("Add", {"y", "rm"}, {"logits"}, "/add");
    f.output("logits");
    expect_error([&] { build_model(f.write("bn_out"), 2); },
                 "node '/add' (Add): reads 'rm', output 1 of node '/bn/BatchNormalization' (BatchNormalization), "
                 "which (a running statistic) Tessera does not compute");
}

TEST(OnnxImportError, DivisionByAComputedTensor) {
    OnnxFile f = linear_model();
    f.g().mutable_node(0)->set_output(0, "z");
    f.node("Div", {"z", "z"}, {"logits"}, "/div");
    expect_error([&] { build_model(f.write("div"), 4); },
                 "node '/div' (Div): division by 'z', which the graph computes, is not supported");
}

TEST(OnnxImportError, BroadcastAlongAMiddleAxis) {
    OnnxFile f;
    f.input("input", {2, 3, 4});
    f.initializer("scale", {3, 1}, {1, 2, 3});
    f.node("Mul", {"input", "scale"}, {"logits3"}, "/mul");
    f.int_initializer("flat", {0, -1});
    f.node("Reshape", {"logits3", "flat"}, {"logits"});
    f.output("logits");
    expect_error([&] { build_model(f.write("bcast"), 2); },
                 "node '/mul' (Mul): broadcasting [3, 1] to [2, 3, 4] is not supported");
}

TEST(OnnxImportError, UnsupportedOpset) {
    OnnxFile f = linear_model();
    OnnxFile old(11);
    *old.g().mutable_node() = f.g().node();
    *old.g().mutable_initializer() = f.g().initializer();
    *old.g().mutable_input() = f.g().input();
    *old.g().mutable_output() = f.g().output();
    const std::string path = old.write("opset11");
    expect_error([&] { build_model(path, 4); }, "has opset 11; supported opsets are 13 to 17");
}

TEST(OnnxImportError, FixedBatchDiffersFromTheRun) {
    OnnxFile f;
    f.input("input", {4, 3}, false);
    f.initializer("fc.weight", {2, 3}, std::vector<float>(6, 0.1f));
    set_int(f.node("Gemm", {"input", "fc.weight"}, {"logits"}), "transB", 1);
    f.output("logits");
    expect_error([&] { build_model(f.write("fixed"), 8); },
                 "was exported with batch 4 (input 'input' is fixed at that size) but the run's batch is 8; pass "
                 "--batch 4 or export with dynamic_axes");
}

TEST(OnnxImportError, SeveralOutputsNeedOneNamed) {
    OnnxFile f = linear_model();
    f.node("Relu", {"logits"}, {"act"});
    f.output("act");
    const std::string path = f.write("two_outputs");
    expect_error([&] { build_model(path, 4); }, "has 2 outputs ('logits', 'act'); name the logits with");
    EXPECT_EQ(build_model(path + ":output=act", 4).num_classes, 2);
    expect_error([&] { build_model(path + ":output=nope", 4); }, "has no output 'nope'; its outputs: 'logits', 'act'");
}

TEST(OnnxImportError, UnknownSpecParameter) {
    const std::string path = linear_model().write("param");
    expect_error([&] { build_model(path + ":layers=3", 4); },
                 "has no parameter 'layers'; its one parameter is output=NAME");
}

TEST(OnnxImportError, MissingFile) {
    expect_error([] { build_model("/nonexistent/net.onnx", 4); },
                 "ONNX model '/nonexistent/net.onnx': cannot open the file");
}

TEST(OnnxImportError, NotAnOnnxFile) {
    const std::string path = temp_path("garbage");
    std::ofstream(path) << "this is not a protobuf \xff\xff\xff";
    expect_error([&] { build_model(path, 4); }, "not an ONNX model (the protobuf does not parse)");
}

TEST(OnnxImportError, LogitsOfTheWrongRank) {
    OnnxFile f;
    f.input("input", {2, 3, 4, 5});
    f.node("Relu", {"input"}, {"logits"});
    f.output("logits");
    expect_error([&] { build_model(f.write("rank4"), 2); },
                 "output 'logits' has shape [2, 3, 4, 5]; the loss needs logits [batch, classes] or [batch, seq, "
                 "classes]");
}

}  // namespace
}  // namespace tessera
