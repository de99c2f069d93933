// A zoo model's training graph for tests: the model (models/zoo.h) at `batch`,
// its loss, and the optimizer's update nodes.
#pragma once

#include <string>
#include <utility>

#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"

namespace tessera::test {

inline OptimizerConfig optimizer_config(OptimizerConfig::Kind kind, double lr) {
    OptimizerConfig cfg;
    cfg.kind = kind;
    cfg.lr = lr;
    return cfg;
}

inline Graph zoo_training_graph(const std::string &spec, int64_t batch, const OptimizerConfig &cfg = {}) {
    Model m = build_model(spec, batch);
    make_training_graph(m.graph, m.loss, cfg);
    return std::move(m.graph);
}

}  // namespace tessera::test
