// What the swap planner needs to know of a device (each operator's time and
// the host link's bandwidths), and the one place a swap problem is made from
// it. The times come from the device (tessera-train profiles its operators,
// exec/profile.h), from the roofline model (predict/roofline.h), or from a
// benchmark's own measurement.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/graph/graph.h"
#include "tessera/swap/swap_plan.h"

namespace tessera {

struct OpTimes {
    std::vector<double> node_time_s;  // per NodeId of the graph timed
    std::vector<double> host_node_time_s;  // per NodeId: optimizer nodes on the host (empty: not timed)
    double h2d_bytes_per_s = 0, d2h_bytes_per_s = 0;
};

// Every operator of `g` free (0 s) and the host link at 1 byte/s: enough to
// check that a budget can work before anything is timed.
OpTimes untimed(const Graph &g);

// The swap problem of `g` run in `order` within `budget` bytes, with `times`.
// The host's optimizer times are part of it only when `host` lets the planner
// run updates there (tessera::Error when they are wanted but were not timed).
SwapProblem make_swap_problem(const Graph &g, std::vector<NodeId> order, const OpTimes &times, int64_t budget,
                              HostUpdates host);

}  // namespace tessera
