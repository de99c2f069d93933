// pipeline/: the stages from a spec to what one device runs, against the same
// stages called one by one here (build_model, make_training_graph,
// default_order, plan_memory); the one swap problem; the partition flags.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "expect_error.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"
#include "tessera/pipeline/op_times.h"
#include "tessera/pipeline/partition_flags.h"
#include "tessera/pipeline/run_plan.h"
#include "tessera/program/memory_plan.h"

namespace tessera {
namespace {

constexpr const char *kModel = "mlp:layers=2,hidden=32,input=16,classes=4";

RunSpec small_spec() {
    RunSpec spec;
    spec.model = kModel;
    spec.batch = 8;
    spec.log_stages = false;
    return spec;
}

// Every operator 1 ms, the host link at 1 GB/s; counts its calls.
OpTimer counting_timer(int &calls) {
    return [&calls](const Graph &g, const std::vector<NodeId> &, int64_t) {
        calls++;
        OpTimes t;
        t.node_time_s.assign(static_cast<size_t>(g.num_nodes()), 1e-3);
        t.h2d_bytes_per_s = t.d2h_bytes_per_s = 1e9;
        return t;
    };
}

TEST(PlanRun, OneDeviceRunsTheStagesCalledOneByOne) {
    Model m = build_model(kModel, 8);
    make_training_graph(m.graph, m.loss, OptimizerConfig{});
    const std::vector<NodeId> order = default_order(m.graph);
    const int64_t footprint = plan_memory(m.graph, order).arena_bytes;

    int calls = 0;
    const RunPlan run = plan_run(small_spec(), counting_timer(calls));
    EXPECT_EQ(run.graph().num_nodes(), m.graph.num_nodes());
    EXPECT_EQ(run.order, order);
    EXPECT_EQ(run.footprint, footprint);
    EXPECT_EQ(run.arena, footprint);
    EXPECT_FALSE(run.sharded());
    EXPECT_FALSE(run.swaps.has_value());
    EXPECT_EQ(calls, 0) << "operators are timed only when the run swaps";
    EXPECT_GE(run.train.instructions.size(), static_cast<size_t>(m.graph.num_nodes()));
}

TEST(PlanRun, UnderABudgetItTimesTheOperatorsOnceAndSwaps) {
    RunSpec spec = small_spec();
    const int64_t footprint = plan_run(spec, nullptr).footprint;
    spec.budget = footprint * 3 / 4;
    spec.swap.when = SwapWhen::Always;
    spec.swap.search.policy = SwapPolicy::Lru;
    int calls = 0;
    const RunPlan run = plan_run(spec, counting_timer(calls));
    EXPECT_EQ(calls, 1);
    ASSERT_TRUE(run.swaps.has_value());
    EXPECT_EQ(run.arena, *spec.budget);
    EXPECT_EQ(run.swaps->times.node_time_s.size(), static_cast<size_t>(run.graph().num_nodes()));
}

TEST(MakeSwapProblem, TakesTheHostTimesOnlyWhenUpdatesMayRunThere) {
    Model m = build_model(kModel, 8);
    make_training_graph(m.graph, m.loss, OptimizerConfig{});
    const std::vector<NodeId> order = default_order(m.graph);
    OpTimes t;
    t.node_time_s.assign(static_cast<size_t>(m.graph.num_nodes()), 2e-3);
    t.host_node_time_s.assign(static_cast<size_t>(m.graph.num_nodes()), 5e-3);
    t.h2d_bytes_per_s = 3e9;
    t.d2h_bytes_per_s = 4e9;

    const SwapProblem off = make_swap_problem(m.graph, order, t, 1000, HostUpdates::Off);
    EXPECT_EQ(off.graph, &m.graph);
    EXPECT_EQ(off.order, order);
    EXPECT_EQ(off.budget, 1000);
    EXPECT_EQ(off.node_time_s, t.node_time_s);
    EXPECT_TRUE(off.host_node_time_s.empty());
    EXPECT_EQ(off.h2d_bytes_per_s, 3e9);
    EXPECT_EQ(off.d2h_bytes_per_s, 4e9);
    EXPECT_EQ(off.homes_from, nullptr);

    const SwapProblem on = make_swap_problem(m.graph, order, t, 1000, HostUpdates::Auto);
    EXPECT_EQ(on.host_node_time_s, t.host_node_time_s);

    t.host_node_time_s.clear();
    test::expect_error([&] { make_swap_problem(m.graph, order, t, 1000, HostUpdates::All); },
                       "host-side updates need the optimizer's host times");
}

TEST(MakeSwapProblem, UntimedIsFreeOperatorsOverAUnitLink) {
    Model m = build_model(kModel, 8);
    const OpTimes t = untimed(m.graph);
    EXPECT_EQ(t.node_time_s, std::vector<double>(static_cast<size_t>(m.graph.num_nodes()), 0.0));
    EXPECT_EQ(t.host_node_time_s, t.node_time_s);
    EXPECT_EQ(t.h2d_bytes_per_s, 1);
    EXPECT_EQ(t.d2h_bytes_per_s, 1);
}

TEST(PartitionFlags, ApplySetsWhatTheFlagsSay) {
    PartitionFlags f;
    f.force = "bn1=n,fc*=replicate";
    f.weights = "fc1.w=split";
    f.no_staged_reductions = true;
    f.no_replicate_weights = true;
    f.bucket_mb = 1.5;
    f.sync_batch_norm = true;
    PartitionOptions o;
    f.apply(o);
    EXPECT_EQ(o.force, (std::vector<std::pair<std::string, std::string>>{{"bn1", "n"}, {"fc*", "replicate"}}));
    EXPECT_EQ(o.weights, parse_weights("fc1.w=split"));
    EXPECT_FALSE(o.staged_reductions);
    EXPECT_FALSE(o.replicate_weights);
    EXPECT_EQ(o.bucket_bytes, 3 << 19);
    EXPECT_TRUE(o.sync_batch_norm);

    PartitionOptions defaults;
    PartitionFlags{}.apply(defaults);
    EXPECT_EQ(defaults.bucket_bytes, PartitionOptions::kDefaultBucketBytes);
    EXPECT_TRUE(defaults.staged_reductions);
    EXPECT_TRUE(defaults.force.empty());

    f.force = "bn1";
    EXPECT_NE(test::error_of([&] { f.apply(o); }).find("bn1"), std::string::npos);
}

}  // namespace
}  // namespace tessera
