#include "tessera/partition/coarsen.h"

#include <map>
#include <numeric>

#include "tessera/error.h"

namespace tessera {

namespace {

class UnionFind {
public:
    explicit UnionFind(int n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
    int find(int x) {
        while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
        return x;
    }
    // Returns whether two groups were merged.
    bool unite(int a, int b) {
        a = find(a);
        b = find(b);
        if (a == b) return false;
        if (b < a) std::swap(a, b);
        parent_[b] = a;  // the lower id is the root, so numbering follows graph order
        return true;
    }
    // Dense group numbers in order of first appearance.
    std::vector<int> numbering(int *count) {
        std::vector<int> id(parent_.size(), -1), out(parent_.size());
        int next = 0;
        for (size_t i = 0; i < parent_.size(); i++) {
            int r = find(static_cast<int>(i));
            if (id[r] < 0) id[r] = next++;
            out[i] = id[r];
        }
        *count = next;
        return out;
    }

private:
    std::vector<int> parent_;
};

// Element-wise operators with one tensor input (bias_add's bias is a broadcast
// parameter, not the streamed input): their output is laid out as input 0.
bool unary_elementwise(OpKind k) {
    switch (k) {
    case OpKind::Relu:
    case OpKind::Gelu:
    case OpKind::Tanh:
    case OpKind::Sigmoid:
    case OpKind::Erf:
    case OpKind::Scale:
    case OpKind::Dropout:
    case OpKind::Cast:
    case OpKind::BiasAdd: return true;
    default: return false;
    }
}

}  // namespace

std::string timestep_key(const std::string &name) {
    size_t start = 0;
    while (start <= name.size()) {
        size_t end = name.find('.', start);
        if (end == std::string::npos) end = name.size();
        if (end - start >= 2 && name[start] == 't' &&
            name.find_first_not_of("0123456789", start + 1) >= end)
            return name.substr(0, start) + "t*" + name.substr(end);
        start = end + 1;
    }
    return name;
}

Coarsening coarsen(const Graph &g, bool enabled) {
    const int nt = g.num_tensors(), nn = g.num_nodes();
    UnionFind tensors(nt), nodes(nn);
    int tied_grads = 0, tied_weights = 0, tied_elementwise = 0, tied_steps = 0;
    int grouped_backward = 0, grouped_updates = 0, merged_elementwise = 0, merged_steps = 0;
    auto same_shape = [&](TensorId a, TensorId b) { return g.tensor(a).type.shape == g.tensor(b).type.shape; };

    // Not a choice but a rule, so it holds without coarsening too: an
    // optimizer output replaces the tensor it updates in place (the same
    // storage), so both must have one layout at every level.
    int tied_updates = 0;
    for (TensorId t = 0; t < nt; t++) {
        TensorId u = g.tensor(t).updates;
        if (u != kNoTensor) tied_updates += tensors.unite(t, u);
    }
    if (enabled) {
        for (TensorId t = 0; t < nt; t++) {
            TensorId p = g.tensor(t).grad_of;
            if (p != kNoTensor && same_shape(t, p)) tied_grads += tensors.unite(t, p);
        }
        std::map<std::string, NodeId> first_step;  // timestep key -> first node with it
        for (NodeId n = 0; n < nn; n++) {
            const Node &node = g.node(n);
            if (node.forward != kNoNode) grouped_backward += nodes.unite(n, node.forward);
            if (node.optimizer) {
                TensorId w = node.inputs[0];
                for (TensorId t : node.inputs)
                    if (same_shape(t, w)) tied_weights += tensors.unite(t, w);
                for (TensorId t : node.outputs)
                    if (same_shape(t, w)) tied_weights += tensors.unite(t, w);
                // The update joins the forward operator whose backward made the gradient.
                if (node.inputs.size() > 1) {
                    NodeId p = g.tensor(node.inputs[1]).producer;
                    if (p != kNoNode) {
                        NodeId f = g.node(p).forward != kNoNode ? g.node(p).forward : p;
                        grouped_updates += nodes.unite(n, f);
                    }
                }
            }
            if (unary_elementwise(node.call.kind) && !node.backward &&
                same_shape(node.outputs[0], node.inputs[0])) {
                tied_elementwise += tensors.unite(node.outputs[0], node.inputs[0]);
                NodeId p = g.tensor(node.inputs[0]).producer;
                if (p != kNoNode && !g.node(p).backward && !g.node(p).optimizer)
                    merged_elementwise += nodes.unite(n, p);
            }
            std::string key = timestep_key(node.call.name);
            if (key != node.call.name) {
                auto [it, fresh] = first_step.emplace(key, n);
                if (!fresh) {
                    const Node &first = g.node(it->second);
                    merged_steps += nodes.unite(n, it->second);
                    if (first.outputs.size() == node.outputs.size())
                        for (size_t i = 0; i < node.outputs.size(); i++)
                            if (same_shape(first.outputs[i], node.outputs[i]))
                                tied_steps += tensors.unite(first.outputs[i], node.outputs[i]);
                }
            }
        }
    }
    Coarsening c;
    c.tensor_group = tensors.numbering(&c.num_tensor_groups);
    c.op_group = nodes.numbering(&c.num_op_groups);
    auto line = [&](int count, const char *what) {
        if (count > 0) c.summary.push_back(std::to_string(count) + " " + what);
    };
    line(grouped_backward, "backward operators grouped with their forward operator");
    line(grouped_updates, "optimizer updates grouped with their layer");
    line(merged_elementwise, "element-wise operators merged into the operator before them");
    line(merged_steps, "operators merged across RNN timesteps");
    line(tied_grads, "gradients tied to the layout of their tensor");
    line(tied_updates, "updated tensors tied to the layout of the tensor they replace");
    line(tied_weights, "optimizer tensors tied to the layout of their weight");
    line(tied_elementwise, "element-wise outputs tied to the layout of their input");
    line(tied_steps, "timestep tensors tied to the layout of the first timestep's");
    return c;
}

}  // namespace tessera
