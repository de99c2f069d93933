#include "tessera/pipeline/rank_stages.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include <fmt/format.h>

#include "tessera/error.h"
#include "tessera/pipeline/stage_log.h"
#include "tessera/size.h"
#include "tessera/swap/swap_program.h"

namespace tessera {

namespace {

// Whether the rank swaps: a policy was asked for, or auto and the budget is
// below what the memory plan needs. With none, such a budget is an error.
bool needs_swapping(const RankSpec &spec, int64_t footprint) {
    const SwapWhen when = spec.swap.when;
    const bool tight = spec.budget && *spec.budget < footprint;
    if (when == SwapWhen::Never && tight)
        fail(spec.budget_is_limit ? "the automatic budget is " : "--device-mem is ", format_bytes(*spec.budget),
             " but this run needs ", footprint, " bytes (", format_bytes(footprint),
             ") without swapping; use --device-mem ", size_flag_at_least(footprint),
             " or more, or --swap advisor to train within the budget");
    return when == SwapWhen::Always || (when == SwapWhen::Auto && tight);
}

// Fails, as plan_swaps does (or, for the ideal plan, which plans at any
// budget, on its own), when problem.budget cannot work (the operator times
// may still be zeros). With host updates off, where running optimizer
// updates on the host would need less (a weight, its gradient and its
// moments no longer on the device together), the error says so.
void check_budget_works(const SwapProblem &problem, const SwapSpec &swap) {
    const int64_t need = min_swap_budget(problem, swap.search.host_updates);
    if (need <= problem.budget) return;
    std::string hint;
    if (swap.search.host_updates == HostUpdates::Off) {
        SwapProblem on_host = problem;
        on_host.host_node_time_s = problem.node_time_s;
        const int64_t least = min_swap_budget(on_host, HostUpdates::Auto);
        if (least < need)
            hint = fmt::format("; with the optimizer's updates on the host (--host-updates auto) it needs {} ({} bytes)",
                               format_bytes(least), least);
    }
    try {
        SwapOptions quiet = swap.search;
        quiet.progress = nullptr;
        plan_swaps(problem, quiet);
    } catch (const Error &e) {
        if (hint.empty()) throw;
        throw Error(e.what() + hint);
    }
    // The bound (ideal) plans at any budget; the run still cannot.
    fail("budget ", format_bytes(problem.budget), " (", problem.budget, " bytes) cannot work: the smallest budget that can is ",
         format_bytes(need), " (", need, " bytes)", hint);
}

std::string times_summary(const Graph &g, const SwapPlans &s) {
    double device_s = 0, host_s = 0;
    for (double t : s.times.node_time_s) device_s += t;
    for (double t : s.times.host_node_time_s) host_s += t;
    return fmt::format("{} operators: {:.3f} ms on the device, optimizer updates {:.3f} ms on the host; host link "
                       "{:.2f} GB/s in, {:.2f} GB/s out; taken in {:.2f} s",
                       g.num_nodes(), device_s * 1e3, host_s * 1e3, s.times.h2d_bytes_per_s / 1e9,
                       s.times.d2h_bytes_per_s / 1e9, s.times_s);
}

// The training step's plan, then (with forward outputs) the evaluation pass's
// over the same homes, so that both run against the same weights, with a
// quarter of the search: a quarter of the generations and of the time limit.
SwapPlans plan_swapping(const Graph &g, const RankSpec &spec, const std::vector<NodeId> &order, int64_t budget,
                        const OpTimer &op_timer) {
    // A budget that cannot work fails now, naming the operator, before the
    // operators are timed (profiling needs each one's working set in the arena).
    const HostUpdates host = spec.swap.search.host_updates;
    check_budget_works(make_swap_problem(g, order, untimed(g), budget, host), spec.swap);
    SwapPlans s;
    const auto t0 = std::chrono::steady_clock::now();
    s.times = op_timer(g, order, budget);
    s.times_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (spec.log_stages) log_stage("times", times_summary(g, s));
    const SwapProblem problem = make_swap_problem(g, order, s.times, budget, host);
    SwapOptions o = spec.swap.search;
    s.train = plan_swaps(problem, o);
    s.bound = swap_lower_bound(problem, host);
    if (spec.forward_outputs.empty()) return s;

    SwapProblem fp = problem;
    fp.order = order_for(g, order, spec.forward_outputs);
    fp.homes_from = &s.train;
    o.progress = nullptr;
    o.generations = std::max(1, o.generations / 4);
    o.time_limit_s /= 4;
    s.forward = plan_swaps(fp, o);
    return s;
}

// What plan_memory reads (MemoryPlanCache's key): each tensor's bytes,
// storage root and persistence, and the order's nodes with their ids, their
// kinds (a reshape's output may be a view), whether each communicates, and
// their inputs and outputs.
std::vector<int64_t> memory_key(const Graph &g, const std::vector<NodeId> &order) {
    std::vector<int64_t> key;
    const std::vector<bool> persistent = persistent_tensors(g);
    for (TensorId t = 0; t < g.num_tensors(); t++)
        key.insert(key.end(), {g.tensor(t).type.bytes(), storage_root(g, t), persistent[t] ? 1 : 0});
    for (NodeId n : order) {
        const Node &node = g.node(n);
        key.insert(key.end(), {-1, n, static_cast<int64_t>(node.call.kind), node.comm ? 1 : 0});
        for (TensorId t : node.inputs) key.push_back(t);
        key.push_back(-2);
        for (TensorId t : node.outputs) key.push_back(t);
    }
    return key;
}

}  // namespace

std::shared_ptr<const MemoryPlan> MemoryPlanCache::plan(const Graph &g, const std::vector<NodeId> &order) {
    std::vector<int64_t> key = memory_key(g, order);
    {
        std::lock_guard lk(m_);
        auto it = plans_.find(key);
        if (it != plans_.end()) return it->second;
    }
    auto made = std::make_shared<const MemoryPlan>(plan_memory(g, order));
    std::lock_guard lk(m_);
    return plans_.emplace(std::move(key), std::move(made)).first->second;
}

RankMemory plan_rank_memory(const Graph &g) {
    RankMemory m;
    m.order = default_order(g);
    m.memory = plan_memory(g, m.order);
    return m;
}

namespace {

// Swap plans given from a file are user input: the evaluation plan must run
// only what the forward outputs need (a training plan copied over it would
// update the weights on the test set).
void check_forward_swap_plan(const Graph &g, const SwapPlan &forward, const std::vector<TensorId> &outputs) {
    std::vector<bool> needed(static_cast<size_t>(g.num_nodes()), false);
    std::vector<TensorId> stack = outputs;
    while (!stack.empty()) {
        const NodeId p = g.tensor(stack.back()).producer;
        stack.pop_back();
        if (p == kNoNode || needed[p]) continue;
        needed[p] = true;
        for (TensorId t : g.node(p).inputs) stack.push_back(t);
    }
    for (NodeId n : forward.order)
        TESSERA_CHECK(n >= 0 && n < g.num_nodes() && needed[n], "--plan: the evaluation's swap plan runs ",
                      n >= 0 && n < g.num_nodes() ? "'" + g.node(n).call.name + "'" : "node " + std::to_string(n),
                      ", which the forward pass does not need; the evaluation may not run the training step "
                      "(was the plan edited?)");
}

}  // namespace

RankPlan plan_rank(const Graph &g, const RankSpec &spec, const OpTimer &op_timer, MemoryPlanCache *cache) {
    // The text is made only when the stage is logged: a program's listing is
    // as long as the program, and the predictor plans every rank.
    auto log = [&](const char *stage, const auto &make_text) {
        if (spec.log_stages) log_stage(stage, make_text());
    };
    RankPlan r;
    if (cache) {
        r.order = default_order(g);
        r.memory = *cache->plan(g, r.order);
    } else {
        RankMemory m = plan_rank_memory(g);
        r.order = std::move(m.order);
        r.memory = std::move(m.memory);
    }
    r.footprint = r.arena = r.memory.arena_bytes;
    if (spec.budget) r.arena = spec.budget_is_limit ? std::min(*spec.budget, r.footprint) : *spec.budget;
    log("memory", [&] { return r.memory.summary(); });
    if (needs_swapping(spec, r.footprint)) {
        r.swaps = spec.given_swaps ? *spec.given_swaps : plan_swapping(g, spec, r.order, r.arena, op_timer);
        if (spec.given_swaps && !spec.forward_outputs.empty())
            check_forward_swap_plan(g, r.swaps->forward, spec.forward_outputs);
        log("swap", [&] { return swap_plan_table(g, r.swaps->train); });
        const bool forward = !spec.forward_outputs.empty();
        SwapRun swapped = build_swap_run(g, r.swaps->train, forward ? &r.swaps->forward : nullptr);
        r.memory = std::move(swapped.memory);
        r.train = std::move(swapped.train);
        r.forward = std::move(swapped.forward);
    } else {
        r.train = build_program(g, r.order);
        if (!spec.forward_outputs.empty()) r.forward = build_program_for(g, r.order, spec.forward_outputs);
    }
    log("program", [&] { return r.train.to_string(g); });
    return r;
}

void read_swap_choice(const std::string &name, SwapWhen &when, SwapPolicy &policy) {
    if (name == "auto" || name == "none") {
        when = name == "auto" ? SwapWhen::Auto : SwapWhen::Never;
        policy = SwapPolicy::Advisor;
        return;
    }
    when = SwapWhen::Always;
    try {
        policy = swap_policy_from_name(name);
    } catch (const Error &e) {
        fail("--swap: ", e.what(), ", none or auto");
    }
}

std::string swap_choice_name(SwapWhen when, SwapPolicy policy) {
    if (when == SwapWhen::Auto) return "auto";
    if (when == SwapWhen::Never) return "none";
    return swap_policy_name(policy);
}

SwapOptions run_swap_search() {
    SwapOptions o;
    o.host_updates = HostUpdates::Off;
    o.recompute = true;
    return o;
}

}  // namespace tessera
