// ONNX import on models written here with libonnx's protobuf classes: what a
// PyTorch export's operators become, shape computations folded, weights kept
// in PyTorch's layout, and every user-facing error with a test of its own.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

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
        int_initializer(name, {static_cast<int64_t>(values.size())}, values);
    }
    void int_initializer(const std::string &name, std::vector<int64_t> dims, std::vector<int64_t> values) {
        auto *t = g().add_initializer();
        t->set_name(name);
        t->set_data_type(onnx::TensorProto::INT64);
        for (int64_t d : dims) t->add_dims(d);
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

// A training-mode BatchNormalization of batch_norm_inputs' tensors, its
// running variance read from `var` (an initializer, or what a test computes).
onnx::NodeProto &training_batch_norm(OnnxFile &f, const std::vector<std::string> &outputs,
                                     const std::string &var = "bn.running_var") {
    auto &bn = f.node("BatchNormalization", {"input", "bn.weight", "bn.bias", "bn.running_mean", var}, outputs,
                      "/bn/BatchNormalization");
    set_int(bn, "training_mode", 1);
    return bn;
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

TEST(OnnxImport, BatchNormRunningStatisticsAreStateTheStepUpdates) {
    OnnxFile f = batch_norm_inputs(0.5f);
    auto &bn = training_batch_norm(f, {"logits", "rm", "rv"});
    set_float(bn, "momentum", 0.9f);  // PyTorch's momentum 0.1, stored as a float
    f.output("logits");
    Model m = build_model(f.write("bn"), 2);
    const TensorId mean = m.graph.tensor_named("bn.running_mean"), var = m.graph.tensor_named("bn.running_var");
    EXPECT_EQ(m.graph.tensor(mean).role, TensorRole::OptState);
    EXPECT_EQ(m.graph.tensor(var).role, TensorRole::OptState);
    EXPECT_EQ(m.values.at("bn.running_mean").f32, (std::vector<float>{0.5f, 0, 0}));
    const Node &stats = node_of(m, OpKind::BatchNormStats);
    EXPECT_EQ(stats.inputs, (std::vector<TensorId>{m.input, mean, var}));
    EXPECT_EQ(stats.call.attrs.get_float("", "momentum"), 0.1);  // 1 - 0.9f, rounded back to PyTorch's value
    EXPECT_EQ(m.graph.tensor(stats.outputs[0]).updates, mean);
    EXPECT_EQ(m.graph.tensor(stats.outputs[1]).updates, var);
    EXPECT_EQ(running_statistics(m.graph), (std::vector<TensorId>{mean, var}));
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

// A NaN or a value beyond f32's range in a weight is the file's fault, named
// as such (it once surfaced as "training diverged; lower --lr").
TEST(OnnxImportError, NonFiniteInitializersBlameTheModelFile) {
    for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
        OnnxFile f;
        f.input("input", {4, 3});
        f.initializer("fc.weight", {2, 3}, {0, 0, 0, 0, bad, 0});
        f.initializer("fc.bias", {2}, {0, 0});
        set_int(f.node("Gemm", {"input", "fc.weight", "fc.bias"}, {"logits"}, "/fc/Gemm"), "transB", 1);
        f.output("logits");
        const std::string e = error_of([&] { build_model(f.write("nonfinite"), 4); });
        EXPECT_NE(e.find("initializer 'fc.weight' holds "), std::string::npos) << e;
        EXPECT_NE(e.find(" at element 4: non-finite values in the model file (as f32)"), std::string::npos) << e;
    }
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
    training_batch_norm(f, {"y", "rm"});
    f.node("Add", {"y", "rm"}, {"logits"}, "/add");
    f.output("logits");
    expect_error([&] { build_model(f.write("bn_out"), 2); },
                 "node '/add' (Add): reads 'rm', output 1 of node '/bn/BatchNormalization' (BatchNormalization), "
                 "which (a running statistic) Tessera updates in place rather than outputs");
}

TEST(OnnxImportError, BatchNormMomentumOutOfRange) {
    OnnxFile f = batch_norm_inputs();
    set_float(training_batch_norm(f, {"logits"}), "momentum", 1.0f);
    f.output("logits");
    expect_error([&] { build_model(f.write("bn_momentum"), 2); },
                 "node '/bn/BatchNormalization' (BatchNormalization): attribute 'momentum' = 1.000000 is not "
                 "supported; supported: 0 <= momentum < 1");
}

TEST(OnnxImportError, BatchNormRunningStatisticsComputed) {
    OnnxFile f = batch_norm_inputs();
    f.node("Identity", {"bn.running_var"}, {"var_copy"}, "/copy");
    training_batch_norm(f, {"logits"}, "var_copy");
    f.output("logits");
    expect_error([&] { build_model(f.write("bn_stats"), 2); },
                 "node '/bn/BatchNormalization' (BatchNormalization): its running statistics (inputs 3 and 4) "
                 "must be initializers");
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
                 "cannot read the ONNX model '/nonexistent/net.onnx': No such file or directory");
    // A directory named like a model is said to be one (it once failed to parse).
    const std::string dir = temp_path("dir.onnx");
    std::filesystem::create_directories(dir);
    expect_error([&] { build_model(dir, 4); },
                 "cannot read the ONNX model '" + dir + "': it is a directory, not a regular file");
    std::filesystem::remove(dir);
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

// ---- malformed files, as fuzz_onnx writes them: one test each -----------------------

// PyTorch exports x[:, 1:] with the end 2^63 - 1, which a double rounds up to
// 2^63, one past int64_t; it means "to the end".
TEST(OnnxImport, SliceToTheEnd) {
    OnnxFile f;
    f.input("input", {2, 5});
    f.int_initializer("starts", {2});
    f.int_initializer("ends", {std::numeric_limits<int64_t>::max()});
    f.int_initializer("axes", {1});
    f.node("Slice", {"input", "starts", "ends", "axes"}, {"logits"});
    f.output("logits");
    Model m = build_model(f.write("slice_end"), 2);
    EXPECT_EQ(m.graph.tensor(m.logits).type.shape, (Shape{2, 3}));
}

// A linear model whose logits pass through `op` (reading "z", writing "logits").
OnnxFile linear_then(const std::string &op, std::vector<std::string> in, std::vector<std::string> out = {"logits"}) {
    OnnxFile f = linear_model();
    f.g().mutable_node(0)->set_output(0, "z");
    f.node(op, std::move(in), std::move(out));
    return f;
}

TEST(OnnxImportError, InitializerOfOverflowingShape) {
    OnnxFile f = linear_model();
    auto *t = f.g().add_initializer();
    t->set_name("huge");
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(int64_t{1} << 40);
    t->add_dims(int64_t{1} << 40);
    t->set_raw_data("");
    expect_error([&] { build_model(f.write("huge_init"), 4); },
                 "initializer 'huge' has shape [1099511627776, 1099511627776], more than the");
}

TEST(OnnxImportError, InitializerOfNegativeExtent) {
    OnnxFile f = linear_model();
    f.int_initializer("neg", {-1}, {});
    expect_error([&] { build_model(f.write("neg_init"), 4); },
                 "initializer 'neg' has shape [-1]; every extent must be at least 0");
}

TEST(OnnxImportError, ConstantOfShapeBeyondTheBound) {
    OnnxFile f = linear_model();
    f.int_initializer("big", {int64_t{1} << 20, int64_t{1} << 20});
    f.node("ConstantOfShape", {"big"}, {"zeros"});
    expect_error([&] { build_model(f.write("const_of_shape"), 4); },
                 "node '/ConstantOfShape' (ConstantOfShape): the constant it computes at import has shape [1048576, "
                 "1048576], more than the 16777216 elements Tessera takes there");
}

TEST(OnnxImportError, RangeBeyondTheBound) {
    OnnxFile f = linear_model();
    f.int_initializer("start", {0});
    f.int_initializer("limit", {int64_t{1} << 40});
    f.int_initializer("delta", {1});
    f.node("Range", {"start", "limit", "delta"}, {"r"});
    expect_error([&] { build_model(f.write("range"), 4); },
                 "node '/Range' (Range): the range from 0 to 1.09951e+12 by 1 has more than the 16777216 values");
}

TEST(OnnxImportError, InputBeyondTheBound) {
    OnnxFile f;
    f.input("input", {2, int64_t{1} << 20, int64_t{1} << 20});
    f.node("Relu", {"input"}, {"logits"});
    f.output("logits");
    expect_error([&] { build_model(f.write("big_input"), 2); },
                 "input 'input' has shape [2, 1048576, 1048576], more than the 2147483648 elements");
}

TEST(OnnxImportError, IntegerConstantBeyondInt32) {
    OnnxFile f;
    f.input("input", {2, 1}, true, onnx::TensorProto::INT64);
    f.int_initializer("big", {int64_t{1} << 40});
    f.initializer("tok.weight", {7, 4}, std::vector<float>(28, 0.1f));
    f.node("Add", {"input", "big"}, {"ids"});
    f.node("Gather", {"tok.weight", "ids"}, {"logits"});
    f.output("logits");
    expect_error([&] { build_model(f.write("int32"), 2); },
                 "constant 'big' holds 1.09951e+12, which is not a 32-bit integer");
}

TEST(OnnxImportError, ANodeWithoutOutputs) {
    OnnxFile f = linear_model();
    f.node("Relu", {"logits"}, {});
    expect_error([&] { build_model(f.write("no_outputs"), 4); },
                 "node '/Relu' (Relu): has 0 outputs; the operator writes output 0");
}

TEST(OnnxImportError, ABinaryOperatorWithOneInput) {
    expect_error([&] { build_model(linear_then("Add", {"z"}).write("one_input"), 4); },
                 "node '/Add' (Add): input 1 is missing");
}

TEST(OnnxImportError, AnExponentOfNoValues) {
    OnnxFile f = linear_then("Pow", {"z", "onnx::e"});
    f.initializer("onnx::e", {0}, {});
    expect_error([&] { build_model(f.write("pow_empty"), 4); },
                 "node '/Pow' (Pow): input 1 ('onnx::e') has shape [0]; it must hold one value");
}

TEST(OnnxImportError, UnsqueezeOfOneAxisTwice) {
    OnnxFile f = linear_then("Unsqueeze", {"z", "axes"});
    f.int_initializer("axes", {1, 1});
    expect_error([&] { build_model(f.write("unsqueeze"), 4); }, "(Unsqueeze): axes [1, 1] name an axis twice");
}

TEST(OnnxImportError, FoldedSqueezeOfAnAxisBeyondExtent1) {
    OnnxFile f = linear_model();
    f.int_initializer("two", {2}, {5, 6});
    f.int_initializer("axes", {0});
    f.node("Squeeze", {"two", "axes"}, {"folded"});
    expect_error([&] { build_model(f.write("squeeze"), 4); },
                 "(Squeeze): axis 0 of [2] has extent 2; only axes of extent 1 squeeze");
}

TEST(OnnxImportError, FoldedReshapeToANegativeExtent) {
    OnnxFile f = linear_model();
    f.int_initializer("eight", {8}, {1, 2, 3, 4, 5, 6, 7, 8});
    f.int_initializer("shape", {-2, -4});
    f.node("Reshape", {"eight", "shape"}, {"folded"});
    expect_error([&] { build_model(f.write("reshape_neg"), 4); },
                 "(Reshape): shape [-2, -4] has the extent -2; extents are positive, 0 (copy) or -1 (infer)");
}

TEST(OnnxImportError, FoldedConcatOfShapesThatDoNotJoin) {
    OnnxFile f = linear_model();
    f.int_initializer("a", {2});
    f.int_initializer("b", {2, 2}, {1, 2, 3, 4});
    f.node("Concat", {"a", "b"}, {"ab"});
    expect_error([&] { build_model(f.write("concat"), 4); },
                 "(Concat): input 1 has shape [2, 2], which does not join [1] along axis 0");
}

TEST(OnnxImportError, SplitSizesForOtherOutputs) {
    OnnxFile f = linear_then("Split", {"z", "sizes"}, {"logits", "rest"});
    f.int_initializer("sizes", {1, 1, 0});
    set_int(*f.g().mutable_node(1), "axis", 1);
    expect_error([&] { build_model(f.write("split_sizes"), 4); }, "(Split): split sizes [1, 1, 0] are 3 for 2 outputs");
}

TEST(OnnxImportError, SplitWithoutOutputs) {
    expect_error([&] { build_model(linear_then("Split", {"z"}, {}).write("split_none"), 4); },
                 "(Split): has no outputs");
}

TEST(OnnxImportError, ConvolutionKernelShapeOtherThanTheWeights) {
    onnx::NodeProto *conv;
    OnnxFile f = conv_model(&conv);
    set_ints(*conv, "kernel_shape", {5, 5});
    expect_error([&] { build_model(f.write("kernel"), 2); },
                 "node '/conv/Conv' (Conv): attribute 'kernel_shape' = [5, 5] is not supported; it must be the "
                 "weight's, [3, 3]");
}

// A lookup of consecutive rows is a slice; its first row read from the file.
TEST(OnnxImportError, GatherOfARowBeyondInt64) {
    OnnxFile f;
    f.input("input", {2, 4});
    f.initializer("table", {7, 4}, std::vector<float>(28, 0.1f));
    f.int_initializer("rows", {std::numeric_limits<int64_t>::max()});
    f.node("Gather", {"table", "rows"}, {"g"});
    f.node("Add", {"input", "g"}, {"logits"});
    f.output("logits");
    expect_error([&] { build_model(f.write("gather_range"), 2); },
                 "(Gather): indices from 9223372036854775807 (1 of them) are out of range for extent 7");
}

TEST(OnnxImportError, PaddingThatOverflows) {
    onnx::NodeProto *conv;
    OnnxFile f = conv_model(&conv);
    conv->mutable_attribute(0)->clear_ints();
    for (int i = 0; i < 4; i++) conv->mutable_attribute(0)->add_ints(int64_t{1} << 62);
    expect_error([&] { build_model(f.write("pads_overflow"), 2); },
                 "node '/conv/Conv' (Conv): attribute 'pads' = [4611686018427387904, 4611686018427387904, "
                 "4611686018427387904, 4611686018427387904] is not supported; pads are at most 2147483648");
}

// nn.LayerNorm's expansion (onnx_patterns.cpp) over a value no node defines.
TEST(OnnxImportError, LayerNormExpansionOfAnUndefinedValue) {
    OnnxFile f;
    f.input("input", {2, 3});
    f.initializer("ln.weight", {3}, {1, 1, 1});
    f.initializer("ln.bias", {3}, {0, 0, 0});
    f.initializer("onnx::two", {}, {2});
    f.initializer("onnx::eps", {}, {1e-5f});
    set_ints(f.node("ReduceMean", {"nowhere"}, {"mean"}), "axes", {-1});
    f.node("Sub", {"nowhere", "mean"}, {"d"});
    f.node("Pow", {"d", "onnx::two"}, {"d2"});
    set_ints(f.node("ReduceMean", {"d2"}, {"var"}, "/var"), "axes", {-1});
    f.node("Add", {"var", "onnx::eps"}, {"var_eps"});
    f.node("Sqrt", {"var_eps"}, {"std"});
    f.node("Div", {"d", "std"}, {"norm"});
    f.node("Mul", {"norm", "ln.weight"}, {"scaled"});
    f.node("Add", {"scaled", "ln.bias"}, {"logits"}, "/add_bias");
    f.output("logits");
    expect_error([&] { build_model(f.write("ln_undefined"), 2); },
                 "node '/ReduceMean' (ReduceMean): reads 'nowhere', which no earlier node or initializer defines");
}

}  // namespace
}  // namespace tessera
