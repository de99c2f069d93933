// Coarsening: which tensors share a layout and which operators share a group,
// checked by walking the graph here (gradients, optimizer tensors, element-wise
// runs, backward operators, RNN timesteps), plus an exact expected grouping for
// a hand-built two-layer network and the numbering contract.
#include "tessera/partition/coarsen.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/graph/builder.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"

namespace tessera {
namespace {

// x [4, 6] -> fc1 (linear 5) -> relu -> fc2 (linear 3) -> softmax_xent, SGD momentum.
Graph small_training_graph() {
    Graph g;
    Builder b(g);
    Tensor x = b.data("x", {4, 6});
    Tensor labels = b.data("labels", {4}, DType::I32);
    Tensor h;
    {
        auto s = b.scope("fc1");
        h = b.relu(b.linear(x, 5));
    }
    Tensor logits;
    {
        auto s = b.scope("fc2");
        logits = b.linear(h, 3);
    }
    Tensor loss = b.softmax_xent(logits, labels);
    OptimizerConfig sgd;
    sgd.kind = OptimizerConfig::Kind::Sgd;
    sgd.momentum = 0.9;
    make_training_graph(g, loss.id, sgd);
    return g;
}

NodeId node_named(const Graph &g, const std::string &name) {
    for (NodeId n = 0; n < g.num_nodes(); n++)
        if (g.node(n).call.name == name) return n;
    ADD_FAILURE() << "no node named " << name;
    return 0;
}

int distinct(const std::vector<int> &v) { return static_cast<int>(std::set<int>(v.begin(), v.end()).size()); }

// Group ids are 0..count-1 and each new id is the next one, in element order.
void expect_dense_first_appearance(const std::vector<int> &ids, int count, const char *what) {
    int next = 0;
    for (size_t i = 0; i < ids.size(); i++) {
        ASSERT_GE(ids[i], 0) << what << " " << i;
        ASSERT_LE(ids[i], next) << what << " " << i << ": group " << ids[i] << " appears before group " << next;
        if (ids[i] == next) next++;
    }
    EXPECT_EQ(next, count) << what;
    EXPECT_EQ(distinct(ids), count) << what;
}

// The properties every coarsened training graph must have, checked node by node.
void check_invariants(const Graph &g, const Coarsening &c) {
    ASSERT_EQ(static_cast<int>(c.tensor_group.size()), g.num_tensors());
    ASSERT_EQ(static_cast<int>(c.op_group.size()), g.num_nodes());
    expect_dense_first_appearance(c.tensor_group, c.num_tensor_groups, "tensor groups");
    expect_dense_first_appearance(c.op_group, c.num_op_groups, "op groups");
    auto tname = [&](TensorId t) { return g.tensor(t).name; };

    // One layout per group only makes sense if every member has the same shape.
    std::map<int, TensorId> first_of_group;
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        auto [it, fresh] = first_of_group.emplace(c.tensor_group[t], t);
        if (!fresh) {
            EXPECT_EQ(g.tensor(t).type.shape, g.tensor(it->second).type.shape)
                << tname(t) << " shares a group with " << tname(it->second);
        }
    }
    int gradients = 0;
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        TensorId u = g.tensor(t).updates;
        if (u != kNoTensor) {
            EXPECT_EQ(c.tensor_group[t], c.tensor_group[u]) << tname(t) << " updates " << tname(u);
        }
        TensorId p = g.tensor(t).grad_of;
        if (p == kNoTensor) continue;
        gradients++;
        EXPECT_EQ(c.tensor_group[t], c.tensor_group[p]) << "gradient " << tname(t) << " of " << tname(p);
    }
    EXPECT_GT(gradients, 0);
    for (NodeId n = 0; n < g.num_nodes(); n++) {
        const Node &node = g.node(n);
        if (node.backward) {
            ASSERT_NE(node.forward, kNoNode) << node.call.name;
            EXPECT_EQ(c.op_group[n], c.op_group[node.forward])
                << node.call.name << " is not with " << g.node(node.forward).call.name;
        }
        if (node.optimizer) {
            TensorId w = node.inputs[0];
            for (TensorId t : node.inputs) {
                if (g.tensor(t).type.shape != g.tensor(w).type.shape) continue;
                EXPECT_EQ(c.tensor_group[t], c.tensor_group[w]) << tname(t) << " vs weight " << tname(w);
            }
            // The update joins the op group of an operator of the forward pass that reads the weight.
            bool with_reader = false;
            for (NodeId r = 0; r < g.num_nodes(); r++) {
                const Node &reader = g.node(r);
                if (reader.backward || reader.optimizer) continue;
                for (TensorId t : reader.inputs) with_reader = with_reader || (t == w && c.op_group[r] == c.op_group[n]);
            }
            EXPECT_TRUE(with_reader) << node.call.name << " is in no op group of a forward reader of " << tname(w);
            for (TensorId t : node.outputs)
                EXPECT_EQ(c.tensor_group[t], c.tensor_group[w]) << tname(t) << " vs weight " << tname(w);
        }
        bool pointwise = node.call.kind == OpKind::Relu || node.call.kind == OpKind::Tanh ||
                         node.call.kind == OpKind::Sigmoid || node.call.kind == OpKind::Gelu;
        if (pointwise && !node.backward) {
            EXPECT_EQ(c.tensor_group[node.outputs[0]], c.tensor_group[node.inputs[0]]) << node.call.name;
        }
    }
}

