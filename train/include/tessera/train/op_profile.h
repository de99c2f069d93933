// tessera-train --profile-ops FILE: where a step's operator time goes on the
// run's device. Each operator of the step is timed alone on the device (the
// swap planner's profiling pass, exec/profile.h), and the report says, per
// operator kind and for the slowest nodes, the time, its share of the sum, and
// the rates reached against the floating-point operations and bytes the
// operator must do (predict/roofline.h's counts): a kernel far under the device's
// rates is the one to make faster.
#pragma once

#include <string>
#include <vector>

#include "tessera/graph/graph.h"

namespace tessera {

// The report for `order`'s nodes of `g`, timed at `node_time_s` (per NodeId)
// on `device`; `top` slowest nodes are listed one by one.
std::string op_profile_report(const Graph &g, const std::vector<NodeId> &order, const std::vector<double> &node_time_s,
                              const std::string &device, int top = 30);

}  // namespace tessera
