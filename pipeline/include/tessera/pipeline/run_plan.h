// The pipeline from a model to what one device runs, as one straight list of
// stages. Both programs call it: tessera-plan with the roofline model's
// operator times, tessera-train with times profiled on its device.
//
//   RunSpec spec = ...;                       // model, batch, optimizer, machine, rank, budget
//   RunPlan run = plan_run(spec, op_timer);   // every stage logged with TESSERA_LOG
//   Executor ex(run.graph(), device, run.memory);
//   ex.run(run.train);
//
// The stages, in order (each one's result is logged under its name):
//   model      build_model(spec.model, spec.batch)
//   precision  the precision policy's casts (bf16 and fp16 only)
//   graph      make_training_graph: backward pass and optimizer updates
//   partition  Tofu's search over spec.machine (more than one device only)
//   lowered    this rank's graph: local shapes and communication nodes
//   (then the rank's own stages, rank_stages.h:)
//   memory     operator order and the static memory plan
//   times      the operator times (op_timer), when the run swaps
//   swap       SwapAdvisor's plans for the training step and the evaluation
//              pass, when the budget is below what the memory plan needs
//   program    the programs the executor runs
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"
#include "tessera/partition/lower.h"
#include "tessera/partition/machine.h"
#include "tessera/partition/partition.h"
#include "tessera/pipeline/rank_stages.h"

namespace tessera {

struct RunSpec {
    std::string model = "mlp";  // a zoo spec, "NAME[:key=value,...]"
    int64_t batch = 128;
    OptimizerConfig optimizer;
    Precision precision = Precision::FP32;  // graph/precision.h
    GradReduce grad_reduce = GradReduce::F32;  // a 16-bit precision's weight gradients (graph/precision.h)
    Machine machine = flat_machine(1);
    int rank = 0;                    // which device of `machine` this run is for
    PartitionOptions partition;      // strategy and flags; plan_run makes it executable
    std::optional<int64_t> budget;   // device bytes; none: what the memory plan needs
    // The budget is a limit (exec/device_budget.h: --device-mem auto, a CUDA
    // device's default): a run that fits gets an arena of what its memory plan
    // needs, not the whole budget.
    bool budget_is_limit = false;
    SwapSpec swap;
    bool log_stages = true;          // TESSERA_LOG's sections (rank 0 of a job only)
    // Plans made earlier (plan_file.h): run these instead of searching.
    std::optional<Plan> given_partition;
    std::optional<SwapPlans> given_swaps;    // for `rank`
};

// The rank's plan (rank_stages.h: order, memory plan, swaps, programs), with
// the model and partition it came from.
struct RunPlan : RankPlan {
    Model model;                       // its graph is the training graph
    std::optional<Plan> partition;     // more than one device only
    std::optional<DeviceGraph> lowered;

    bool sharded() const { return lowered.has_value(); }
    // What this device runs: the lowered graph, or the training graph.
    const Graph &graph() const { return lowered ? lowered->graph : model.graph; }
    // The tensor of graph() that holds training-graph tensor `t`.
    TensorId local(TensorId t) const { return lowered ? lowered->local[t] : t; }
};

// Every stage above, in order. Throws tessera::Error for a bad spec (unknown
// model or policy, a budget that cannot work).
RunPlan plan_run(const RunSpec &spec, const OpTimer &op_timer);

// The first stages on their own, for callers that stop part way: tessera-plan
// shows partitions with the spec's options as given (plan_run makes them
// executable), and may compare several strategies for one training graph.
Model build_training_model(const RunSpec &spec);
// Its graph alone, from a model spec (no stage logged): what the benchmarks plan.
Graph build_training_graph(const std::string &model, int64_t batch, const OptimizerConfig &optimizer = {},
                           Precision precision = Precision::FP32, GradReduce grad_reduce = GradReduce::F32);
Plan plan_partition(const RunSpec &spec, const Graph &training_graph);

// The model and graph stages, then the partition stage once for each of
// `strategies` (spec.partition's other options) over that one training graph:
// tessera-plan's plans and --compare. `before_each` hears each strategy as
// its search starts (may be empty).
struct PartitionPlans {
    Model model;             // its graph is the training graph
    std::vector<Plan> plans;  // one per strategy, in order
};
PartitionPlans plan_partitions(const RunSpec &spec, const std::vector<PartitionStrategy> &strategies,
                               const std::function<void(PartitionStrategy)> &before_each = {});

}  // namespace tessera
