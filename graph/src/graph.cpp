#include "tessera/graph/graph.h"

#include <algorithm>
#include <sstream>

#include "tessera/error.h"

namespace tessera {

namespace {

constexpr const char *kRoleNames[] = {"data",     "param",    "opt_state",
                                      "activation", "gradient", "constant"};
constexpr const char *kInitNames[] = {"zeros", "constant", "he_normal", "xavier_uniform", "normal",
                                      "uniform", "causal_mask"};

}  // namespace

const char *role_name(TensorRole r) { return kRoleNames[static_cast<int>(r)]; }

TensorRole role_from_name(const std::string &name) {
    for (int i = 0; i < 6; i++)
        if (name == kRoleNames[i]) return static_cast<TensorRole>(i);
    fail("unknown tensor role '", name,
         "'; valid roles: data, param, opt_state, activation, gradient, constant");
}

const char *init_kind_name(Init::Kind k) { return kInitNames[static_cast<int>(k)]; }

std::string init_str(const Init &init) {
    std::ostringstream os;
    os << init_kind_name(init.kind);
    switch (init.kind) {
    case Init::Kind::Zeros: break;
    case Init::Kind::Constant: os << "(" << init.value << ")"; break;
    case Init::Kind::HeNormal: os << "(fan_in=" << init.fan_in << ")"; break;
    case Init::Kind::XavierUniform:
        os << "(fan_in=" << init.fan_in << ", fan_out=" << init.fan_out << ")";
        break;
    case Init::Kind::Normal: os << "(stddev=" << init.value << ")"; break;
    case Init::Kind::Uniform: os << "(limit=" << init.value << ")"; break;
    case Init::Kind::CausalMask: os << "(" << init.value << ")"; break;
    }
    return os.str();
}

TensorId Graph::add_tensor(TensorInfo info) {
    TESSERA_CHECK(!info.name.empty(), "a tensor needs a name");
    TESSERA_CHECK(!has_name(info.name), "the graph already has a tensor or node named '", info.name,
                  "'; names must be unique");
    for (int64_t d : info.type.shape)
        TESSERA_CHECK(d > 0, "tensor '", info.name, "' has shape ", shape_str(info.type.shape),
                      "; every extent must be positive");
    auto id = static_cast<TensorId>(tensors_.size());
    names_[info.name] = id;
    tensors_.push_back(std::move(info));
    return id;
}

namespace {

TensorInfo graph_input(const std::string &name, TensorType type, TensorRole role, Init init) {
    TensorInfo t;
    t.name = name;
    t.type = std::move(type);
    t.role = role;
    t.init = init;
    return t;
}

}  // namespace

TensorId Graph::add_data(const std::string &name, TensorType type) {
    return add_tensor(graph_input(name, std::move(type), TensorRole::Data, Init::zeros()));
}

TensorId Graph::add_param(const std::string &name, TensorType type, Init init) {
    TESSERA_CHECK(type.dtype == DType::F32, "parameter '", name, "' must be f32");
    return add_tensor(graph_input(name, std::move(type), TensorRole::Param, init));
}

TensorId Graph::add_opt_state(const std::string &name, TensorType type, Init init) {
    return add_tensor(graph_input(name, std::move(type), TensorRole::OptState, init));
}

TensorId Graph::add_constant(const std::string &name, TensorType type, Init init) {
    return add_tensor(graph_input(name, std::move(type), TensorRole::Constant, init));
}

TensorId Graph::add_input(const std::string &name, TensorType type, TensorRole role, Init init,
                          const std::string &where) {
    switch (role) {
    case TensorRole::Data: return add_data(name, std::move(type));
    case TensorRole::Param: return add_param(name, std::move(type), init);
    case TensorRole::OptState: return add_opt_state(name, std::move(type), init);
    case TensorRole::Constant: return add_constant(name, std::move(type), init);
    default: fail(where, ": role '", role_name(role), "' belongs to node outputs, not graph inputs");
    }
}

std::vector<TensorId> Graph::add_node(OpCall call, const std::vector<TensorId> &inputs,
                                      TensorRole output_role) {
    TESSERA_CHECK(!call.name.empty(), call.who(), ": a node needs a name");
    TESSERA_CHECK(!has_name(call.name), call.who(), ": the graph already has a tensor or node named '",
                  call.name, "'");
    call = with_defaults(call);
    std::vector<TensorType> in_types;
    for (TensorId t : inputs) {
        TESSERA_CHECK(t >= 0 && t < num_tensors(), call.who(), ": input ", t,
                      " is not a tensor of this graph");
        in_types.push_back(tensors_[t].type);
    }
    std::vector<TensorType> out_types = infer_types(call, in_types);
    auto id = static_cast<NodeId>(nodes_.size());
    Node n;
    n.inputs = inputs;
    for (size_t i = 0; i < out_types.size(); i++) {
        TensorInfo t;
        t.name = out_types.size() == 1 ? call.name : call.name + ":" + std::to_string(i);
        t.type = out_types[i];
        t.role = output_role;
        t.producer = id;
        n.outputs.push_back(add_tensor(std::move(t)));
    }
    node_names_[call.name] = id;
    n.call = std::move(call);
    nodes_.push_back(std::move(n));
    return nodes_.back().outputs;
}

TensorId Graph::add_comm_node(const std::string &name, Attrs attrs, const std::vector<TensorId> &inputs,
                              TensorType out, TensorRole output_role) {
    return add_comm_node(name, std::move(attrs), inputs, {CommOutput{name, std::move(out), output_role}})[0];
}

std::vector<TensorId> Graph::add_comm_node(const std::string &name, Attrs attrs, const std::vector<TensorId> &inputs,
                                           const std::vector<CommOutput> &outputs) {
    TESSERA_CHECK(!name.empty(), "a communication node needs a name");
    TESSERA_CHECK(!has_name(name), "the graph already has a tensor or node named '", name, "'");
    TESSERA_CHECK(!outputs.empty(), "communication node '", name, "' needs an output");
    for (TensorId t : inputs)
        TESSERA_CHECK(t >= 0 && t < num_tensors(), "communication node '", name, "': input ", t,
                      " is not a tensor of this graph");
    auto id = static_cast<NodeId>(nodes_.size());
    Node n;
    n.call = OpCall{kCommCarrierKind, name, std::move(attrs)};
    n.comm = true;
    n.inputs = inputs;
    for (const CommOutput &o : outputs) {
        TensorInfo t;
        t.name = o.name;
        t.type = o.type;
        t.role = o.role;
        t.producer = id;
        n.outputs.push_back(add_tensor(std::move(t)));
    }
    node_names_[name] = id;
    nodes_.push_back(std::move(n));
    return nodes_.back().outputs;
}

namespace {

// Tensor t's producer under the new nodes (node i is node_at(i)), checked:
// produced once, by a node after every producer of its inputs.
template <typename NodeAt>
std::vector<NodeId> check_replacement(NodeId count, const NodeAt &node_at, const std::vector<TensorInfo> &tensors) {
    std::vector<NodeId> producer(tensors.size(), kNoNode);
    for (NodeId i = 0; i < count; i++) {
        const Node &n = node_at(i);
        for (TensorId t : n.inputs)
            TESSERA_CHECK(t >= 0 && t < static_cast<TensorId>(tensors.size()) &&
                              (tensors[t].producer == kNoNode || (producer[t] != kNoNode && producer[t] < i)),
                          "replacing the graph's nodes: node '", n.call.name, "' reads tensor ", t,
                          " before a node produces it");
        for (TensorId t : n.outputs) {
            TESSERA_CHECK(t >= 0 && t < static_cast<TensorId>(tensors.size()) && tensors[t].producer != kNoNode &&
                              producer[t] == kNoNode,
                          "replacing the graph's nodes: node '", n.call.name, "' produces tensor ", t,
                          " which is a graph input or produced twice");
            producer[t] = i;
        }
    }
    for (TensorId t = 0; t < static_cast<TensorId>(tensors.size()); t++)
        TESSERA_CHECK(tensors[t].producer == kNoNode || producer[t] != kNoNode, "replacing the graph's nodes: no node ",
                      "produces tensor '", tensors[t].name, "'");
    return producer;
}

// Node i's new forward link: the new producer of old forward node's first
// output. Checked.
NodeId carried_forward(const Node &n, const std::vector<Node> &old_nodes, const std::vector<NodeId> &producer) {
    if (n.forward == kNoNode) return kNoNode;
    TESSERA_CHECK(n.forward >= 0 && n.forward < static_cast<NodeId>(old_nodes.size()) &&
                      !old_nodes[n.forward].outputs.empty(),
                  "replacing the graph's nodes: node '", n.call.name, "' names forward node ", n.forward);
    return producer[old_nodes[n.forward].outputs[0]];
}

}  // namespace

void Graph::replace_nodes(std::vector<Node> nodes) {
    const std::vector<NodeId> producer = check_replacement(
        static_cast<NodeId>(nodes.size()), [&](NodeId i) -> const Node & { return nodes[i]; }, tensors_);
    std::map<std::string, NodeId> names;
    for (NodeId i = 0; i < static_cast<NodeId>(nodes.size()); i++) {
        TESSERA_CHECK(names.emplace(nodes[i].call.name, i).second,
                      "replacing the graph's nodes: two nodes are named '", nodes[i].call.name, "'");
        nodes[i].forward = carried_forward(nodes[i], nodes_, producer);
    }
    set_producers(producer);
    nodes_ = std::move(nodes);
    node_names_ = std::move(names);
}

void Graph::rearrange_nodes(std::vector<PlacedNode> placed) {
    // Checked whole before anything moves, so a refused rearrangement leaves
    // the graph as it was.
    std::vector<NodeId> new_id(nodes_.size(), kNoNode);
    for (NodeId i = 0; i < static_cast<NodeId>(placed.size()); i++) {
        const NodeId kept = placed[i].kept;
        if (kept == kNoNode) continue;
        TESSERA_CHECK(kept >= 0 && kept < num_nodes() && new_id[kept] == kNoNode,
                      "rearranging the graph's nodes: node ", kept, " does not exist or is placed twice");
        new_id[kept] = i;
    }
    auto node_at = [&](NodeId i) -> const Node & {
        return placed[i].kept == kNoNode ? placed[i].added : nodes_[placed[i].kept];
    };
    const std::vector<NodeId> producer =
        check_replacement(static_cast<NodeId>(placed.size()), node_at, tensors_);
    std::map<std::string, NodeId> added_names;
    for (NodeId i = 0; i < static_cast<NodeId>(placed.size()); i++) {
        if (placed[i].kept != kNoNode) continue;
        const std::string &name = placed[i].added.call.name;
        auto old = node_names_.find(name);
        TESSERA_CHECK((old == node_names_.end() || new_id[old->second] == kNoNode) &&
                          added_names.emplace(name, i).second,
                      "replacing the graph's nodes: two nodes are named '", name, "'");
    }
    std::vector<NodeId> forward(placed.size());
    for (NodeId i = 0; i < static_cast<NodeId>(placed.size()); i++)
        forward[i] = carried_forward(node_at(i), nodes_, producer);
    // Kept names change only their ids; dropped names go, added ones come.
    for (auto it = node_names_.begin(); it != node_names_.end();)
        it = new_id[it->second] == kNoNode ? node_names_.erase(it) : (it->second = new_id[it->second], ++it);
    node_names_.merge(added_names);
    std::vector<Node> nodes;
    nodes.reserve(placed.size());
    for (PlacedNode &p : placed) nodes.push_back(std::move(p.kept == kNoNode ? p.added : nodes_[p.kept]));
    for (NodeId i = 0; i < static_cast<NodeId>(nodes.size()); i++) nodes[i].forward = forward[i];
    set_producers(producer);
    nodes_ = std::move(nodes);
}

void Graph::set_producers(const std::vector<NodeId> &producer) {
    for (TensorId t = 0; t < num_tensors(); t++)
        if (tensors_[t].producer != kNoNode) tensors_[t].producer = producer[t];
}

void Graph::set_output(const std::string &key, TensorId t) {
    TESSERA_INTERNAL_ASSERT(t >= 0 && t < num_tensors(), "output '", key, "' is not a tensor");
    outputs_[key] = t;
}

TensorId Graph::output(const std::string &key) const {
    auto it = outputs_.find(key);
    if (it == outputs_.end()) {
        std::string have;
        for (const auto &[k, v] : outputs_) have += (have.empty() ? "" : ", ") + k;
        fail("the graph has no output named '", key, "' (it has: ", have.empty() ? "none" : have, ")");
    }
    return it->second;
}

void Graph::set_updates(TensorId new_value, TensorId persistent) {
    TESSERA_INTERNAL_ASSERT(new_value >= 0 && new_value < num_tensors() && persistent >= 0 &&
                            persistent < num_tensors());
    const TensorInfo &p = tensors_[persistent];
    TESSERA_INTERNAL_ASSERT(p.role == TensorRole::Param || p.role == TensorRole::OptState,
                            "only parameters and optimizer state are updated in place, not '", p.name,
                            "'");
    TESSERA_INTERNAL_ASSERT(p.type == tensors_[new_value].type, "in-place update changes the type of '",
                            p.name, "'");
    tensors_[new_value].updates = persistent;
}

void Graph::set_attr(NodeId n, const std::string &name, AttrValue value) {
    TESSERA_INTERNAL_ASSERT(n >= 0 && n < num_nodes());
    Node &node = nodes_[n];
    OpCall changed = node.call;
    changed.attrs.set(name, std::move(value));
    std::vector<TensorType> in;
    for (TensorId t : node.inputs) in.push_back(tensors_[t].type);
    std::vector<TensorType> out = infer_types(changed, in);
    for (size_t i = 0; i < out.size(); i++)
        TESSERA_CHECK(out[i] == tensors_[node.outputs[i]].type, node.call.who(), ": setting '", name,
                      "' would change output ", i, " from ", type_str(tensors_[node.outputs[i]].type), " to ",
                      type_str(out[i]));
    node.call = std::move(changed);
}

void Graph::keep_outputs_f32(NodeId n, const std::vector<int64_t> &outputs) {
    TESSERA_INTERNAL_ASSERT(n >= 0 && n < num_nodes());
    Node &node = nodes_[n];
    for (NodeId later = n + 1; later < num_nodes(); later++)
        for (TensorId t : nodes_[later].inputs)
            for (int64_t k : outputs)
                TESSERA_INTERNAL_ASSERT(t != node.outputs[k], node.call.who(), ": output ", k,
                                        " is read already, so its type cannot change");
    OpCall changed = node.call;
    std::vector<int64_t> kept = changed.attrs.get_ints(changed.who(), kF32OutputsAttr, {});
    kept.insert(kept.end(), outputs.begin(), outputs.end());
    std::sort(kept.begin(), kept.end());
    kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
    changed.attrs.set(kF32OutputsAttr, kept);
    std::vector<TensorType> in;
    for (TensorId t : node.inputs) in.push_back(tensors_[t].type);
    const std::vector<TensorType> out = infer_types(changed, in);
    for (size_t i = 0; i < out.size(); i++) tensors_[node.outputs[i]].type = out[i];
    node.call = std::move(changed);
}

void Graph::set_node_flags(NodeId n, bool backward, bool optimizer) {
    TESSERA_INTERNAL_ASSERT(n >= 0 && n < num_nodes());
    nodes_[n].backward = backward;
    nodes_[n].optimizer = optimizer;
}

void Graph::set_forward(NodeId backward_node, NodeId forward_node) {
    TESSERA_INTERNAL_ASSERT(backward_node >= 0 && backward_node < num_nodes() && forward_node >= 0 &&
                            forward_node < backward_node);
    nodes_[backward_node].forward = forward_node;
}

void Graph::set_grad_of(TensorId gradient, TensorId primal) {
    TESSERA_INTERNAL_ASSERT(gradient >= 0 && gradient < num_tensors() && primal >= 0 && primal < gradient);
    TESSERA_INTERNAL_ASSERT(tensors_[gradient].type.shape == tensors_[primal].type.shape, "gradient '",
                            tensors_[gradient].name, "' does not have the shape of '", tensors_[primal].name, "'");
    tensors_[gradient].grad_of = primal;
}

const TensorInfo &Graph::tensor(TensorId t) const {
    TESSERA_INTERNAL_ASSERT(t >= 0 && t < num_tensors(), "tensor id ", t, " out of range");
    return tensors_[t];
}

const Node &Graph::node(NodeId n) const {
    TESSERA_INTERNAL_ASSERT(n >= 0 && n < num_nodes(), "node id ", n, " out of range");
    return nodes_[n];
}

std::optional<TensorId> Graph::find_tensor(const std::string &name) const {
    auto it = names_.find(name);
    if (it == names_.end()) return std::nullopt;
    return it->second;
}

TensorId Graph::tensor_named(const std::string &name) const {
    auto t = find_tensor(name);
    TESSERA_CHECK(t.has_value(), "the graph has no tensor named '", name, "'");
    return *t;
}

bool Graph::has_name(const std::string &name) const {
    return names_.count(name) != 0 || node_names_.count(name) != 0;
}

std::string Graph::unique_name(const std::string &base) const {
    if (!has_name(base)) return base;
    int &i = suffix_hints_.first_free.try_emplace(base, 1).first->second;
    for (;; i++) {
        std::string n = base + "_" + std::to_string(i);
        if (!has_name(n)) return n;
    }
}

std::vector<TensorId> Graph::with_role(TensorRole r) const {
    std::vector<TensorId> out;
    for (TensorId t = 0; t < num_tensors(); t++)
        if (tensors_[t].role == r) out.push_back(t);
    return out;
}

std::vector<std::vector<NodeId>> Graph::consumers() const {
    std::vector<std::vector<NodeId>> out(tensors_.size());
    for (NodeId n = 0; n < num_nodes(); n++)
        for (TensorId t : nodes_[n].inputs)
            if (out[t].empty() || out[t].back() != n) out[t].push_back(n);
    return out;
}

int64_t Graph::param_count() const {
    int64_t total = 0;
    for (const TensorInfo &t : tensors_)
        if (t.role == TensorRole::Param) total += t.type.elements();
    return total;
}

std::string graph_summary(const Graph &g) {
    std::ostringstream os;
    for (TensorId t : g.with_role(TensorRole::Data))
        os << "data  " << g.tensor(t).name << " " << type_str(g.tensor(t).type) << "\n";
    for (TensorId t : g.with_role(TensorRole::Param))
        os << "param " << g.tensor(t).name << " " << type_str(g.tensor(t).type) << " "
           << init_str(g.tensor(t).init) << "\n";
    for (const Node &n : g.nodes()) {
        os << n.call.name << " = " << (n.comm ? "comm" : op_name(n.call.kind)) << "(";
        for (size_t i = 0; i < n.inputs.size(); i++)
            os << (i ? ", " : "") << g.tensor(n.inputs[i]).name;
        os << ") -> ";
        for (size_t i = 0; i < n.outputs.size(); i++)
            os << (i ? ", " : "") << type_str(g.tensor(n.outputs[i]).type);
        os << "\n";
    }
    return os.str();
}

TensorId storage_root(const Graph &g, TensorId t) {
    TensorId r = t;
    for (int steps = 0; g.tensor(r).updates != kNoTensor; steps++) {
        TESSERA_INTERNAL_ASSERT(steps <= g.num_tensors(), "in-place updates of '", g.tensor(t).name,
                                "' form a cycle");
        r = g.tensor(r).updates;
    }
    return r;
}

std::vector<bool> persistent_tensors(const Graph &g) {
    int nt = g.num_tensors();
    std::vector<bool> root_persistent(nt, false), out(nt);
    std::vector<bool> is_output(nt, false);
    for (const auto &[key, t] : g.outputs()) is_output[t] = true;
    for (TensorId t = 0; t < nt; t++) {
        TensorRole r = g.tensor(t).role;
        if (r == TensorRole::Data || is_persistent(r) || is_output[t])
            root_persistent[storage_root(g, t)] = true;
    }
    for (TensorId t = 0; t < nt; t++) out[t] = root_persistent[storage_root(g, t)];
    return out;
}

std::vector<TensorId> running_statistics(const Graph &g) {
    std::vector<TensorId> out;
    for (const Node &n : g.nodes())
        if (!n.comm && n.call.kind == OpKind::BatchNormStats) out.insert(out.end(), {n.inputs[1], n.inputs[2]});
    return out;
}

}  // namespace tessera
