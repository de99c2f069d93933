#include "tessera/pipeline/run_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "tessera/error.h"
#include "tessera/lang/kernels.h"
#include "tessera/partition/render.h"
#include "tessera/pipeline/stage_log.h"
#include "tessera/size.h"
#include "tessera/swap/swap_program.h"

namespace tessera {

namespace {

void check_spec(const RunSpec &spec) {
    TESSERA_CHECK(spec.batch >= 1, "--batch must be at least 1, got ", spec.batch);
    const int devices = spec.machine.devices();
    TESSERA_CHECK(spec.rank >= 0 && spec.rank < devices, "rank ", spec.rank, " is not a rank of ", devices,
                  devices == 1 ? " device" : " devices", "; give 0 to ", devices - 1);
    TESSERA_CHECK(!spec.budget || *spec.budget > 0, "--device-mem must be positive");
}

// The policies a run may swap with (tessera-plan's ideal is the planner's alone).
void check_swap_policy(const RunSpec &spec) {
    const std::string &p = spec.swap.policy;
    TESSERA_CHECK(p == "auto" || p == "none" || p == "advisor" || p == "lru" || p == "vdnn", "--swap: unknown policy '",
                  p, "'; valid: advisor, lru, vdnn, none, auto");
}

// Whether the run swaps: a policy was asked for, or auto and the budget is
// below what the memory plan needs. With none, such a budget is an error.
bool needs_swapping(const RunSpec &spec, int64_t footprint) {
    const std::string &p = spec.swap.policy;
    const bool tight = spec.budget && *spec.budget < footprint;
    if (p == "none" && tight)
        fail(spec.budget_is_limit ? "the automatic budget is " : "--device-mem is ", format_bytes(*spec.budget), " but this run needs ", footprint, " bytes (",
             format_bytes(footprint), ") without swapping; use --device-mem ", size_flag_at_least(footprint),
             " or more, or --swap advisor to train within the budget");
    if (p == "none") return false;
    return p != "auto" || tight;
}

SwapOptions swap_options(const SwapSpec &s) {
    SwapOptions o = s.search;
    o.policy = swap_policy_from_name(s.policy == "auto" ? "advisor" : s.policy);
    return o;
}

// Fails, as plan_swaps does, when problem.budget cannot work (the operator
// times may still be zeros). With host updates off, where running optimizer
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
        SwapOptions quiet = swap_options(swap);
        quiet.progress = nullptr;
        plan_swaps(problem, quiet);
    } catch (const Error &e) {
        if (hint.empty()) throw;
        throw Error(e.what() + hint);
    }
}

// The training step's plan, then the evaluation pass's over the same homes
// (so that both run against the same weights) with a quarter of the search:
// a quarter of the generations and of the time limit.
SwapPlans plan_swapping(const RunSpec &spec, const RunPlan &run, int64_t budget, const OpTimer &op_timer) {
    const Graph &g = run.graph();
    // A budget that cannot work fails now, naming the operator, before the
    // operators are timed (profiling needs each one's working set in the arena).
    const HostUpdates host = spec.swap.search.host_updates;
    check_budget_works(make_swap_problem(g, run.order, untimed(g), budget, host), spec.swap);
    SwapPlans s;
    s.times = op_timer(g, run.order, budget);
    const SwapProblem problem = make_swap_problem(g, run.order, s.times, budget, host);
    SwapOptions o = swap_options(spec.swap);
    s.train = plan_swaps(problem, o);
    s.bound = swap_lower_bound(problem, host);

    SwapProblem fp = problem;
    fp.order = order_for(g, run.order, {run.local(run.model.logits), run.local(run.model.loss)});
    fp.homes_from = &s.train;
    o.progress = nullptr;
    o.generations = std::max(1, o.generations / 4);
    o.time_limit_s /= 4;
    s.forward = plan_swaps(fp, o);
    return s;
}

// A partition plan given to the run must be for this training graph.
void check_plan_fits(const Plan &p, const Graph &g) {
    TESSERA_CHECK(static_cast<int64_t>(p.ops.size()) == g.num_nodes(), "the given partition plan has ", p.ops.size(),
                  " operators but the training graph has ", g.num_nodes());
    for (NodeId n = 0; n < g.num_nodes(); n++)
        TESSERA_CHECK(p.ops[n].node == g.node(n).call.name, "the given partition plan's operator ", n, " is '",
                      p.ops[n].node, "' but the training graph's is '", g.node(n).call.name, "'");
}

}  // namespace

