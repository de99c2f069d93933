// Staged operators: one operator run as a few steps, so that the reductions
// inside it can be combined across devices between the steps.
//
// When a partition splits an index variable that an operator reduces over
// (batch norm's statistics on a batch split, softmax's row maximum and sum on a
// class split), each device holds only part of every such reduction. The
// operator's Halide description marks these reductions as stages
// (OpStrategies::stages, in dependency order). Lowering then replaces the
// operator by m + 1 calls of the same operator with the attribute "phase":
//   phase p < m   inputs: the operator's inputs, then stages 0 .. p-1 (combined)
//                 output: stage p, computed from this device's block
//   phase m       inputs: the operator's inputs, then every stage
//                 outputs: the operator's outputs
// and a collective after each phase p < m whose stage crosses devices. Each
// phase runs a kernel compiled from the same description (lang/tools/kernelc).
// A staged call also carries, per input i, "whole_in<i>" (the whole tensor's
// shape, for the counts a mean divides by) and "origin_in<i>" (where this
// block starts in it, for class indices compared with labels).
#pragma once

#include <string>
#include <vector>

#include "tessera/lang/op.h"

namespace tessera {

// Whether `call` is one phase of a staged operator.
bool is_staged(const OpCall &call);

// The stage names of the operator's description for these inputs (empty when
// it has none, or when its variant was not analysed).
std::vector<std::string> op_stages(const OpCall &call, const std::vector<TensorType> &inputs);

// The type of every stage tensor of `call` (all stages of one operator share
// it): per row for softmax and layer norm (leading dimensions folded into
// one), per batch entry for cross-entropy, per channel for batch norm (in
// double precision: its sums are accumulated in double), [N, C] for global
// average pooling.
TensorType stage_type(const OpCall &call, const std::vector<TensorType> &inputs);

// Phase `phase` of `call`, for a block of its inputs: `whole[i]` is input i's
// whole shape and `origin[i]` the block's first coordinate in it.
OpCall staged_call(const OpCall &call, int phase, const std::vector<Shape> &whole, const std::vector<Shape> &origin);

// The plain operator call behind a staged one, its phase, and input i's whole
// shape and block origin.
OpCall unstaged_call(const OpCall &call);
int staged_phase(const OpCall &call);
Shape staged_whole(const OpCall &call, size_t input);
Shape staged_origin(const OpCall &call, size_t input);

// Shape inference of a staged call (infer_types calls it).
std::vector<TensorType> infer_staged(const OpCall &call, const std::vector<TensorType> &inputs);

}  // namespace tessera
