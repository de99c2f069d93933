// The swap plan (docs/swapping.md): what one device does when its graph
// does not fit its memory. A pure planner: it reads a graph, operator times,
// the budget and the host-device bandwidth, and allocates no tensor memory.
//
// Memory model. The arena (exactly the budget) is cut in two:
//   * [0, pinned_bytes): persistent tensors (weights, optimizer state, data,
//     graph outputs) that the plan keeps on the device all the time, each at a
//     fixed offset;
//   * above it, pools of fixed-size slots, one pool per size class. Every other
//     buffer (a storage root: in-place optimizer outputs share their target's
//     storage) maps to the smallest class that holds it, and while it is on
//     the device it occupies one slot of that pool.
// Persistent tensors that are not pinned live in host memory between steps
// ("host-homed"): they are swapped in before use, and swapped back out at
// the end of the step when the step wrote them (the optimizer's in-place
// update, a graph output such as the loss).
//
// Schedule. Given an operator order and a pool layout, the swap planner walks
// the order. An operator needs its inputs and outputs resident; the advisor
// lets an element-wise operator write its output over an input it reads for
// the last time (in that input's slot). When a pool has
// no free slot, it evicts the resident buffer of that class whose next use is
// furthest away (Belady); an evicted buffer whose host copy is stale is swapped
// out first (its swap-out starts after its last write). A swap-in is issued as
// early as its slot allows: once the slot's previous occupant has been read for
// the last time and, if it was swapped out, its swap-out has completed.
// The baselines reuse that machinery with other rules (SwapPolicy).
//
// Host-side updates (after ZeRO-Offload). An optimizer node whose weight and
// state are host-homed may run on the host instead: its gradient is swapped
// out, the host stream runs the CPU kernel over the host copies, and the
// moments never cross the link; the updated weight comes back when the next
// step swaps it in. Buffers such a node uses are never pinned.
//
// Simulator. Four streams (compute, swap-out, swap-in, host), each in order;
// steps wait for the steps named in `after`. Swap time is bytes over the
// measured bandwidth; a host update takes its host time. A communication node
// (Node::comm) runs blocking, in the compute stream's place, for its given
// time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tessera/graph/graph.h"