Model build_training_model(const RunSpec &spec) {
    check_spec(spec);
    // Every process reads the environment's tunables now, so that a typo fails
    // on every rank before any work.
    log_enabled("model");
    gemm_backend();
    Model m = build_model(spec.model, spec.batch);
    if (spec.log_stages) log_stage("model", m.description);
    if (storage_dtype(spec.precision) != DType::F32) {
        apply_precision(m, spec.precision, spec.grad_reduce);
        if (spec.log_stages)
            log_stage("precision", std::string(precision_name(spec.precision)) + ", weight gradients reduced in " +
                                       grad_reduce_name(spec.grad_reduce) + ": " + dtype_summary(m.graph));
    }
    OptimizerConfig optimizer = spec.optimizer;
    optimizer.loss_scaling = loss_scaled(spec.precision);
    make_training_graph(m.graph, m.loss, optimizer);
    if (spec.log_stages) log_stage("graph", graph_summary(m.graph));
    return m;
}

Plan plan_partition(const RunSpec &spec, const Graph &training_graph) {
    PartitionOptions po = spec.partition;
    po.model = model_spec_str(parse_model_spec(spec.model));
    if (spec.budget) po.bucket_bytes = bucket_bytes_within(po.bucket_bytes, *spec.budget);
    Plan p = partition(training_graph, spec.machine, po);
    if (spec.log_stages) log_stage("partition", plan_table(p));
    return p;
}

PartitionPlans plan_partitions(const RunSpec &spec, const std::vector<PartitionStrategy> &strategies,
                               const std::function<void(PartitionStrategy)> &before_each) {
    PartitionPlans p;
    p.model = build_training_model(spec);
    for (PartitionStrategy s : strategies) {
        if (before_each) before_each(s);
        RunSpec one = spec;
        one.partition.strategy = s;
        p.plans.push_back(plan_partition(one, p.model.graph));
    }
    return p;
}

namespace {

// The given plan (checked against the graph), or the search's, made to run.
Plan partition_stage(const RunSpec &spec, const Graph &training_graph) {
    if (spec.given_partition) {
        check_plan_fits(*spec.given_partition, training_graph);
        return *spec.given_partition;
    }
    RunSpec executable = spec;
    executable.partition.executable = true;
    return plan_partition(executable, training_graph);
}

}  // namespace

RunPlan plan_run(const RunSpec &spec, const OpTimer &op_timer) {
    auto log = [&](const char *stage, const std::string &text) {
        if (spec.log_stages) log_stage(stage, text);
    };
    check_swap_policy(spec);
    RunPlan run;
    run.model = build_training_model(spec);
    if (spec.machine.devices() > 1) {
        run.partition = partition_stage(spec, run.model.graph);
        run.lowered = lower(run.model.graph, *run.partition, spec.rank);
        log("lowered", graph_summary(run.lowered->graph));
    }
    run.order = default_order(run.graph());
    run.memory = plan_memory(run.graph(), run.order);
    run.footprint = run.arena = run.memory.arena_bytes;
    if (spec.budget) run.arena = spec.budget_is_limit ? std::min(*spec.budget, run.footprint) : *spec.budget;
    log("memory", run.memory.summary());
    if (needs_swapping(spec, run.footprint)) {
        run.swaps = spec.given_swaps ? *spec.given_swaps : plan_swapping(spec, run, run.arena, op_timer);
        log("swap", swap_plan_table(run.graph(), run.swaps->train));
        SwapRun swapped = build_swap_run(run.graph(), run.swaps->train, &run.swaps->forward);
        run.memory = std::move(swapped.memory);
        run.train = std::move(swapped.train);
        run.forward = std::move(swapped.forward);
    } else {
        run.train = build_program(run.graph(), run.order);
        run.forward = build_program_for(run.graph(), run.order, {run.local(run.model.logits), run.local(run.model.loss)});
    }
    log("program", run.train.to_string(run.graph()));
    return run;
}

SwapOptions run_swap_search() {
    SwapOptions o;
    o.host_updates = HostUpdates::Off;
    o.recompute = true;
    return o;
}

}  // namespace tessera