// The forward operator that reads a parameter; the test graphs read each once.
NodeId forward_reader(const Graph &g, TensorId param) {
    NodeId found = kNoNode;
    for (NodeId n = 0; n < g.num_nodes(); n++) {
        const Node &node = g.node(n);
        if (node.backward || node.optimizer) continue;
        for (TensorId t : node.inputs)
            if (t == param) {
                EXPECT_EQ(found, kNoNode) << g.tensor(param).name << " is read by two forward operators";
                found = n;
            }
    }
    return found;
}

TEST(Coarsen, SmallNetworkInvariants) {
    Graph g = small_training_graph();
    Coarsening c = coarsen(g);
    check_invariants(g, c);

    // Each parameter with its gradient, its momentum and the update's outputs.
    for (TensorId w : g.with_role(TensorRole::Param)) {
        const std::string &name = g.tensor(w).name;
        NodeId update = node_named(g, name + ".update");
        TensorId grad = g.node(update).inputs[1];
        EXPECT_EQ(g.tensor(grad).grad_of, w) << name;
        std::vector<TensorId> members{grad, g.tensor_named(name + ".momentum")};
        for (TensorId t : g.node(update).outputs) members.push_back(t);
        for (TensorId t : members) EXPECT_EQ(c.tensor_group[t], c.tensor_group[w]) << g.tensor(t).name << " vs " << name;

        // The update joins the op group of the forward operator that reads the weight.
        NodeId reader = forward_reader(g, w);
        ASSERT_NE(reader, kNoNode) << name;
        OpKind k = g.node(reader).call.kind;
        EXPECT_TRUE(k == OpKind::Matmul || k == OpKind::BiasAdd) << name;
        EXPECT_EQ(c.op_group[update], c.op_group[reader]) << name << ".update vs " << g.node(reader).call.name;
    }

    NodeId relu = node_named(g, "fc1.relu");
    EXPECT_EQ(c.tensor_group[g.node(relu).outputs[0]], c.tensor_group[g.node(relu).inputs[0]]);

    // Every backward node sits with its forward node; counted here, not from the summary.
    int backward = 0;
    for (NodeId n = 0; n < g.num_nodes(); n++) {
        if (!g.node(n).backward) continue;
        backward++;
        EXPECT_EQ(c.op_group[n], c.op_group[g.node(n).forward]) << g.node(n).call.name;
    }
    EXPECT_GE(backward, 6);
}

