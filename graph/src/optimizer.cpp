#include "tessera/graph/optimizer.h"

#include "tessera/error.h"
#include "tessera/graph/autodiff.h"

namespace tessera {

OptimizerConfig::Kind optimizer_from_name(const std::string &name) {
    if (name == "sgd") return OptimizerConfig::Kind::Sgd;
    if (name == "adam") return OptimizerConfig::Kind::Adam;
    fail("unknown optimizer '", name, "'; valid optimizers: sgd (with momentum), adam");
}

const char *optimizer_name(OptimizerConfig::Kind k) { return k == OptimizerConfig::Kind::Sgd ? "sgd" : "adam"; }

namespace {

// An update's inputs, then loss scaling's (none without it).
std::vector<TensorId> with(const std::vector<TensorId> &scaling, std::vector<TensorId> inputs) {
    inputs.insert(inputs.end(), scaling.begin(), scaling.end());
    return inputs;
}

// Loss scaling's two extra update inputs: the scale, and the step's count of
// non-finite gradient elements, one nonfinite_count per gradient summed by a
// chain of adds. The counts are backward operators: they run once the
// gradients are complete, and every update waits for the last of them.
std::vector<TensorId> loss_scaling_inputs(Graph &g, const std::vector<TensorId> &grads) {
    const std::optional<TensorId> scale = g.find_tensor(kLossScaleTensor);
    TESSERA_INTERNAL_ASSERT(scale, "loss scaling needs the seed '", kLossScaleTensor, "' (make_training_graph)");
    TensorId total = kNoTensor;
    for (size_t i = 0; i < grads.size(); i++) {
        const bool last = i + 1 == grads.size();
        const std::string name = g.tensor(grads[i]).name + ".nonfinite";
        TensorId count = g.add_node(
            OpCall{OpKind::NonfiniteCount, last && i == 0 ? kNonfiniteTensor : g.unique_name(name)}, {grads[i]})[0];
        g.set_node_flags(g.num_nodes() - 1, true, false);
        if (i == 0) {
            total = count;
            continue;
        }
        total = g.add_node(OpCall{OpKind::Add, last ? kNonfiniteTensor : g.unique_name(name + "_sum")},
                           {total, count})[0];
        g.set_node_flags(g.num_nodes() - 1, true, false);
    }
    g.set_output(kNonfiniteTensor, total);  // the trainer reads it after the step
    return {*scale, total};
}

}  // namespace

std::vector<TensorId> append_optimizer(Graph &g, const std::vector<TensorId> &params,
                                       const std::vector<TensorId> &grads, const OptimizerConfig &config) {
    TESSERA_INTERNAL_ASSERT(params.size() == grads.size());
    TESSERA_CHECK(config.lr > 0, "optimizer: the learning rate must be positive, got ", config.lr);
    TESSERA_CHECK(config.weight_decay >= 0, "optimizer: weight decay must be non-negative, got ",
                  config.weight_decay);
    TensorId step = kNoTensor;
    if (config.kind == OptimizerConfig::Kind::Adam)
        step = g.add_data(kStepTensor, TensorType{DType::I32, {}});
    const std::vector<TensorId> scaling = config.loss_scaling ? loss_scaling_inputs(g, grads) : std::vector<TensorId>{};
    std::vector<TensorId> updated;
    for (size_t i = 0; i < params.size(); i++) {
        const TensorInfo p = g.tensor(params[i]);
        TESSERA_INTERNAL_ASSERT(grads[i] != kNoTensor, "parameter '", p.name, "' has no gradient");
        std::string node = g.unique_name(p.name + ".update");
        std::vector<TensorId> outs;
        if (config.kind == OptimizerConfig::Kind::Sgd) {
            TensorId v = g.add_opt_state(p.name + ".momentum", p.type);
            outs = g.add_node(OpCall{OpKind::SgdMomentum, node,
                                     {{"lr", config.lr},
                                      {"momentum", config.momentum},
                                      {"weight_decay", config.weight_decay}}},
                              with(scaling, {params[i], grads[i], v}));
            g.set_updates(outs[1], v);
        } else {
            TensorId m = g.add_opt_state(p.name + ".adam_m", p.type);
            TensorId v = g.add_opt_state(p.name + ".adam_v", p.type);
            outs = g.add_node(OpCall{OpKind::Adam, node,
                                     {{"lr", config.lr},
                                      {"beta1", config.beta1},
                                      {"beta2", config.beta2},
                                      {"eps", config.eps},
                                      {"weight_decay", config.weight_decay}}},
                              with(scaling, {params[i], grads[i], m, v, step}));
            g.set_updates(outs[1], m);
            g.set_updates(outs[2], v);
        }
        g.set_node_flags(g.num_nodes() - 1, false, true);
        g.set_updates(outs[0], params[i]);
        updated.push_back(outs[0]);
    }
    return updated;
}

std::vector<TensorId> make_training_graph(Graph &g, TensorId loss, const OptimizerConfig &config) {
    std::vector<TensorId> params = g.with_role(TensorRole::Param);
    TESSERA_CHECK(!params.empty(), "the model has no parameters to train");
    const TensorId seed =
        config.loss_scaling ? g.add_data(kLossScaleTensor, g.tensor(loss).type) : kNoTensor;
    std::vector<TensorId> grads = append_backward(g, loss, params, seed);
    for (size_t i = 0; i < params.size(); i++)
        TESSERA_CHECK(grads[i] != kNoTensor, "parameter '", g.tensor(params[i]).name,
                      "' does not affect the loss '", g.tensor(loss).name, "'");
    append_optimizer(g, params, grads, config);
    return grads;
}

}  // namespace tessera
