// The stages that follow the partition, for one rank's graph:
//   memory   the default operator order and its memory plan
//   times    when the rank swaps, the operator times the caller's OpTimer
//            gives: profiled on the run's device (profile_stage.h) or the
//            roofline model's (predict/roofline.h)
//   swap     when the policy or the budget asks for it, the swap planner's
//            plans from those times
//   program  the programs the executor runs
// plan_run (run_plan.h) runs them for its rank; the step predictor
// (predict/step_predictor.h) for every rank of a plan, on several threads
// that share one MemoryPlanCache.
//
//   MemoryPlanCache plans;                      // shared by the ranks of one plan
//   RankPlan r = plan_rank(dg.graph, spec, op_timer, &plans);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"
#include "tessera/pipeline/op_times.h"
#include "tessera/program/memory_plan.h"
#include "tessera/program/program.h"
#include "tessera/swap/swap_plan.h"

namespace tessera {

// A run's swap planning: the search (SwapOptions: its defaults are the only
// ones) over the plan space a run starts from, updates on the device and
// recomputation allowed, as tessera-train's --host-updates off and
// --recompute auto. `policy` decides search.policy; search.progress reports
// the training plan's search (it may be empty).
SwapOptions run_swap_search();

// Whether a rank swaps: when its budget is below its footprint (auto),
// always (--swap advisor, lru or vdnn; tessera-plan's ideal too), or never
// (--swap none: a budget below the footprint is an error).
enum class SwapWhen { Auto, Always, Never };

// --swap's value: auto, none, or a policy (advisor, lru, vdnn, ideal), which
// always swaps with that planner. Throws tessera::Error naming the valid ones.
void read_swap_choice(const std::string &name, SwapWhen &when, SwapPolicy &policy);
// Its name back: auto, none, or the policy's.
std::string swap_choice_name(SwapWhen when, SwapPolicy policy);

struct SwapSpec {
    SwapWhen when = SwapWhen::Auto;
    SwapOptions search = run_swap_search();  // search.policy: the planner, when the rank swaps
};

struct SwapPlans {
    SwapPlan train, forward;  // the forward plan keeps the training plan's homes
    OpTimes times;            // what they were planned with
    double times_s = 0;       // how long taking the times took (the profile stage, on a device)
    // The least step any plan of the training step could take with these
    // times (swap_lower_bound); none for plans read from a file.
    std::optional<SwapBound> bound;
};

// Called only when the rank swaps and no swap plans were given: times the
// operators of `g` (in `order`) on a device whose arena is `budget` bytes.
using OpTimer = std::function<OpTimes(const Graph &g, const std::vector<NodeId> &order, int64_t budget)>;

struct RankSpec {
    std::optional<int64_t> budget;  // device bytes; none: what the memory plan needs
    // The budget is a limit (exec/device_budget.h): a rank that fits gets an
    // arena of what its memory plan needs, not the whole budget.
    bool budget_is_limit = false;
    SwapSpec swap;
    // The evaluation program's outputs (logits and loss); none: no evaluation
    // program and no forward swap plan.
    std::vector<TensorId> forward_outputs;
    const SwapPlans *given_swaps = nullptr;  // plans made earlier: used instead of searching
    bool log_stages = false;                 // TESSERA_LOG's memory, swap and program sections
};

struct RankPlan {
    std::vector<NodeId> order;
    MemoryPlan memory;      // with swapping, the swap run's
    int64_t footprint = 0;  // arena bytes the default order needs without swapping
    int64_t arena = 0;      // the device's arena: the budget, or the footprint (also when it is
                            // below a budget that is a limit)
    std::optional<SwapPlans> swaps;
    Program train, forward;  // forward: the evaluation program (empty without forward_outputs)
};

// The memory stage alone: the default order of `g` and its memory plan
// (whose arena_bytes is the footprint without swapping).
struct RankMemory {
    std::vector<NodeId> order;
    MemoryPlan memory;
};
RankMemory plan_rank_memory(const Graph &g);

// Memory plans already made, keyed by everything plan_memory reads: each
// tensor's bytes, storage root and persistence, and the order's nodes (ids,
// kinds, whether they communicate, inputs and outputs). Graphs with one key
// get one plan: the ranks of one partition often share them. Safe to share
// between threads.
class MemoryPlanCache {
public:
    std::shared_ptr<const MemoryPlan> plan(const Graph &g, const std::vector<NodeId> &order);

private:
    std::mutex m_;
    std::map<std::vector<int64_t>, std::shared_ptr<const MemoryPlan>> plans_;
};

// The memory, swap and program stages for `g`. Throws tessera::Error for a
// budget that cannot work, naming the operator, before anything is timed.
RankPlan plan_rank(const Graph &g, const RankSpec &spec, const OpTimer &op_timer, MemoryPlanCache *cache = nullptr);

}  // namespace tessera