// The whole grouping of the small network, written out by hand.
TEST(Coarsen, SmallNetworkExactGroups) {
    Graph g = small_training_graph();
    Coarsening c = coarsen(g);
    auto param_group = [](const std::string &p, const std::string &grad) {
        return std::vector<std::string>{p, grad, p + ".momentum", p + ".update:0", p + ".update:1"};
    };
    std::vector<std::vector<std::string>> tensors = {
        {"x"},
        {"labels"},
        param_group("fc1.w", "fc1.matmul.dw"),
        param_group("fc1.b", "fc1.bias_add.db"),
        param_group("fc2.w", "fc2.matmul.dw"),
        param_group("fc2.b", "fc2.bias_add.db"),
        // matmul -> bias_add -> relu is one element-wise run, with the gradients.
        {"fc1.matmul", "fc1.bias_add", "fc1.relu", "fc1.relu.dx", "fc2.matmul.dx"},
        {"fc2.matmul", "fc2.bias_add", "loss.dlogits"},
        {"loss", "loss.grad_seed"},
    };
    std::map<TensorId, int> expected_tensor;
    for (size_t i = 0; i < tensors.size(); i++)
        for (const std::string &name : tensors[i]) expected_tensor[g.tensor_named(name)] = static_cast<int>(i);
    ASSERT_EQ(static_cast<int>(expected_tensor.size()), g.num_tensors()) << "the listing misses a tensor";
    for (TensorId a = 0; a < g.num_tensors(); a++)
        for (TensorId b = a + 1; b < g.num_tensors(); b++)
            EXPECT_EQ(c.tensor_group[a] == c.tensor_group[b], expected_tensor[a] == expected_tensor[b])
                << g.tensor(a).name << " and " << g.tensor(b).name;
    EXPECT_EQ(distinct(c.tensor_group), static_cast<int>(tensors.size()));

    std::vector<std::vector<std::string>> ops = {
        {"fc1.matmul", "fc1.bias_add", "fc1.relu", "fc1.relu.dx", "fc1.bias_add.db", "fc1.matmul.dw", "fc1.w.update",
         "fc1.b.update"},
        {"fc2.matmul", "fc2.bias_add", "fc2.bias_add.db", "fc2.matmul.dx", "fc2.matmul.dw", "fc2.w.update",
         "fc2.b.update"},
        {"loss", "loss.dlogits"},
    };
    std::map<NodeId, int> expected_op;
    for (size_t i = 0; i < ops.size(); i++)
        for (const std::string &name : ops[i]) expected_op[node_named(g, name)] = static_cast<int>(i);
    ASSERT_EQ(static_cast<int>(expected_op.size()), g.num_nodes()) << "the listing misses a node";
    for (NodeId a = 0; a < g.num_nodes(); a++)
        for (NodeId b = a + 1; b < g.num_nodes(); b++)
            EXPECT_EQ(c.op_group[a] == c.op_group[b], expected_op[a] == expected_op[b])
                << g.node(a).call.name << " and " << g.node(b).call.name;
    EXPECT_EQ(distinct(c.op_group), static_cast<int>(ops.size()));
    EXPECT_FALSE(c.summary.empty());
}

// Without coarsening every node is its own group, and so is every tensor but
// an optimizer output, which must share the layout of the tensor it replaces.
TEST(Coarsen, DisabledGivesOneGroupEachButUpdatesKeepTheirTensors) {
    Graph g = small_training_graph();
    Coarsening c = coarsen(g, false);
    ASSERT_EQ(static_cast<int>(c.tensor_group.size()), g.num_tensors());
    ASSERT_EQ(static_cast<int>(c.op_group.size()), g.num_nodes());
    int updated = 0;
    for (TensorId a = 0; a < g.num_tensors(); a++) {
        updated += g.tensor(a).updates != kNoTensor;
        for (TensorId b = a + 1; b < g.num_tensors(); b++)
            EXPECT_EQ(c.tensor_group[a] == c.tensor_group[b], g.tensor(a).updates == b || g.tensor(b).updates == a)
                << g.tensor(a).name << " and " << g.tensor(b).name;
    }
    ASSERT_GT(updated, 0);
    for (NodeId n = 0; n < g.num_nodes(); n++) EXPECT_EQ(c.op_group[n], n);
    EXPECT_EQ(c.num_tensor_groups, g.num_tensors() - updated);
    EXPECT_EQ(c.num_op_groups, g.num_nodes());
    EXPECT_EQ(c.summary, std::vector<std::string>{std::to_string(updated) +
                                                  " updated tensors tied to the layout of the tensor they replace"});
}

