// Prefetched weight gathers (lower.h, prefetch_weight_gathers): under FSDP
// every operator that reads a weight first gathers it from the shards, and a
// gather placed right before its operator would leave the compute stream
// waiting for it. Each such gather moves up to just before the previous
// operator that read a gathered weight, so it runs on the comm stream while
// that layer computes; at most two layers' gathered weights are live.
#include "tessera/graph/comm_attrs.h"
#include "tessera/partition/lower.h"

namespace tessera {

namespace {

// A redistribution of a weight shard (a graph input of role Param).
bool gathers_weight(const Graph &g, const Node &node) {
    if (!node.comm || node.inputs.size() != 1) return false;
    const TensorInfo &in = g.tensor(node.inputs[0]);
    if (in.role != TensorRole::Param || in.producer != kNoNode) return false;
    return read_comm_attrs(node.call, in.type.rank()).kind == CommNodeKind::Redistribute;
}

}  // namespace

void prefetch_weight_gathers(DeviceGraph &dg) {
    const Graph &g = dg.graph;
    std::vector<bool> gathered(static_cast<size_t>(g.num_tensors()), false);
    std::vector<Node> out;
    out.reserve(static_cast<size_t>(g.num_nodes()));
    int last_reader = -1;  // in `out`: the latest operator that read a gathered weight
    int moved = 0;
    for (const Node &node : g.nodes()) {
        if (gathers_weight(g, node)) {
            for (TensorId t : node.outputs) gathered[t] = true;
            if (last_reader < 0) {
                out.push_back(node);
                continue;
            }
            out.insert(out.begin() + last_reader, node);
            last_reader++;
            moved++;
            continue;
        }
        bool reads = false;
        for (TensorId t : node.inputs) reads = reads || gathered[t];
        out.push_back(node);
        if (reads && !node.comm) last_reader = static_cast<int>(out.size()) - 1;
    }
    if (moved > 0) dg.graph.replace_nodes(std::move(out));
}

}  // namespace tessera
