// The JSON form of a graph: every tensor (name, dtype, shape, role, init,
// updates) and every node (op, name, attributes, inputs, outputs by name).
// save_graph writes atomically; load_graph validates what it reads and names
// the file and the entry that is wrong.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "tessera/graph/graph.h"

namespace tessera {

nlohmann::json graph_to_json(const Graph &g);
// Rebuilds the graph through Graph::add_node, so shapes are re-inferred and
// checked against the recorded ones. `source` names the origin in errors.
Graph graph_from_json(const nlohmann::json &j, const std::string &source = "graph JSON");

void save_graph(const Graph &g, const std::string &path);
Graph load_graph(const std::string &path);

}  // namespace tessera
