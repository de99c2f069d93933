#include "tessera/graph/serialize.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tessera/atomic_file.h"
#include "tessera/error.h"
#include "tessera/input_file.h"
#include "tessera/json_input.h"

namespace tessera {

using nlohmann::json;

namespace {

json attr_json(const AttrValue &v) {
    return std::visit([](const auto &x) -> json { return x; }, v);
}

// Integers stay integers and lists stay lists, so attributes round-trip with
// their type; a float attribute written as 1.0 stays a double in nlohmann.
AttrValue attr_value(const json &j, const std::string &where) {
    if (j.is_number_integer()) return j.get<int64_t>();
    if (j.is_number_float()) return j.get<double>();
    if (j.is_string()) return j.get<std::string>();
    if (j.is_array()) {
        std::vector<int64_t> v;
        for (const json &e : j) {
            TESSERA_CHECK(e.is_number_integer(), where, ": list attributes hold integers, got ", json_preview(e));
            v.push_back(e.get<int64_t>());
        }
        return v;
    }
    fail(where, ": unsupported attribute value ", json_preview(j));
}

Init::Kind init_kind_from(const std::string &s, const std::string &where) {
    for (int i = 0; i < 7; i++)
        if (s == init_kind_name(static_cast<Init::Kind>(i))) return static_cast<Init::Kind>(i);
    fail(where, ": unknown initializer '", s, "'");
}

template<typename T>
T field(const json &j, const char *key, const std::string &where) {
    TESSERA_CHECK(j.is_object() && j.contains(key), where, ": missing field '", key, "'");
    try {
        return j.at(key).get<T>();
    } catch (const json::exception &e) {
        fail(where, ": field '", key, "' has the wrong type (", json_preview(j.at(key)), ")");
    }
}

// The file's links between tensors and nodes, checked here as the user's
// errors: Graph's setters assert them as invariants of Tessera's own code.
void link_grad_of(Graph &g, TensorId gradient, TensorId primal, const std::string &where) {
    const TensorInfo &grad = g.tensor(gradient), &of = g.tensor(primal);
    TESSERA_CHECK(primal < gradient, where, ": '", grad.name, "' is the gradient of '", of.name,
                  "', which must come before it");
    TESSERA_CHECK(grad.type.shape == of.type.shape, where, ": gradient '", grad.name, "' ",
                  shape_str(grad.type.shape), " does not have the shape of '", of.name, "' ",
                  shape_str(of.type.shape));
    g.set_grad_of(gradient, primal);
}

void link_updates(Graph &g, TensorId new_value, TensorId persistent, const std::string &where) {
    const TensorInfo &value = g.tensor(new_value), &p = g.tensor(persistent);
    TESSERA_CHECK(p.role == TensorRole::Param || p.role == TensorRole::OptState, where, ": '", value.name,
                  "' updates '", p.name, "', but only parameters and optimizer state are updated, not a ",
                  role_name(p.role));
    TESSERA_CHECK(p.type == value.type, where, ": '", value.name, "' ", type_str(value.type), " updates '", p.name,
                  "' ", type_str(p.type), "; an update keeps the type");
    g.set_updates(new_value, persistent);
}

void add_input_tensor(Graph &g, const json &e, std::string where) {
    auto name = field<std::string>(e, "name", where);
    where += " '" + name + "'";
    TensorType type{dtype_from_name(field<std::string>(e, "dtype", where), where), field<Shape>(e, "shape", where)};
    TensorRole role = role_from_name(field<std::string>(e, "role", where));
    Init init;
    if (is_persistent(role)) {
        TESSERA_CHECK(e.contains("init"), where, ": missing field 'init'");
        const json &ij = e.at("init");
        init.kind = init_kind_from(field<std::string>(ij, "kind", where), where);
        init.value = field<double>(ij, "value", where);
        init.fan_in = field<int64_t>(ij, "fan_in", where);
        init.fan_out = field<int64_t>(ij, "fan_out", where);
    }
    g.add_input(name, type, role, init, where);
    if (e.contains("grad_of")) {
        auto primal = g.find_tensor(field<std::string>(e, "grad_of", where));
        TESSERA_CHECK(primal.has_value(), where, ": unknown tensor '", e.at("grad_of").get<std::string>(),
                      "' in 'grad_of'");
        link_grad_of(g, g.num_tensors() - 1, *primal, where);
    }
}

}  // namespace

json graph_to_json(const Graph &g) {
    json tensors = json::array(), nodes = json::array();
    NodeId nodes_before = 0;  // nodes that existed when the tensor was created
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const TensorInfo &info = g.tensor(t);
        if (info.producer != kNoNode) {  // node outputs are re-created by add_node
            nodes_before = info.producer + 1;
            continue;
        }
        json e = {{"name", info.name},
                  {"dtype", dtype_name(info.type.dtype)},
                  {"shape", info.type.shape},
                  {"role", role_name(info.role)},
                  {"after_nodes", nodes_before}};
        if (info.grad_of != kNoTensor) e["grad_of"] = g.tensor(info.grad_of).name;
        if (is_persistent(info.role))
            e["init"] = {{"kind", init_kind_name(info.init.kind)},
                         {"value", info.init.value},
                         {"fan_in", info.init.fan_in},
                         {"fan_out", info.init.fan_out}};
        tensors.push_back(e);
    }
    for (const Node &n : g.nodes()) {
        json attrs = json::object();
        for (const auto &[k, v] : n.call.attrs.values()) attrs[k] = attr_json(v);
        json in = json::array(), out = json::array(), updates = json::array(), grad_of = json::array();
        for (TensorId t : n.inputs) in.push_back(g.tensor(t).name);
        for (TensorId t : n.outputs) {
            out.push_back(json{{"name", g.tensor(t).name},
                               {"dtype", dtype_name(g.tensor(t).type.dtype)},
                               {"shape", g.tensor(t).type.shape},
                               {"role", role_name(g.tensor(t).role)}});
            TensorId u = g.tensor(t).updates;
            updates.push_back(u == kNoTensor ? json(nullptr) : json(g.tensor(u).name));
            TensorId p = g.tensor(t).grad_of;
            grad_of.push_back(p == kNoTensor ? json(nullptr) : json(g.tensor(p).name));
        }
        nodes.push_back({{"op", n.comm ? "comm" : op_name(n.call.kind)},
                         {"name", n.call.name},
                         {"attrs", attrs},
                         {"inputs", in},
                         {"outputs", out},
                         {"updates", updates},
                         {"backward", n.backward},
                         {"optimizer", n.optimizer}});
        if (n.forward != kNoNode) nodes.back()["forward"] = g.node(n.forward).call.name;
        if (n.backward) nodes.back()["grad_of"] = grad_of;
    }
    json outputs = json::object();
    for (const auto &[k, t] : g.outputs()) outputs[k] = g.tensor(t).name;
    return {{"format", "tessera-graph"}, {"version", 1}, {"tensors", tensors}, {"nodes", nodes},
            {"outputs", outputs}};
}

