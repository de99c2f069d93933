#include "tessera/pipeline/run_plan.h"

#include "tessera/error.h"
#include "tessera/lang/kernels.h"
#include "tessera/partition/render.h"
#include "tessera/pipeline/stage_log.h"

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
    TESSERA_CHECK(spec.swap.when != SwapWhen::Always || spec.swap.search.policy != SwapPolicy::Ideal,
                  "--swap ideal is the swap planner's bound, not a plan that runs; valid: advisor, lru, vdnn, none, "
                  "auto");
}

// A partition plan given to the run must be for this training graph.
std::string layouts_str(const std::vector<Layout> &layouts) {
    std::string s;
    for (const Layout &l : layouts) s += (s.empty() ? "" : ", ") + l.str();
    return s;
}

// A plan from a file is user input: its operators and tensors must be the
// graph's, and every weight (or optimizer state) laid out as the update that
// replaces it in place, which the search always gives and lowering assumes.
void check_plan_fits(const Plan &p, const Graph &g) {
    TESSERA_CHECK(static_cast<int64_t>(p.ops.size()) == g.num_nodes(), "the given partition plan has ", p.ops.size(),
                  " operators but the training graph has ", g.num_nodes());
    for (NodeId n = 0; n < g.num_nodes(); n++)
        TESSERA_CHECK(p.ops[n].node == g.node(n).call.name, "the given partition plan's operator ", n, " is '",
                      p.ops[n].node, "' but the training graph's is '", g.node(n).call.name, "'");
    TESSERA_CHECK(static_cast<int64_t>(p.tensors.size()) == g.num_tensors(), "the given partition plan has ",
                  p.tensors.size(), " tensors but the training graph has ", g.num_tensors());
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        TESSERA_CHECK(p.tensors[t].tensor == g.tensor(t).name, "the given partition plan's tensor ", t, " is '",
                      p.tensors[t].tensor, "' but the training graph's is '", g.tensor(t).name, "'");
        const TensorId target = g.tensor(t).updates;
        if (target == kNoTensor) continue;
        TESSERA_CHECK(p.tensors[t].layout == p.tensors[target].layout, "the given partition plan lays out '",
                      g.tensor(target).name, "' as ", layouts_str(p.tensors[target].layout), " but its update '",
                      g.tensor(t).name, "' as ", layouts_str(p.tensors[t].layout),
                      "; a tensor updated in place keeps its layout (was the plan edited?)");
    }
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

Graph build_training_graph(const std::string &model, int64_t batch, const OptimizerConfig &optimizer,
                           Precision precision, GradReduce grad_reduce) {
    RunSpec spec;
    spec.model = model;
    spec.batch = batch;
    spec.optimizer = optimizer;
    spec.precision = precision;
    spec.grad_reduce = grad_reduce;
    spec.log_stages = false;
    return std::move(build_training_model(spec).graph);
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
    check_swap_policy(spec);
    RunPlan run;
    run.model = build_training_model(spec);
    if (spec.machine.devices() > 1) {
        run.partition = partition_stage(spec, run.model.graph);
        run.lowered = lower(run.model.graph, *run.partition, spec.rank);
        if (spec.log_stages) log_stage("lowered", graph_summary(run.lowered->graph));
    }
    RankSpec rank;
    rank.budget = spec.budget;
    rank.budget_is_limit = spec.budget_is_limit;
    rank.swap = spec.swap;
    rank.forward_outputs = {run.local(run.model.logits), run.local(run.model.loss)};
    rank.given_swaps = spec.given_swaps ? &*spec.given_swaps : nullptr;
    rank.log_stages = spec.log_stages;
    static_cast<RankPlan &>(run) = plan_rank(run.graph(), rank, op_timer);
    return run;
}

}  // namespace tessera
