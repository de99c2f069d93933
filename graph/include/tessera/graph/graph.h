// The dataflow graph IR: tensors with a type and a role, nodes that apply one
// operator from lang/ to tensors. A graph is a plain value: it holds shapes and
// attributes only, never tensor memory, so a 10-billion-parameter model builds
// and plans in a few megabytes.
//
// Nodes are stored in a topological order: a node's inputs are produced by
// earlier nodes or are graph inputs (data, parameters, optimizer state).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/lang/op.h"
#include "tessera/types.h"

namespace tessera {

using TensorId = int32_t;
using NodeId = int32_t;
inline constexpr TensorId kNoTensor = -1;
inline constexpr NodeId kNoNode = -1;

// What a tensor is for. Roles decide what lives across steps (Param, OptState),
// what the trainer feeds each step (Data), and what is scratch (Activation,
// Gradient). Param, OptState and Constant persist across steps.
enum class TensorRole : uint8_t {
    Data,        // fed every step: images, labels, token ids, the optimizer step
    Param,       // a trainable weight; initialised once, updated in place
    OptState,    // optimizer state (momentum, Adam moments); starts at zero
    Activation,  // produced by a forward node
    Gradient,    // produced by a backward node
    Constant,    // initialised once and never updated (e.g. the loss gradient seed, 1.0)
};
const char *role_name(TensorRole r);
// Whether tensors of this role keep their value from one step to the next.
inline bool is_persistent(TensorRole r) {
    return r == TensorRole::Param || r == TensorRole::OptState || r == TensorRole::Constant;
}
TensorRole role_from_name(const std::string &name);

// How a parameter is initialised. Values are drawn by exec/ from the run's seed
// and the tensor's name, so they do not depend on the order tensors are created.
struct Init {
    enum class Kind : uint8_t { Zeros, Constant, HeNormal, XavierUniform, Normal, Uniform, CausalMask };
    Kind kind = Kind::Zeros;
    double value = 0;     // Constant: the value; Normal: stddev; Uniform: half-width;
                          // CausalMask: the value above the diagonal (e.g. -1e9)
    int64_t fan_in = 0;   // HeNormal, XavierUniform
    int64_t fan_out = 0;  // XavierUniform

    static Init zeros() { return {}; }
    static Init constant(double v) { return {Kind::Constant, v, 0, 0}; }
    static Init he_normal(int64_t fan_in) { return {Kind::HeNormal, 0, fan_in, 0}; }
    static Init xavier_uniform(int64_t fan_in, int64_t fan_out) {
        return {Kind::XavierUniform, 0, fan_in, fan_out};
    }
    static Init normal(double stddev) { return {Kind::Normal, stddev, 0, 0}; }
    static Init uniform(double limit) { return {Kind::Uniform, limit, 0, 0}; }
    // For a tensor [..., T, T]: element (i, j) is 0 where j <= i and `value` where
    // j > i, so adding it to attention scores hides the future (a Constant).
    static Init causal_mask(double value = -1e9) { return {Kind::CausalMask, value, 0, 0}; }
    bool operator==(const Init &) const = default;
};
const char *init_kind_name(Init::Kind k);
std::string init_str(const Init &init);  // "he_normal(fan_in=784)"

// What a communication node's OpCall::kind holds: no operator runs for it.
inline constexpr OpKind kCommCarrierKind = OpKind::Reshape;

struct TensorInfo {
    std::string name;  // unique in the graph
    TensorType type;
    TensorRole role = TensorRole::Activation;
    NodeId producer = kNoNode;  // kNoNode for Data, Param and OptState
    Init init;                  // Param and OptState only
    // An optimizer output that replaces a persistent tensor (w' replaces w).
    // The memory plan gives both the same storage; the update kernels are safe
    // in place.
    TensorId updates = kNoTensor;
    // For a gradient (or one contribution to it): the tensor it is the gradient
    // of. The partitioner lays both out alike.
    TensorId grad_of = kNoTensor;
    bool operator==(const TensorInfo &) const = default;
};

// Whether the trainer feeds this tensor from the host every step (a Data
// input: images, labels, token ids). Every rank can read any block of it, so
// under a partition no layout of it costs communication.
inline bool is_fed(const TensorInfo &t) { return t.role == TensorRole::Data && t.producer == kNoNode; }

struct Node {
    OpCall call;  // call.name is the node's unique name
    std::vector<TensorId> inputs;
    std::vector<TensorId> outputs;
    bool backward = false;   // created by autodiff
    bool optimizer = false;  // created by an optimizer
    NodeId forward = kNoNode;  // for a backward node: the forward node it differentiates
    // A communication operator, inserted by lowering (partition/lower.h): the
    // executor runs it on the comm stream with the communicator instead of a
    // kernel. call.attrs describe it ("comm": "all_reduce", "reduce_scatter",
    // "redistribute"); call.kind is not used and holds kCommCarrierKind.
    bool comm = false;
    bool operator==(const Node &) const = default;
};

class Graph {
public:
    // Graph inputs. Names must be unique; a duplicate throws tessera::Error.
    TensorId add_data(const std::string &name, TensorType type);
    TensorId add_param(const std::string &name, TensorType type, Init init);
    TensorId add_opt_state(const std::string &name, TensorType type, Init init = Init::zeros());
    TensorId add_constant(const std::string &name, TensorType type, Init init);
    // One of the four above, by role; tessera::Error for a role that only
    // node outputs have (Activation, Gradient), naming `where`.
    TensorId add_input(const std::string &name, TensorType type, TensorRole role, Init init,
                       const std::string &where);

