// The profiling pass: what the swap planner needs to know about the device it
// plans for, measured on that device before training starts.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tessera/exec/device.h"
#include "tessera/graph/graph.h"

namespace tessera {

struct ProfileOptions {
    int repeats = 3;  // each distinct operator runs this many times after one warm-up; the median counts
    // Communication nodes cannot run alone (they need their peers): their
    // time is their input bytes at this rate.
    double comm_bytes_per_s = 1e9;
    // An optimizer node whose operands do not fit the arena gets time 0
    // instead of an error: it can only run on the host (a host-side update,
    // timed by profile_host_nodes).
    bool skip_oversized_optimizer = false;
    // Called after each distinct operator with (done, total).
    std::function<void(int, int)> progress;
};

// The time of each node of `order` (indexed by NodeId; 0 for nodes not in
// `order`), running it alone on `device` with its inputs and outputs packed
// at the start of the arena, inputs zeroed. Nodes with the same operator,
// attributes and input types are timed once. Uses the device only while
// called (no executor may be running on it). Throws tessera::Error naming the
// node when one's working set exceeds the arena.
std::vector<double> profile_nodes(const Graph &g, const std::vector<NodeId> &order, Device &device,
                                  const ProfileOptions &options = {});

// Per NodeId, for the optimizer nodes of `order`: the median time of the
// node's CPU kernel (run_op) over host memory, as a host-side update runs it
// (SwapProblem::host_node_time_s); 0 for every other node.
std::vector<double> profile_host_nodes(const Graph &g, const std::vector<NodeId> &order, int repeats = 3);

// Bytes per second of a stream-ordered copy of `bytes` between the arena (at
// offset 0) and pinned host memory on the swap streams, in direction `dir`:
// the best of a few runs.
double measure_copy_bandwidth(Device &device, CopyDirection dir, int64_t bytes);

}  // namespace tessera
