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
//         weights through the casts' backward. fp16 also scales its loss
//         (OptimizerConfig::loss_scaling; docs/training.md, "Loss scaling").
//
// Weight gradients (GradReduce, --grad-reduce-dtype): by default each weight's
// gradient is computed into f32 from the 16-bit operands (the kernel's f32
// result kept instead of rounded), summed over its uses in f32, and so reduced
// across devices in f32. GradReduce::Low rounds each contribution to the
// storage type, and devices then sum bf16 partial gradients (Megatron's bf16
// default): half the bytes, and a rounding per sum.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera {

enum class Precision : uint8_t { FP32, TF32, BF16, FP16 };
enum class GradReduce : uint8_t { F32, Low };

// The working-copy casts' attribute: the dtype its gradient is accumulated in
// ("f32", or the storage type's name). Autodiff reads it (gradient_kept_f32).
inline constexpr const char *kGradDtypeAttr = "grad_dtype";

// "fp32", "tf32", "bf16" or "fp16"; throws tessera::Error naming the choices.
Precision precision_from_name(const std::string &name);
const char *precision_name(Precision p);
// The choices, for --help: "fp32|tf32|bf16|fp16".
std::string precision_choices();

// "fp32" or "bf16" (also "fp16": the storage type); throws tessera::Error naming them.
GradReduce grad_reduce_from_name(const std::string &name);
const char *grad_reduce_name(GradReduce r);  // "fp32" or "bf16"

// Whether tensor t is a weight's working copy whose gradient autodiff keeps
// in f32 (a cast with kGradDtypeAttr "f32").
bool gradient_kept_f32(const Graph &g, TensorId t);
// Whether tensor t is (a contribution to) the gradient of a weight's working
// copy whose gradient stays in the storage type (GradReduce::Low).
bool gradient_reduced_low(const Graph &g, TensorId t);

// Where activations and working weights live: F32, BF16 or F16.
DType storage_dtype(Precision p);

// Whether training in `p` scales its loss (fp16 alone: OptimizerConfig::loss_scaling).
inline bool loss_scaled(Precision p) { return p == Precision::FP16; }

// Rewrites a forward graph (no backward or optimizer node yet) for `p`: one
// cast node per f32 parameter, fed input and constant that a node reads,
// named "<tensor>.<dtype>" (a weight's carries kGradDtypeAttr for `grad`),
// and every node's outputs re-inferred. Tensor
// names, node names, roles and outputs are kept. Returns, per TensorId of the
// old graph, the tensor of the new graph that holds it. fp32 and tf32 leave
// the graph as it was (and return the identity).
std::vector<TensorId> apply_precision(Graph &g, Precision p, GradReduce grad = GradReduce::F32);

// The storage types of a graph's floating tensors, for summaries: "bf16 (412
// tensors), f32 (97 tensors)".
std::string dtype_summary(const Graph &g);

}  // namespace tessera
