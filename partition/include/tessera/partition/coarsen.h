// Coarsening, before the search (Tofu section 5.2). It shrinks the problem the
// dynamic program sees without, in this cost model, losing any plan worth having:
//
//   * tensor groups: a tensor, its gradient and every contribution to it share one
//     layout; so do a weight, its gradient, its optimizer state and its update;
//     so do the input and output of a unary element-wise operator (a run of them
//     is one group); so do the same tensor of every unrolled RNN timestep.
//   * op groups: a forward operator with its backward operators; an optimizer
//     update with the forward operator of its weight; a run of element-wise
//     operators; one operator of every RNN timestep.
//
// Grouping forward with backward operators, or merging element-wise runs, costs
// nothing: converting a tensor before or after an element-wise operator moves the
// same bytes. Tying a tensor to its gradient, and one timestep to the next, does
// restrict the search (Tofu makes the same choice); the README says so.
#pragma once

#include <string>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera {

struct Coarsening {
    std::vector<int> tensor_group;  // per tensor
    std::vector<int> op_group;      // per node
    int num_tensor_groups = 0;
    int num_op_groups = 0;
    // What was merged, counted, for reports: "12 gradients tied to their tensors".
    std::vector<std::string> summary;
};

// With `enabled` false every node is its own group, and so is every tensor
// but an optimizer's output, which always shares the group (the layout) of the
// tensor it replaces in place (TensorInfo::updates): that is what running the
// update needs, not a simplification.
Coarsening coarsen(const Graph &g, bool enabled = true);

// The RNN timestep key of a node name: "lstm0.t3.gates" -> "lstm0.t*.gates";
// names with no "t<digits>" scope component are returned unchanged.
std::string timestep_key(const std::string &name);

}  // namespace tessera
