// Reverse-mode automatic differentiation on the graph.
//
// append_backward() walks the forward nodes that `loss` depends on in reverse
// order and appends, for each, the backward operators of lang/ that compute the
// gradients of its inputs from the gradient of its outputs (the vector-Jacobian
// product). A tensor read by several nodes gets the sum of their contributions.
// Backward nodes are ordinary nodes (flagged `backward`), so the partitioner and
// the swap planner see the whole training graph.
#pragma once

#include <vector>

#include "tessera/graph/graph.h"

namespace tessera {

// Gradients of the scalar `loss` with respect to each tensor in `wrt`, in order.
// A tensor that `loss` does not depend on gets kNoTensor. Throws tessera::Error
// when the loss is not a scalar f32, and, naming it, for an operator with no
// backward rule (a backward or optimizer operator in the forward graph).
// `seed` is the loss's gradient: by default a constant 1; loss scaling passes
// an f32 [] data tensor holding the scale.
std::vector<TensorId> append_backward(Graph &g, TensorId loss, const std::vector<TensorId> &wrt,
                                      TensorId seed = kNoTensor);

}  // namespace tessera
