// The precision policy: which tensors of a forward graph are stored in bf16 or
// f16, as autocast and Megatron's Float16Module do it (docs/training.md,
// "Precision").
//
//   fp32  every floating tensor f32 (the default).
//   tf32  f32 storage; a GPU's matrix products round their operands to tf32
//         (CUBLAS_COMPUTE_32F_FAST_TF32). On the CPU it is fp32.
//   bf16  weights keep an f32 master copy that the optimizer updates; each
//   fp16  step casts it once to a working copy in the low type. Fed floats
//         (images) are cast on arrival. Every activation is then stored in the
//         low type and computed in f32 registers; softmax_xent's loss and batch
//         norm's running statistics stay f32. Gradients reach the master
//         weights through the casts' backward, so they are f32, and are summed
//         across devices in f32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera {

enum class Precision : uint8_t { FP32, TF32, BF16, FP16 };

// "fp32", "tf32", "bf16" or "fp16"; throws tessera::Error naming the choices.
Precision precision_from_name(const std::string &name);
const char *precision_name(Precision p);
// The choices, for --help: "fp32|tf32|bf16|fp16".
std::string precision_choices();

// Where activations and working weights live: F32, BF16 or F16.
DType storage_dtype(Precision p);

// Rewrites a forward graph (no backward or optimizer node yet) for `p`: one
// cast node per f32 parameter, fed input and constant that a node reads,
// named "<tensor>.<dtype>", and every node's outputs re-inferred. Tensor
// names, node names, roles and outputs are kept. Returns, per TensorId of the
// old graph, the tensor of the new graph that holds it. fp32 and tf32 leave
// the graph as it was (and return the identity).
std::vector<TensorId> apply_precision(Graph &g, Precision p);

// The storage types of a graph's floating tensors, for summaries: "bf16 (412
// tensors), f32 (97 tensors)".
std::string dtype_summary(const Graph &g);

}  // namespace tessera
