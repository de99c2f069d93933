// Graphs and node orders shared by the executor and memory-plan tests.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "tessera/graph/builder.h"
#include "tessera/graph/optimizer.h"

namespace tessera::test {

// An MLP training graph: "images" [batch, widths[0]] through linear layers of
// the given widths (ReLU between), softmax cross-entropy, and the optimizer.
// Outputs "logits" and "loss".
inline Graph mlp_training_graph(int64_t batch, const std::vector<int64_t> &widths, OptimizerConfig::Kind opt) {
    Graph g;
    Builder b(g);
    Tensor x = b.data("images", {batch, widths[0]});
    Tensor labels = b.data("labels", {batch}, DType::I32);
    Tensor h = x;
    for (size_t i = 1; i < widths.size(); i++) {
        auto scope = b.scope("fc" + std::to_string(i));
        h = b.linear(h, widths[i]);
        if (i + 1 < widths.size()) h = b.relu(h);
    }
    g.set_output("logits", h.id);
    Tensor loss = b.softmax_xent(h, labels);
    g.set_output("loss", loss.id);
    OptimizerConfig cfg;
    cfg.kind = opt;
    cfg.lr = 0.05;
    make_training_graph(g, loss.id, cfg);
    return g;
}

// A uniformly random choice among the ready nodes at each step.
inline std::vector<NodeId> random_topological_order(const Graph &g, std::mt19937 &rng) {
    std::vector<int> missing(g.num_nodes(), 0);
    std::vector<std::vector<NodeId>> readers = g.consumers();
    for (NodeId n = 0; n < g.num_nodes(); n++)
        for (TensorId t : g.node(n).inputs) missing[n] += g.tensor(t).producer != kNoNode;
    std::vector<NodeId> ready, order;
    for (NodeId n = 0; n < g.num_nodes(); n++)
        if (missing[n] == 0) ready.push_back(n);
    while (!ready.empty()) {
        size_t k = std::uniform_int_distribution<size_t>(0, ready.size() - 1)(rng);
        NodeId n = ready[k];
        ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(k));
        order.push_back(n);
        for (TensorId t : g.node(n).outputs)
            for (NodeId c : readers[t])
                for (TensorId in : g.node(c).inputs)
                    if (in == t && --missing[c] == 0) ready.push_back(c);
    }
    return order;
}

}  // namespace tessera::test