namespace tessera {

enum class SwapPolicy : uint8_t {
    Advisor,  // the genetic algorithm over order and pools, Belady eviction, early prefetch
    Lru,      // the default order; on-demand swap-in, least-recently-used eviction
    Vdnn,     // the default order; forward activations swapped out after their forward use,
              // prefetched one operator ahead in the backward pass; LRU otherwise
    Ideal,    // unlimited memory: no swapping, one pool per buffer; the bound to compare with
};
const char *swap_policy_name(SwapPolicy p);  // "advisor", "lru", "vdnn", "ideal"
// Throws tessera::Error listing the valid names.
SwapPolicy swap_policy_from_name(const std::string &name);

// Which optimizer updates may run on the host (SwapPlan's host-update steps).
enum class HostUpdates : uint8_t {
    Off,   // every update on the device
    Auto,  // the genetic algorithm chooses per update
    All,   // every update that can (its weight and state host-homed) on the host
};
const char *host_updates_name(HostUpdates h);  // "off", "auto", "all"
// Throws tessera::Error listing the valid names.
HostUpdates host_updates_from_name(const std::string &name);

struct SwapPlan;

struct SwapProblem {
    const Graph *graph = nullptr;
    // The nodes to run, in a topological order (the default order, or a
    // subsequence of it for the evaluation program). The genetic algorithm
    // may run them in any other topological order, except that communication
    // nodes keep their relative order (every rank must issue collectives in
    // the same order).
    std::vector<NodeId> order;
    std::vector<double> node_time_s;  // per NodeId (num_nodes entries); only nodes of `order` are read
    // Per NodeId, the time of the node on the host (its CPU kernel over host
    // memory); read for optimizer nodes only. Empty: no host-side updates.
    std::vector<double> host_node_time_s;
    int64_t budget = 0;               // the arena, in bytes
    double h2d_bytes_per_s = 0;       // swap-in bandwidth, measured
    double d2h_bytes_per_s = 0;       // swap-out bandwidth, measured
    // When set, keep this plan's homes: the same persistent tensors pinned at
    // the same offsets (so that a second program, e.g. evaluation, runs
    // against the same weights). Its pools may differ.
    const SwapPlan *homes_from = nullptr;
};

struct SwapProgress {
    int generation = 0, generations = 0;
    int64_t candidates = 0;  // schedules simulated so far
    double best_time_s = 0;  // the best predicted iteration time so far
    double elapsed_s = 0;
    bool last = false;  // the search ends after this generation (a limit, or patience)
};

// The search's defaults (population, generations, time limit, patience) are
// the only ones: tessera-train's and tessera-plan's flags default to them
// (pipeline's SwapSpec holds them). On the small transformer at 12x over its
// budget, patience 100 ends the search after about 1,200 generations and 4 s
// at 78.8% of ideal, where a flat 100 generations gave 64.6%
// (docs/swapping.md).
struct SwapOptions {
    SwapPolicy policy = SwapPolicy::Advisor;
    int population = 24;
    int generations = 5000;
    double time_limit_s = 30;  // the search stops at this limit or after `generations`, whichever is first
    // It also stops once this many generations in a row have not improved
    // the best time by kSwapImprovement (0: only the limits above stop it).
    // Counted in generations, not seconds, so the plan stays a function of
    // the seed and the inputs.
    int patience = 100;
    uint64_t seed = 1;         // same seed and inputs: same plan (the time limit aside)
    bool reorder = true;       // whether the genetic algorithm may change the operator order
    HostUpdates host_updates = HostUpdates::Auto;  // needs SwapProblem::host_node_time_s; advisor only
    // Whether the advisor may drop forward activations and recompute them
    // before their next use instead of swapping them (one gene each).
    bool recompute = false;
    // Threads that score the advisor's candidates (1 to 64). The plan does
    // not depend on it when `generations` ends the search; within a time
    // limit, more threads score more candidates.
    int threads = 1;
    // Called after each generation (from the calling thread).
    std::function<void(const SwapProgress &)> progress;
};

struct SwapPool {
    int64_t slot_bytes = 0;  // a multiple of kSwapAlignment
    int slots = 0;
    int64_t offset = 0;  // of the pool's first slot in the arena
    bool operator==(const SwapPool &) const = default;
};

inline constexpr int64_t kSwapAlignment = 64;
// The relative gain in the best time that counts as progress for
// SwapOptions::patience: 0.1%.
inline constexpr double kSwapImprovement = 1e-3;

struct SwapStep {
    enum class Kind : uint8_t { Compute, SwapOut, SwapIn, HostUpdate, Recompute };
    Kind kind = Kind::Compute;
    // Compute: the node (a communication node runs as a blocking collective);
    // HostUpdate: the optimizer node run on the host over host copies;
    // Recompute: the producer of a dropped activation, run again on the
    // compute stream (its output is `tensor`, written at `offset`).
    NodeId node = kNoNode;
    TensorId tensor = kNoTensor;  // SwapOut, SwapIn: the storage root moved; Recompute: the one it writes
    int64_t offset = -1;          // SwapOut: the slot read; SwapIn, Recompute: the slot written (arena offsets)
    int64_t bytes = 0;            // SwapOut, SwapIn: the tensor's bytes
    // Earlier steps (indices into SwapPlan::steps) on other streams that must
    // complete before this one starts. Steps on the same stream run in issue
    // order anyway.
    std::vector<int> after;
    double start_s = 0, end_s = 0;  // simulated
    bool operator==(const SwapStep &) const = default;
};
const char *swap_step_kind_name(SwapStep::Kind k);  // "compute", "swap-out", "swap-in", "host-update", "recompute"
// The simulator's stream of a step kind: 0 compute (and recompute), 1
// swap-out, 2 swap-in, 3 host.
int swap_step_stream(SwapStep::Kind k);

struct SwapPlan {
    SwapPolicy policy = SwapPolicy::Advisor;
    std::vector<NodeId> order;  // the compute order
    int64_t arena_bytes = 0;    // the budget
    int64_t pinned_bytes = 0;   // [0, pinned_bytes) holds the pinned persistent tensors
    std::vector<SwapPool> pools;
    // Per TensorId, meaningful for storage roots only (-1 elsewhere):
    //   pinned: the fixed arena offset of a pinned persistent tensor;
    //   produce_at: the arena offset where the tensor's producer writes it
    //     (every produced storage root that is not pinned);
    //   swapped: 1 for every buffer that ever moves to or from host memory,
    //     including the host-homed persistent tensors (which need host space
    //     even if this plan does not touch them).
    std::vector<int64_t> pinned;
    std::vector<int64_t> produce_at;
    std::vector<uint8_t> swapped;
    // In issue order: the compute steps in `order`, and each swap where the
    // host issues it (after the last step it waits for).
    std::vector<SwapStep> steps;
    // Per NodeId, the host time of each node the plan updates on the host
    // (0 elsewhere); empty when it has none.
    std::vector<double> host_node_time_s;

