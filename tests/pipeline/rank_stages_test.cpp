// pipeline/rank_stages.h: one rank's memory, times, swap and program stages,
// against the same stages called one by one here (default_order,
// plan_memory, build_program, build_program_for); the memory plan cache.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "expect_error.h"
#include "tessera/graph/builder.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"
#include "tessera/pipeline/rank_stages.h"
#include "tessera/pipeline/run_plan.h"
#include "tessera/program/memory_plan.h"
#include "tessera/program/program.h"

namespace tessera {
namespace {

constexpr const char *kModel = "mlp:layers=2,hidden=32,input=16,classes=4";

Model training_model(int64_t batch = 8) {
    Model m = build_model(kModel, batch);
    make_training_graph(m.graph, m.loss, OptimizerConfig{});
    return m;
}

// Every operator 1 ms and each update 2 ms on the host, the link at 1 GB/s;
// counts its calls.
OpTimer counting_timer(int &calls) {
    return [&calls](const Graph &g, const std::vector<NodeId> &, int64_t) {
        calls++;
        OpTimes t;
        t.node_time_s.assign(static_cast<size_t>(g.num_nodes()), 1e-3);
        t.host_node_time_s.assign(static_cast<size_t>(g.num_nodes()), 2e-3);
        t.h2d_bytes_per_s = t.d2h_bytes_per_s = 1e9;
        return t;
    };
}

TEST(PlanRank, WithoutABudgetIsTheDefaultOrderItsMemoryPlanAndItsProgram) {
    const Model m = training_model();
    const std::vector<NodeId> order = default_order(m.graph);
    const MemoryPlan memory = plan_memory(m.graph, order);
    int calls = 0;
    const RankPlan r = plan_rank(m.graph, RankSpec{}, counting_timer(calls));
    EXPECT_EQ(r.order, order);
    EXPECT_EQ(r.footprint, memory.arena_bytes);
    EXPECT_EQ(r.arena, memory.arena_bytes);
    EXPECT_EQ(r.memory.arena_bytes, memory.arena_bytes);
    EXPECT_FALSE(r.swaps.has_value());
    EXPECT_EQ(calls, 0) << "operators are timed only when the rank swaps";
    EXPECT_EQ(r.train.instructions.size(), build_program(m.graph, order).instructions.size());
    EXPECT_TRUE(r.forward.instructions.empty()) << "no forward outputs, no evaluation program";

    const RankMemory alone = plan_rank_memory(m.graph);
    EXPECT_EQ(alone.order, order);
    EXPECT_EQ(alone.memory.arena_bytes, memory.arena_bytes);
}

TEST(PlanRank, ForwardOutputsGiveTheEvaluationProgram) {
    const Model m = training_model();
    RankSpec spec;
    spec.forward_outputs = {m.logits, m.loss};
    const RankPlan r = plan_rank(m.graph, spec, nullptr);
    const Program expected = build_program_for(m.graph, r.order, spec.forward_outputs);
    EXPECT_FALSE(r.forward.instructions.empty());
    EXPECT_EQ(r.forward.instructions.size(), expected.instructions.size());
    EXPECT_LT(r.forward.instructions.size(), r.train.instructions.size());
}

TEST(PlanRank, ABudgetAboveTheFootprintIsTheArenaUnlessItIsALimit) {
    const Model m = training_model();
    const int64_t footprint = plan_rank_memory(m.graph).memory.arena_bytes;
    RankSpec spec;
    spec.budget = 2 * footprint;
    EXPECT_EQ(plan_rank(m.graph, spec, nullptr).arena, 2 * footprint);
    spec.budget_is_limit = true;
    const RankPlan r = plan_rank(m.graph, spec, nullptr);
    EXPECT_EQ(r.arena, footprint);
    EXPECT_FALSE(r.swaps.has_value());
}

TEST(PlanRank, UnderALimitItTimesTheOperatorsOnceAndSwapsWithinIt) {
    const Model m = training_model();
    const int64_t footprint = plan_rank_memory(m.graph).memory.arena_bytes;
    RankSpec spec;
    spec.budget = footprint * 3 / 4;
    spec.budget_is_limit = true;
    spec.swap.search.time_limit_s = 1;
    int calls = 0;
    const RankPlan r = plan_rank(m.graph, spec, counting_timer(calls));
    EXPECT_EQ(calls, 1);
    ASSERT_TRUE(r.swaps.has_value());
    EXPECT_EQ(r.arena, *spec.budget);
    EXPECT_EQ(r.footprint, footprint);
    EXPECT_EQ(r.swaps->times.node_time_s, std::vector<double>(static_cast<size_t>(m.graph.num_nodes()), 1e-3));
    EXPECT_GE(r.swaps->times_s, 0.0);
    EXPECT_LE(r.memory.arena_bytes, *spec.budget) << "the swap run's memory plan fits the budget";
    EXPECT_GT(r.swaps->train.swap_out_bytes + r.swaps->train.swap_in_bytes, 0);
    EXPECT_TRUE(r.swaps->forward.steps.empty()) << "no forward outputs, no forward swap plan";
}

TEST(PlanRank, ABudgetThatCannotWorkFailsBeforeAnythingIsTimed) {
    const Model m = training_model();
    RankSpec spec;
    spec.budget = 1024;
    int calls = 0;
    spec.swap.when = SwapWhen::Always;
    test::expect_error([&] { plan_rank(m.graph, spec, counting_timer(calls)); },
                       {"budget 1.00 KiB (1024 bytes) cannot work", "operator '"});
    spec.swap.search.policy = SwapPolicy::Ideal;  // the bound plans at any budget; a rank cannot
    test::expect_error([&] { plan_rank(m.graph, spec, counting_timer(calls)); },
                       "budget 1.00 KiB (1024 bytes) cannot work: the smallest budget that can is");
    EXPECT_EQ(calls, 0);
}

TEST(PlanRank, NoSwappingUnderTheFootprintNamesTheFlags) {
    const Model m = training_model();
    RankSpec spec;
    spec.budget = plan_rank_memory(m.graph).memory.arena_bytes / 2;
    spec.swap.when = SwapWhen::Never;
    test::expect_error([&] { plan_rank(m.graph, spec, nullptr); },
                       {"--device-mem is ", "without swapping", "--swap advisor"});
    spec.budget_is_limit = true;
    test::expect_error([&] { plan_rank(m.graph, spec, nullptr); }, "the automatic budget is ");
}

TEST(MemoryPlanCache, RanksOfOneShapeShareAPlanAndOthersGetTheirOwn) {
    const Model a = training_model(8), b = training_model(8), c = training_model(16);
    MemoryPlanCache cache;
    const std::vector<NodeId> order = default_order(a.graph);
    const auto pa = cache.plan(a.graph, order);
    const auto pb = cache.plan(b.graph, default_order(b.graph));
    const auto pc = cache.plan(c.graph, default_order(c.graph));
    EXPECT_EQ(pa.get(), pb.get());
    EXPECT_NE(pa.get(), pc.get());
    EXPECT_EQ(pa->arena_bytes, plan_memory(a.graph, order).arena_bytes);
    EXPECT_EQ(pc->arena_bytes, plan_memory(c.graph, default_order(c.graph)).arena_bytes);
    EXPECT_GT(pc->arena_bytes, pa->arena_bytes);

    RankSpec spec;
    EXPECT_EQ(plan_rank(c.graph, spec, nullptr, &cache).footprint, pc->arena_bytes);
}

// Two graphs alike but for one node's kind: a reshape, whose output may be a
// view of its input, or a ReLU. Each gets its own plan.
TEST(MemoryPlanCache, ANodesKindIsPartOfTheKey) {
    auto chain = [](bool reshape) {
        Graph g;
        Builder bl(g);
        Tensor a = bl.relu(bl.data("x", {8, 16}));
        Tensor y = reshape ? bl.reshape(a, {8, 16}) : bl.relu(a);
        g.set_output("z", bl.relu(y).id);
        return g;
    };
    const Graph viewed = chain(true), copied = chain(false);
    const MemoryPlan expect_viewed = plan_memory(viewed, default_order(viewed));
    const MemoryPlan expect_copied = plan_memory(copied, default_order(copied));
    ASSERT_NE(expect_viewed, expect_copied) << "the reshape's output is a view, the ReLU's is not";
    MemoryPlanCache cache;
    EXPECT_EQ(*cache.plan(viewed, default_order(viewed)), expect_viewed);
    EXPECT_EQ(*cache.plan(copied, default_order(copied)), expect_copied);
}

}  // namespace
}  // namespace tessera