namespace {

TensorId tensor_named(const Graph &g, const std::string &name, const std::string &where) {
    auto t = g.find_tensor(name);
    TESSERA_CHECK(t.has_value(), where, ": unknown tensor '", name, "'");
    return *t;
}

// The node's outputs as recorded: names and shapes must be what the inputs give.
void check_outputs(const Graph &g, const json &e, const std::vector<TensorId> &got, const std::string &where) {
    const json &outs = e.at("outputs");
    for (size_t k = 0; k < got.size(); k++) {
        const TensorInfo &t = g.tensor(got[k]);
        TESSERA_CHECK(t.name == field<std::string>(outs[k], "name", where), where, ": output ", k,
                      " is recorded as '", outs[k].at("name").get<std::string>(), "' but is '", t.name, "'");
        Shape recorded = field<Shape>(outs[k], "shape", where);
        TESSERA_CHECK(recorded == t.type.shape, where, ": output '", t.name, "' is recorded with shape ",
                      shape_str(recorded), " but the inputs give ", shape_str(t.type.shape));
    }
}

// The node's links to other tensors and nodes: updates, flags, forward node, grad_of.
void link_node(Graph &g, const json &e, const std::vector<TensorId> &got,
               const std::map<std::string, NodeId> &node_ids, const std::string &where) {
    for (size_t k = 0; k < got.size(); k++) {
        const json &u = e.at("updates").at(k);
        if (!u.is_null()) link_updates(g, got[k], tensor_named(g, u.get<std::string>(), where), where);
    }
    g.set_node_flags(g.num_nodes() - 1, e.value("backward", false), e.value("optimizer", false));
    if (e.contains("forward")) {
        std::string fwd = field<std::string>(e, "forward", where);
        auto f = node_ids.find(fwd);
        TESSERA_CHECK(f != node_ids.end() && f->second < g.num_nodes() - 1, where, ": unknown forward node '", fwd,
                      "' (it must come before the node)");
        g.set_forward(g.num_nodes() - 1, f->second);
    }
    if (e.contains("grad_of"))
        for (size_t k = 0; k < got.size() && k < e.at("grad_of").size(); k++) {
            const json &p = e.at("grad_of").at(k);
            if (!p.is_null()) link_grad_of(g, got[k], tensor_named(g, p.get<std::string>(), where), where);
        }
}

// Node `e` (nodes[i] of the file), added to `g` after its inputs.
void add_node_from_json(Graph &g, const json &e, std::string where, std::map<std::string, NodeId> &node_ids) {
    OpCall call;
    const std::string op = field<std::string>(e, "op", where);
    const bool comm = op == "comm";
    call.kind = comm ? kCommCarrierKind : op_from_name(op);
    call.name = field<std::string>(e, "name", where);
    where += " '" + call.name + "'";
    for (const auto &[k, v] : e.at("attrs").items()) call.attrs.set(k, attr_value(v, where));
    std::vector<TensorId> in;
    for (const auto &name : field<std::vector<std::string>>(e, "inputs", where))
        in.push_back(tensor_named(g, name, where));
    const json &outs = e.at("outputs");
    TensorRole role = outs.empty() ? TensorRole::Activation
                                   : role_from_name(field<std::string>(outs[0], "role", where));
    std::vector<TensorId> got;
    if (comm) {
        TESSERA_CHECK(!outs.empty(), where, ": a communication node has an output");
        std::vector<Graph::CommOutput> types;
        for (const json &o : outs)
            types.push_back({field<std::string>(o, "name", where),
                             TensorType{dtype_from_name(field<std::string>(o, "dtype", where), where),
                                        field<Shape>(o, "shape", where)},
                             role_from_name(field<std::string>(o, "role", where))});
        got = g.add_comm_node(call.name, call.attrs, in, types);
    } else {
        got = g.add_node(call, in, role);
    }
    node_ids[call.name] = g.num_nodes() - 1;
    TESSERA_CHECK(got.size() == outs.size(), where, ": records ", outs.size(), " outputs, ", op_name(call.kind),
                  " has ", got.size());
    check_outputs(g, e, got, where);
    link_node(g, e, got, node_ids, where);
}

}  // namespace

