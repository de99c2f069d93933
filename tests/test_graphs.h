// Graphs, node orders and inputs shared by the executor and memory-plan tests.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "tessera/exec/executor.h"
#include "tessera/graph/builder.h"
#include "tessera/graph/optimizer.h"

namespace tessera::test {

inline TensorType f32(Shape s) { return TensorType{DType::F32, std::move(s)}; }

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

// Writes every Data tensor of the executor's graph from a generator seeded
// with `seed`: Adam's step tensor gets step + 1, i32 tensors (labels) values
// in [0, 9], f32 tensors values in [-1, 1).
inline void feed_random(Executor &ex, int step, uint32_t seed) {
    const Graph &g = ex.graph();
    std::mt19937 rng(seed);
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const TensorInfo &info = g.tensor(t);
        if (info.role != TensorRole::Data || storage_root(g, t) != t) continue;
        const size_t n = static_cast<size_t>(info.type.elements());
        if (info.name == kStepTensor) {
            int32_t s = step + 1;
            ex.write(t, &s, sizeof s);
        } else if (info.type.dtype == DType::I32) {
            std::vector<int32_t> v(n);
            for (int32_t &x : v) x = std::uniform_int_distribution<int32_t>(0, 9)(rng);
            ex.write(t, v.data(), n * 4);
        } else {
            std::vector<float> v(n);
            for (float &x : v) x = std::uniform_real_distribution<float>(-1, 1)(rng);
            ex.write(t, v.data(), n * 4);
        }
    }
}

}  // namespace tessera::test
