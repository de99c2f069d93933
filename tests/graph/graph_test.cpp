#include <sys/resource.h>

#include <chrono>

#include <gtest/gtest.h>

#include "expect_error.h"
#include "tessera/error.h"
#include "tessera/graph/builder.h"
#include "tessera/graph/optimizer.h"

namespace tessera {
namespace {

using test::expect_error;

TEST(Graph, BuilderNamesShapesAndRoles) {
    Graph g;
    Builder b(g);
    Tensor x = b.data("x", {8, 784});
    Tensor h;
    {
        auto s = b.scope("fc1");
        h = b.relu(b.linear(x, 32));
    }
    EXPECT_EQ(h.shape(), (Shape{8, 32}));
    EXPECT_EQ(g.tensor(g.tensor_named("fc1.w")).role, TensorRole::Param);
    EXPECT_EQ(g.tensor(g.tensor_named("fc1.w")).init, Init::he_normal(784));
    EXPECT_EQ(g.tensor(g.tensor_named("fc1.b")).type.shape, (Shape{32}));
    EXPECT_EQ(g.param_count(), 784 * 32 + 32);
    EXPECT_EQ(g.num_nodes(), 3);  // matmul, bias_add, relu
    EXPECT_EQ(g.node(0).call.name, "fc1.matmul");
    auto consumers = g.consumers();
    EXPECT_EQ(consumers[x.id], (std::vector<NodeId>{0}));
    EXPECT_TRUE(consumers[h.id].empty());
    // Defaults are filled in when a node is added, so every consumer sees them.
    EXPECT_TRUE(g.node(1).call.attrs.has("axis"));
}

TEST(Graph, UniqueNamesAndErrors) {
    Graph g;
    Builder b(g);
    Tensor x = b.data("x", {2, 3});
    Tensor y1 = b.relu(x), y2 = b.relu(x);
    EXPECT_EQ(y1.name(), "relu");
    EXPECT_EQ(y2.name(), "relu_1");
    expect_error([&] { b.data("x", {2}); }, "already has a tensor or node named 'x'");
    expect_error([&] { b.data("z", {2, 0}); }, "every extent must be positive");
    expect_error([&] { b.matmul(x, x); }, "matmul 'matmul'");
    expect_error([&] { g.output("logits"); }, "no output named 'logits'");
    expect_error([&] { g.tensor_named("nope"); }, "no tensor named 'nope'");
}

// replace_nodes keeps every tensor and re-derives producers and node names:
// two communication nodes merged into one with both outputs, the consumer
// reordered after it. Orders that read before producing, produce twice or
// leave a tensor unproduced are errors naming the node or tensor.
TEST(Graph, ReplaceNodesMergesAndReorders) {
    Graph g;
    const TensorId x = g.add_data("x", TensorType{DType::F32, {4}});
    const TensorId a = g.add_comm_node("a", Attrs{}, {x}, TensorType{DType::F32, {4}}, TensorRole::Gradient);
    const TensorId b = g.add_comm_node("b", Attrs{}, {x}, TensorType{DType::F32, {4}}, TensorRole::Gradient);
    const TensorId sum = g.add_node(OpCall{OpKind::Add, "sum", {}}, {a, b})[0];
    std::vector<Node> nodes = g.nodes();
    Node both = nodes[0];
    both.call.name = "both";
    both.inputs = {x, x};
    both.outputs = {a, b};
    g.replace_nodes({both, nodes[2]});
    ASSERT_EQ(g.num_nodes(), 2);
    EXPECT_EQ(g.tensor(a).producer, 0);
    EXPECT_EQ(g.tensor(b).producer, 0);
    EXPECT_EQ(g.tensor(sum).producer, 1);
    EXPECT_EQ(g.tensor(a).name, "a");
    EXPECT_TRUE(g.has_name("both"));
    Graph bad = g;
    expect_error([&] { bad.replace_nodes({g.node(1), g.node(0)}); }, "node 'sum' reads tensor");
    expect_error([&] { bad.replace_nodes({g.node(0), g.node(0), g.node(1)}); }, "produced twice");
    expect_error([&] { bad.replace_nodes({g.node(0)}); }, "no node produces tensor 'sum'");
}

// rearrange_nodes moves the nodes that stay instead of copying them: the
// same merge as above, with a backward node's forward link, gives the graph
// replace_nodes gives from copies. A refused rearrangement (a node placed
// twice, one out of range, an added name that a kept node has, a read before
// its producer) leaves the graph as it was.
TEST(Graph, RearrangeNodesEqualsReplaceNodes) {
    Graph g;
    const TensorId x = g.add_data("x", TensorType{DType::F32, {4}});
    const TensorId a = g.add_comm_node("a", Attrs{}, {x}, TensorType{DType::F32, {4}}, TensorRole::Gradient);
    const TensorId b = g.add_comm_node("b", Attrs{}, {x}, TensorType{DType::F32, {4}}, TensorRole::Gradient);
    g.add_node(OpCall{OpKind::Add, "sum", {}}, {a, b});
    g.add_node(OpCall{OpKind::Relu, "relu_b", {}}, {b});
    g.set_forward(3, 1);
    Node both = g.node(0);
    both.call.name = "both";
    both.inputs = {x, x};
    both.outputs = {a, b};
    Graph replaced = g;
    replaced.replace_nodes({both, g.node(3), g.node(2)});
    Graph refused = g;
    expect_error([&] { refused.rearrange_nodes({{0, {}}, {0, {}}, {1, {}}, {2, {}}, {3, {}}}); }, "placed twice");
    expect_error([&] { refused.rearrange_nodes({{7, {}}}); }, "node 7 does not exist");
    Node clash = both;
    clash.call.name = "sum";
    expect_error([&] { refused.rearrange_nodes({{kNoNode, clash}, {3, {}}, {2, {}}}); }, "named 'sum'");
    expect_error([&] { refused.rearrange_nodes({{2, {}}, {kNoNode, both}, {3, {}}}); }, "reads tensor");
    EXPECT_TRUE(refused == g);
    g.rearrange_nodes({{kNoNode, both}, {3, {}}, {2, {}}});
    EXPECT_TRUE(g == replaced);
    EXPECT_EQ(g.node(1).forward, 0);
    EXPECT_TRUE(g.has_name("relu_b"));
}

// unique_name goes on from the last suffix it gave a base, rather than
// probing every name before it: 20,000 nodes of one name build in well under a
// second (they took a minute and a half), and the names are the same as ever.
TEST(Graph, ManyNodesOfOneNameBuildQuickly) {
    Graph g;
    Builder b(g);
    Tensor x = b.data("x", {2});
    b.data("relu_3", {2});  // taken by hand: the suffixes go around it
    EXPECT_EQ(g.unique_name("relu"), "relu");
    auto start = std::chrono::steady_clock::now();
    std::vector<std::string> names;
    for (int i = 0; i < 20000; i++) names.push_back(b.relu(x).name());
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5);
    EXPECT_EQ(names[0], "relu");
    EXPECT_EQ(names[2], "relu_2");
    EXPECT_EQ(names[3], "relu_4");
    EXPECT_EQ(names.back(), "relu_20000");
    EXPECT_EQ(g.unique_name("relu"), "relu_20001");
    EXPECT_EQ(g.unique_name("relu"), "relu_20001");  // asking does not take the name
}

TEST(Graph, OptimizerUpdatesInPlace) {
    for (auto kind : {OptimizerConfig::Kind::Sgd, OptimizerConfig::Kind::Adam}) {
        Graph g;
        Builder b(g);
        Tensor x = b.data("x", {4, 3});
        Tensor labels = b.data("labels", {4}, DType::I32);
        Tensor loss = b.softmax_xent(b.linear(x, 5), labels);
        OptimizerConfig cfg;
        cfg.kind = kind;
        auto grads = make_training_graph(g, loss.id, cfg);
        ASSERT_EQ(grads.size(), 2u);
        int updates = 0;
        for (const TensorInfo &t : g.tensors())
            if (t.updates != kNoTensor) {
                updates++;
                EXPECT_TRUE(is_persistent(g.tensor(t.updates).role));
                EXPECT_EQ(g.tensor(t.updates).type, t.type);
            }
        EXPECT_EQ(updates, kind == OptimizerConfig::Kind::Sgd ? 4 : 6);
        EXPECT_EQ(g.find_tensor(kStepTensor).has_value(), kind == OptimizerConfig::Kind::Adam);
    }
    expect_error([] { optimizer_from_name("lbfgs"); }, "valid optimizers: sgd (with momentum), adam");
}

TEST(Graph, TenBillionParametersAllocateNoTensorMemory) {
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    Graph g;
    Builder b(g);
    Tensor x = b.data("x", {64, 50000});
    for (int i = 0; i < 5; i++) {
        auto s = b.scope("layer" + std::to_string(i));
        x = b.relu(b.linear(x, 50000));
    }
    Tensor loss = b.softmax_xent(b.linear(x, 10), b.data("labels", {64}, DType::I32));
    make_training_graph(g, loss.id, OptimizerConfig{});
    getrusage(RUSAGE_SELF, &after);
    EXPECT_GE(g.param_count(), 10'000'000'000LL);
    // 40 GB of weights would show in the resident set; the graph is kilobytes.
    EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "KiB of growth";
}

}  // namespace
}  // namespace tessera
