// Optimizer update operators appended to a training graph.
//
// Each parameter gets its state tensors (momentum; or Adam's two moments) and one
// update node whose outputs replace the parameter and its state in place
// (TensorInfo::updates). Weight decay is L2 for SGD (added to the gradient inside
// the update) and decoupled for Adam (AdamW).
#pragma once

#include <string>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera {

struct OptimizerConfig {
    enum class Kind : uint8_t { Sgd, Adam };
    Kind kind = Kind::Sgd;
    double lr = 0.01;
    double momentum = 0.9;  // SGD
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam
    double weight_decay = 0;
    // Dynamic loss scaling (fp16, as PyTorch's GradScaler): the loss gradient's
    // seed is the data tensor kLossScaleTensor, the step counts its gradients'
    // non-finite elements into kNonfiniteTensor, and every update unscales its
    // gradient, or, when that count is not 0, leaves weight and state unchanged.
    bool loss_scaling = false;
    bool operator==(const OptimizerConfig &) const = default;
};

// "sgd" or "adam"; throws tessera::Error listing the valid names.
OptimizerConfig::Kind optimizer_from_name(const std::string &name);
const char *optimizer_name(OptimizerConfig::Kind k);

// The name of the i32 [] data tensor that holds the 1-based step for Adam.
inline constexpr const char *kStepTensor = "optimizer.step";

// Loss scaling's tensors (OptimizerConfig::loss_scaling): the f32 [] data
// tensor the trainer writes the scale to before each step, and the f32 []
// count of non-finite gradient elements the step leaves (a named output of the
// graph, so that it keeps its storage all step).
inline constexpr const char *kLossScaleTensor = "loss_scale";
inline constexpr const char *kNonfiniteTensor = "grads.nonfinite";

// Appends one update per (param, grad) pair. Returns the updated parameters.
// With loss scaling, the graph must already hold kLossScaleTensor.
std::vector<TensorId> append_optimizer(Graph &g, const std::vector<TensorId> &params,
                                       const std::vector<TensorId> &grads,
                                       const OptimizerConfig &config);

// The whole training graph for a built forward graph: backward of `loss` with
// respect to every Param, then the optimizer. Returns the gradients, in the
// order of g.with_role(Param).
std::vector<TensorId> make_training_graph(Graph &g, TensorId loss, const OptimizerConfig &config);

}  // namespace tessera
