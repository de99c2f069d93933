// The swap tests' swap problems, and their small Adam-trained graphs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/graph/builder.h"
#include "tessera/graph/optimizer.h"
#include "tessera/program/memory_plan.h"
#include "tessera/swap/swap_plan.h"

namespace tessera::test {

// The swap problem of `g` in its default order: `times` per node, within
// `budget` bytes, over a host link of `link_bytes_per_s` each way.
inline SwapProblem timed_problem(const Graph &g, const std::vector<double> &times, int64_t budget,
                                 double link_bytes_per_s) {
    SwapProblem p;
    p.graph = &g;
    p.order = default_order(g);
    p.node_time_s = times;
    p.budget = budget;
    p.h2d_bytes_per_s = p.d2h_bytes_per_s = link_bytes_per_s;
    return p;
}

// Three [32, 32] linear layers (ReLU between; biases when `bias`) on a
// [16, 32] batch, into softmax cross-entropy: the loss, also output "loss".
inline TensorId mlp_loss(Graph &g, bool bias) {
    Builder bl(g);
    Tensor x = bl.data("images", {16, 32});
    Tensor labels = bl.data("labels", {16}, DType::I32);
    Tensor h = x;
    for (int i = 0; i < 3; i++) {
        auto scope = bl.scope("fc" + std::to_string(i));
        h = bl.linear(h, 32, bias);
        if (i < 2) h = bl.relu(h);
    }
    Tensor loss = bl.softmax_xent(h, labels);
    g.set_output("loss", loss.id);
    return loss.id;
}

// Adam's updates appended to `g`, and its swap problem in the default order:
// every operator 1 ms, each update 2 ms on the host, and a slow link (a
// [32, 32] tensor takes 4 ms each way). The budget is left at 0.
inline SwapProblem adam_swap_problem(Graph &g, TensorId loss) {
    OptimizerConfig adam;
    adam.kind = OptimizerConfig::Kind::Adam;
    make_training_graph(g, loss, adam);
    SwapProblem p = timed_problem(g, std::vector<double>(g.num_nodes(), 1e-3), 0, 4096 / 4e-3);
    p.host_node_time_s.assign(g.num_nodes(), 0.0);
    for (NodeId n = 0; n < g.num_nodes(); n++)
        if (g.node(n).optimizer) p.host_node_time_s[n] = 2e-3;
    return p;
}

}  // namespace tessera::test