Graph graph_from_json(const json &j, const std::string &source) {
    TESSERA_CHECK(j.is_object() && j.value("format", "") == "tessera-graph", source,
                  ": not a Tessera graph (expected \"format\": \"tessera-graph\")");
    TESSERA_CHECK(field<int>(j, "version", source) == 1, source, ": unsupported graph version ",
                  json_preview(j.at("version")), " (this build reads version 1)");
    Graph g;
    const json &tensors = j.at("tensors");
    TESSERA_CHECK(tensors.is_array(), source, ": 'tensors' must be a list");
    const json &nodes = j.at("nodes");
    TESSERA_CHECK(nodes.is_array(), source, ": 'nodes' must be a list");
    // Tensors and nodes are re-created in their original interleaving, so that
    // every TensorId comes out as it was.
    size_t next_tensor = 0;
    std::map<std::string, NodeId> node_ids;
    auto add_tensors_until = [&](size_t node_count) {
        for (; next_tensor < tensors.size(); next_tensor++) {
            const json &e = tensors[next_tensor];
            if (e.value("after_nodes", size_t{0}) > node_count) break;
            add_input_tensor(g, e, source + ": tensors[" + std::to_string(next_tensor) + "]");
        }
    };
    for (size_t i = 0; i < nodes.size(); i++) {
        add_tensors_until(i);
        add_node_from_json(g, nodes[i], source + ": nodes[" + std::to_string(i) + "]", node_ids);
    }
    add_tensors_until(nodes.size());
    TESSERA_CHECK(next_tensor == tensors.size(), source, ": tensors[", next_tensor,
                  "] has an 'after_nodes' beyond the node count");
    for (const auto &[k, v] : j.at("outputs").items()) g.set_output(k, tensor_named(g, v.get<std::string>(), source));
    return g;
}

void save_graph(const Graph &g, const std::string &path) {
    write_file_atomically(path, graph_to_json(g).dump(1) + "\n", "the graph file");
}

Graph load_graph(const std::string &path) {
    const json j = parse_json_input(read_input_file(path, "the graph file", kMaxJsonFileBytes),
                                    "the graph file '" + path + "'");
    try {
        return graph_from_json(j, path);
    } catch (const json::exception &e) {
        fail("'", path, "' is not a valid Tessera graph: ", e.what());
    }
}

}  // namespace tessera