    // Appends a node. Output types come from lang's shape inference, which
    // validates the attributes; errors name the node. Outputs are named
    // "<node>" (one output) or "<node>:<i>". Every input must already exist.
    std::vector<TensorId> add_node(OpCall call, const std::vector<TensorId> &inputs,
                                   TensorRole output_role = TensorRole::Activation);

    // Named results ("loss", "logits") that the trainer and tests look up.
    // A communication node (Node::comm) reading `inputs` and producing one
    // tensor of type `out`, which lowering computed; no shape inference.
    TensorId add_comm_node(const std::string &name, Attrs attrs, const std::vector<TensorId> &inputs,
                           TensorType out, TensorRole output_role);
    // A communication node with several outputs, each named as given (a fused
    // bucket of collectives: output i belongs to input i).
    struct CommOutput {
        std::string name;
        TensorType type;
        TensorRole role = TensorRole::Activation;
    };
    std::vector<TensorId> add_comm_node(const std::string &name, Attrs attrs, const std::vector<TensorId> &inputs,
                                        const std::vector<CommOutput> &outputs);

    // Replaces every node with `nodes`, keeping every tensor: the new nodes
    // must produce exactly the tensors the old ones did, each once, in a
    // topological order, with unique names. Producers, node names and each
    // backward node's forward link (given as an old NodeId; it is carried to
    // the new node holding the old forward node's first output) follow. For
    // rewrites that merge or reorder nodes (lowering's fused collectives).
    // Throws tessera::Error naming the first node that breaks a rule.
    void replace_nodes(std::vector<Node> nodes);

    // replace_nodes without copying the nodes that stay: node i of the result
    // is this graph's node placed[i].kept, or placed[i].added where kept is
    // kNoNode. Nodes not placed are dropped; the same rules hold and a node
    // may be placed once. For rewrites of large graphs (fused collectives).
    struct PlacedNode {
        NodeId kept = kNoNode;
        Node added;
    };
    void rearrange_nodes(std::vector<PlacedNode> placed);

    void set_output(const std::string &key, TensorId t);
    TensorId output(const std::string &key) const;  // throws when absent
    bool has_output(const std::string &key) const { return outputs_.count(key) != 0; }
    const std::map<std::string, TensorId> &outputs() const { return outputs_; }

    void set_updates(TensorId new_value, TensorId persistent);
    // Changes one attribute of a node, for hyperparameters that change during
    // training (an optimizer's lr). The output types are re-inferred and must not
    // change; tessera::Error otherwise.
    void set_attr(NodeId n, const std::string &name, AttrValue value);
    // Keeps outputs `outputs` of node n, which has 16-bit inputs, in f32
    // (lang's kF32OutputsAttr) and re-infers its output types; autodiff's
    // f32 weight gradients. No node may read those outputs yet.
    void keep_outputs_f32(NodeId n, const std::vector<int64_t> &outputs);
    void set_node_flags(NodeId n, bool backward, bool optimizer);
    // Autodiff's bookkeeping, read by the partitioner's coarsening.
    void set_forward(NodeId backward_node, NodeId forward_node);
    void set_grad_of(TensorId gradient, TensorId primal);

    int num_tensors() const { return static_cast<int>(tensors_.size()); }
    int num_nodes() const { return static_cast<int>(nodes_.size()); }
    const TensorInfo &tensor(TensorId t) const;
    const Node &node(NodeId n) const;
    const std::vector<TensorInfo> &tensors() const { return tensors_; }
    const std::vector<Node> &nodes() const { return nodes_; }

    std::optional<TensorId> find_tensor(const std::string &name) const;
    TensorId tensor_named(const std::string &name) const;  // throws when absent
    bool has_name(const std::string &name) const;

    // A name not used yet: `base`, or `base_1`, `base_2`, ...
    std::string unique_name(const std::string &base) const;

    // Tensors with the given role, in creation order.
    std::vector<TensorId> with_role(TensorRole r) const;
    // For each tensor, the nodes that read it, in node order.
    std::vector<std::vector<NodeId>> consumers() const;

    int64_t param_count() const;  // elements over all Param tensors

    bool operator==(const Graph &) const = default;

private:
    TensorId add_tensor(TensorInfo info);
    void set_producers(const std::vector<NodeId> &producer);  // for every node output

    std::vector<TensorInfo> tensors_;
    std::vector<Node> nodes_;
    std::map<std::string, TensorId> names_;
    std::map<std::string, TensorId> outputs_;
    std::map<std::string, NodeId> node_names_;
    // For unique_name: per base, the first suffix that may be free. Names are
    // never removed, so every suffix below it is taken; without it, the n-th
    // "slice" would probe n - 1 names (an LSTM of 2,000 steps took 4 s to build).
    // A cache only: graphs compare equal whatever it holds.
    struct SuffixHints {
        std::map<std::string, int> first_free;
        bool operator==(const SuffixHints &) const { return true; }
    };
    mutable SuffixHints suffix_hints_;
};

// A short human-readable listing, one node per line.
std::string graph_summary(const Graph &g);

// The tensor whose storage `t` uses: itself, or for an in-place update, the
// persistent tensor it replaces (following chains).
TensorId storage_root(const Graph &g, TensorId t);
// For each tensor, whether it lives all step: Data, Param, OptState, Constant,
// or a graph output (itself, or another tensor sharing its storage root).
std::vector<bool> persistent_tensors(const Graph &g);
// Batch norm's running statistics: the tensors batch_norm_stats nodes update
// in place, each node's mean then variance, in node order.
std::vector<TensorId> running_statistics(const Graph &g);

}  // namespace tessera
