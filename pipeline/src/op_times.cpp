#include "tessera/pipeline/op_times.h"

#include <utility>

#include "tessera/error.h"

namespace tessera {

OpTimes untimed(const Graph &g) {
    OpTimes t;
    t.node_time_s.assign(static_cast<size_t>(g.num_nodes()), 0.0);
    t.host_node_time_s = t.node_time_s;
    t.h2d_bytes_per_s = t.d2h_bytes_per_s = 1;
    return t;
}

SwapProblem make_swap_problem(const Graph &g, std::vector<NodeId> order, const OpTimes &times, int64_t budget,
                              HostUpdates host) {
    SwapProblem problem;
    problem.graph = &g;
    problem.order = std::move(order);
    problem.budget = budget;
    problem.node_time_s = times.node_time_s;
    problem.h2d_bytes_per_s = times.h2d_bytes_per_s;
    problem.d2h_bytes_per_s = times.d2h_bytes_per_s;
    if (host != HostUpdates::Off) {
        TESSERA_CHECK(!times.host_node_time_s.empty(), "host-side updates need the optimizer's host times, "
                                                       "which the operator timing did not give");
        problem.host_node_time_s = times.host_node_time_s;
    }
    return problem;
}

}  // namespace tessera