TEST(Coarsen, Deterministic) {
    Graph g = small_training_graph();
    Coarsening a = coarsen(g), b = coarsen(g);
    EXPECT_EQ(a.tensor_group, b.tensor_group);
    EXPECT_EQ(a.op_group, b.op_group);
    EXPECT_EQ(a.summary, b.summary);
}

TEST(TimestepKey, Cases) {
    EXPECT_EQ(timestep_key("lstm0.t3.gates"), "lstm0.t*.gates");
    EXPECT_EQ(timestep_key("t12"), "t*");
    EXPECT_EQ(timestep_key("a.t.b"), "a.t.b");
    EXPECT_EQ(timestep_key("at3.x"), "at3.x");
    EXPECT_EQ(timestep_key("x.t3"), "x.t*");
    EXPECT_EQ(timestep_key("lstm1.t0.mul_1.grad_sum"), "lstm1.t*.mul_1.grad_sum");
    EXPECT_EQ(timestep_key("x.t3a"), "x.t3a");
    EXPECT_EQ(timestep_key("x.T3"), "x.T3");
    EXPECT_EQ(timestep_key(""), "");
    EXPECT_EQ(timestep_key("t"), "t");
    EXPECT_EQ(timestep_key("lstm0.t3.gates"), timestep_key("lstm0.t17.gates"));
}

struct Lstm {
    Model model;
    Coarsening c;
};

Lstm lstm_training() {
    Lstm l{build_model("lstm:layers=2,hidden=16,seq=4,vocab=10", 2), {}};
    make_training_graph(l.model.graph, l.model.loss, OptimizerConfig{});
    l.c = coarsen(l.model.graph);
    return l;
}

TEST(Coarsen, LstmInvariants) {
    Lstm l = lstm_training();
    check_invariants(l.model.graph, l.c);
}

TEST(Coarsen, LstmMergesTimesteps) {
    Lstm l = lstm_training();
    const Graph &g = l.model.graph;
    const Coarsening &c = l.c;
    const int groups = distinct(c.op_group);
    EXPECT_EQ(groups, c.num_op_groups);
    EXPECT_LT(groups * 5, g.num_nodes()) << groups << " op groups for " << g.num_nodes() << " nodes";
    EXPECT_LT(distinct(c.tensor_group) * 3, g.num_tensors());

    // Nodes whose names differ only in the timestep: one op group, and output i of
    // each in one tensor group.
    std::map<std::string, std::vector<NodeId>> by_key;
    for (NodeId n = 0; n < g.num_nodes(); n++) {
        std::string key = timestep_key(g.node(n).call.name);
        if (key != g.node(n).call.name) by_key[key].push_back(n);
    }
    int keys_on_every_step = 0;
    for (const auto &[key, nodes] : by_key) {
        if (nodes.size() == 4) keys_on_every_step++;
        const Node &first = g.node(nodes[0]);
        for (NodeId n : nodes) {
            const Node &node = g.node(n);
            EXPECT_EQ(c.op_group[n], c.op_group[nodes[0]]) << node.call.name << " vs " << first.call.name;
            ASSERT_EQ(node.outputs.size(), first.outputs.size()) << key;
            for (size_t i = 0; i < node.outputs.size(); i++) {
                ASSERT_EQ(g.tensor(node.outputs[i]).type.shape, g.tensor(first.outputs[i]).type.shape) << key;
                EXPECT_EQ(c.tensor_group[node.outputs[i]], c.tensor_group[first.outputs[i]])
                    << g.tensor(node.outputs[i]).name << " vs " << g.tensor(first.outputs[i]).name;
            }
        }
    }
    EXPECT_GE(keys_on_every_step, 2 * 8);  // per layer at least the matmul, bias_add and gate nodes

    // The input projection of every step, by name.
    for (int layer = 1; layer <= 2; layer++) {
        std::string prefix = "lstm" + std::to_string(layer) + ".t";
        NodeId t0 = node_named(g, prefix + "0.matmul");
        for (int t = 1; t < 4; t++) {
            NodeId n = node_named(g, prefix + std::to_string(t) + ".matmul");
            EXPECT_EQ(c.op_group[n], c.op_group[t0]);
            EXPECT_EQ(c.tensor_group[g.node(n).outputs[0]], c.tensor_group[g.node(t0).outputs[0]]);
        }
        // All four steps' matmuls read the layer's one wx, and its update joins them.
        NodeId update = node_named(g, "lstm" + std::to_string(layer) + ".wx.update");
        EXPECT_EQ(c.op_group[update], c.op_group[t0]);
    }
    // Different layers stay apart.
    EXPECT_NE(c.op_group[node_named(g, "lstm1.t0.matmul")], c.op_group[node_named(g, "lstm2.t0.matmul")]);
}

