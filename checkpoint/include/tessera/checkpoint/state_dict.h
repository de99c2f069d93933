// PyTorch state_dicts from checkpoints (tessera-train --export-state-dict):
// the weights of a checkpoint under the names and in the layouts a PyTorch
// module of the same architecture has, as safetensors, which
// module.load_state_dict(load_file(FILE), strict=True) accepts.
//
// An imported model (onnx_import.h) keeps its ONNX names, which are its
// module's state_dict keys. A zoo model's names map by rule
// (docs/training.md#weights-for-pytorch):
//   P.w [in, out], a linear layer's      -> P.weight [out, in] (nn.Linear)
//   P.w [co, ci, kh, kw], a convolution  -> P.weight (nn.Conv2d), or P.0.weight
//                                           when batch norm P.gamma follows it
//   P.gamma, P.beta of batch norm        -> P.1.weight, P.1.bias, with
//                                           P.running_mean and P.running_var
//                                           as P.1.running_mean, P.1.running_var
//                                           and P.1.num_batches_tracked the step
//                                           (nn.Sequential(Conv2d, BatchNorm2d))
//   P.gamma, P.beta of layer norm        -> P.weight, P.bias (nn.LayerNorm)
//   P.b                                  -> P.bias
//   an embedding table T                 -> T.weight (nn.Embedding)
// A parameter no rule covers (the LSTM's fused gate weights) is a
// tessera::Error naming it.
#pragma once

#include <string>

#include "tessera/types.h"

namespace tessera {

// Reads checkpoint_dir's checkpoint.safetensors, written for `model`, and
// writes the state_dict to `out` atomically: its floating tensors in `dtype`
// (F32, or BF16 as module.to(torch.bfloat16)'s state_dict has them; the
// checkpoint itself holds the f32 master weights). Errors name the file, the
// model and the tensor. A checkpoint written before Tessera tracked batch
// norm's running statistics gives their initial values (a fresh module's).
void export_state_dict(const std::string &model, const std::string &checkpoint_dir, const std::string &out,
                       DType dtype = DType::F32);

}  // namespace tessera