    // Predictions, from the simulator.
    double time_s = 0;        // the iteration
    double ideal_time_s = 0;  // the sum of the operator times: no swapping, unlimited memory
    int64_t high_water = 0;   // the largest offset + bytes any step touches
    int64_t peak_bytes = 0;   // the most bytes resident at once in the simulation
    int64_t swap_out_bytes = 0, swap_in_bytes = 0;
    // The search.
    int generations = 0;
    int64_t candidates = 0;
    double search_s = 0;
    // Why the search ended: "generations", "time limit", "patience" (no
    // progress, SwapOptions::patience); empty for the baselines.
    std::string stopped_by;

    bool operator==(const SwapPlan &) const = default;
};

// Plans `problem` with `options.policy`. Throws tessera::Error when the budget
// cannot work, naming the operator and the bytes it needs (e.g. "operator
// 'fc1' needs 96.0 MiB for its inputs and outputs (x 32.0 MiB, w 32.0 MiB,
// y 32.0 MiB) but the budget is 64.0 MiB"), or when the inputs are malformed.
SwapPlan plan_swaps(const SwapProblem &problem, const SwapOptions &options = {});

// The fewest bytes any plan for `problem` needs: the largest working set of
// one operator (its inputs and outputs, by storage root), aligned; with
// `homes_from`, plus its pinned bytes. With host updates (and host times in
// `problem`), the optimizer nodes that may run on the host do not count.
int64_t min_swap_budget(const SwapProblem &problem, HostUpdates host = HostUpdates::Off);

// A lower bound on the iteration time of every plan for `problem` (any order,
// layout, swaps and recomputations; with `host`, any choice of the updates
// run on the host): the busiest stream's unavoidable work, and the bytes that
// cannot stay on the device where the backward pass starts (src/bound.cpp).
// Throws like plan_swaps when the budget cannot work.
struct SwapBound {
    double time_s = 0;  // no plan is faster: the larger of these two
    double streams_s = 0;  // each stream's work, and the turn's bytes
    double phased_s = 0;   // the work before the backward pass starts plus the work after
    // What sets it: "compute", "swap-in", "swap-out", "host", or "turn" (the
    // swap-in and compute streams' spare time cannot bring back the turn's
    // bytes); or, where the step split where the backward pass starts binds,
    // the stream before the split and the one after ("swap-in, then host").
    std::string limit;
    // The streams' unavoidable work with only the updates that must run on
    // the host there, before the turn's bytes.
    double compute_s = 0, swap_in_s = 0, swap_out_s = 0;
    // Read or made before the turn and read after it: persistent buffers
    // (weights) and activations.
    int64_t turn_weight_bytes = 0, turn_activation_bytes = 0;
};
SwapBound swap_lower_bound(const SwapProblem &problem, HostUpdates host = HostUpdates::Off);
// "no plan can beat 4.52 ms (97.2% of ideal), set by compute, then swap-in":
// the bound against the plan's ideal step, for the programs' summaries.
std::string describe_swap_bound(const SwapBound &bound, double ideal_time_s);
// Re-runs the simulator over a plan's steps with other times (the measured
// ones; host updates keep the plan's host times), returning the predicted
// iteration time; `plan` is not changed.
double simulate_swap_plan(const SwapPlan &plan, const std::vector<double> &node_time_s, double h2d_bytes_per_s,
                          double d2h_bytes_per_s);

// Checks a plan against its graph: slots inside the arena, every step's
// dependencies earlier, every operator's buffers resident when it runs, no
// two resident buffers overlapping. tessera::Error names the step.
void check_swap_plan(const Graph &g, const SwapPlan &plan, const std::string &source = "swap plan");

nlohmann::json swap_plan_to_json(const SwapPlan &plan);
SwapPlan swap_plan_from_json(const nlohmann::json &j, const std::string &source = "swap plan JSON");

// Human-readable: a summary; per tensor the plan keeps or moves, where it is
// (kept pinned, swapped or host-homed, with its swaps, and which update runs
// on the host); a table of the swaps and host updates (step, stream, tensor
// or node, bytes, slot, simulated start and end).
std::string swap_plan_table(const Graph &g, const SwapPlan &plan);

}  // namespace tessera