// Tofu ties "the same tensor of every timestep", found here by what the tensors
// are rather than by name: the hidden state h_{t-1} is the first input of step
// t's h Wh matmul, and every step's cell state c_t is what its tanh_1 reads.
// Step 0 names its nodes differently (it has no h Wh, add or f * c), so this
// checks the ties survive that.
TEST(Coarsen, LstmStateOfEveryStepSharesAGroup) {
    Lstm l = lstm_training();
    const Graph &g = l.model.graph;
    for (int layer = 1; layer <= 2; layer++) {
        std::string scope = "lstm" + std::to_string(layer) + ".t";
        std::vector<TensorId> hidden, cell;
        for (int t = 0; t < 4; t++) {
            if (t > 0) hidden.push_back(g.node(node_named(g, scope + std::to_string(t) + ".matmul_1")).inputs[0]);
            const Node &tanh_c = g.node(node_named(g, scope + std::to_string(t) + ".tanh_1"));
            ASSERT_EQ(tanh_c.call.kind, OpKind::Tanh);
            cell.push_back(tanh_c.inputs[0]);
        }
        // The LSTM feeds each step's h into the next; the first one comes from step 0.
        EXPECT_EQ(g.tensor(hidden[0]).producer, node_named(g, scope + "0.mul_1"));
        EXPECT_EQ(g.tensor(cell[0]).producer, node_named(g, scope + "0.mul"));
        for (size_t i = 1; i < hidden.size(); i++)
            EXPECT_EQ(l.c.tensor_group[hidden[i]], l.c.tensor_group[hidden[0]])
                << g.tensor(hidden[i]).name << " (h_" << i << ") vs " << g.tensor(hidden[0]).name << " (h_0)";
        for (size_t i = 1; i < cell.size(); i++)
            EXPECT_EQ(l.c.tensor_group[cell[i]], l.c.tensor_group[cell[0]])
                << g.tensor(cell[i]).name << " (c_" << i << ") vs " << g.tensor(cell[0]).name << " (c_0)";
        // The gates' pre-activation [batch, 4 hidden] is not the state [batch, hidden].
        EXPECT_NE(l.c.tensor_group[hidden[0]],
                  l.c.tensor_group[g.node(node_named(g, scope + "0.bias_add")).outputs[0]]);
    }
}

// The same invariants on every zoo model, small, with SGD and with Adam.
TEST(Coarsen, ZooModelsInvariants) {
    const std::vector<std::string> specs = {
        "mlp:layers=3,hidden=8,input=6,classes=3",
        "cnn:convs=2,channels=4,hidden=8",
        "wresnet:depth=18,base=4,image=16",
        "lstm:layers=1,hidden=8,seq=3,vocab=7",
        "transformer:layers=2,d_model=8,heads=2,seq=4,vocab=9",
    };
    for (const std::string &spec : specs)
        for (auto kind : {OptimizerConfig::Kind::Sgd, OptimizerConfig::Kind::Adam}) {
            SCOPED_TRACE(spec + " " + optimizer_name(kind));
            Model m = build_model(spec, 2);
            OptimizerConfig cfg;
            cfg.kind = kind;
            make_training_graph(m.graph, m.loss, cfg);
            Coarsening c = coarsen(m.graph);
            check_invariants(m.graph, c);
            EXPECT_LT(c.num_op_groups, m.graph.num_nodes());
            EXPECT_LT(c.num_tensor_groups, m.graph.num_tensors());
        }
}

}  // namespace
}  // namespace tessera
