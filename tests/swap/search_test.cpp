// The genetic algorithm: progress, the time limit, reordering rules, shared
// homes for a second program, and its speed on a graph of about 1000
// operators.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "swap_problems.h"
#include "tessera/error.h"
#include "tessera/graph/builder.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"
#include "tessera/program/memory_plan.h"
#include "tessera/swap/swap_plan.h"

namespace tessera {
namespace {

struct Case {
    Graph g;
    int64_t footprint = 0;
    std::vector<double> times;
};

Case training_case(const std::string &spec, int64_t batch) {
    Case c;
    Model m = build_model(spec, batch);
    c.g = std::move(m.graph);
    make_training_graph(c.g, m.loss, OptimizerConfig{});
    c.footprint = plan_memory(c.g, default_order(c.g)).arena_bytes;
    for (NodeId n = 0; n < c.g.num_nodes(); n++) {
        int64_t bytes = 0;
        for (TensorId t : c.g.node(n).inputs) bytes += c.g.tensor(t).type.bytes();
        for (TensorId t : c.g.node(n).outputs) bytes += c.g.tensor(t).type.bytes();
        c.times.push_back(5e-6 + static_cast<double>(bytes) / 20e9);
    }
    return c;
}

SwapProblem problem_for(const Case &c, int64_t budget) { return test::timed_problem(c.g, c.times, budget, 8e9); }

// A quarter of the footprint, or the least budget that works if more.
SwapProblem quarter_budget(const Case &c) {
    SwapProblem p = problem_for(c, c.footprint);
    p.budget = std::max(c.footprint / 4, min_swap_budget(p));
    return p;
}

// Whether `order` runs every node after the producers of its inputs, and
// in-place updates after every other reader of the storage they overwrite.
bool valid_order(const Graph &g, const std::vector<NodeId> &order) {
    std::vector<int> pos(g.num_nodes(), -1);
    for (size_t i = 0; i < order.size(); i++) pos[order[i]] = static_cast<int>(i);
    for (NodeId n : order)
        for (TensorId t : g.node(n).inputs)
            if (g.tensor(t).producer != kNoNode && pos[g.tensor(t).producer] > pos[n]) return false;
    for (NodeId w : order)
        for (TensorId out : g.node(w).outputs) {
            if (g.tensor(out).updates == kNoTensor) continue;
            TensorId r = storage_root(g, out);
            for (NodeId n : order)
                for (TensorId t : g.node(n).inputs)
                    if (n != w && t == r && pos[n] > pos[w]) return false;  // reads the old value after the update
        }
    return true;
}

TEST(SwapSearch, ProgressAndImprovement) {
    Case c = training_case("transformer:layers=2,d_model=32,heads=2,seq=16,vocab=50", 16);
    SwapProblem pr = quarter_budget(c);
    SwapOptions o;
    o.population = 16;
    o.generations = 30;
    std::vector<SwapProgress> seen;
    o.progress = [&](const SwapProgress &p) { seen.push_back(p); };
    SwapPlan plan = plan_swaps(pr, o);
    check_swap_plan(c.g, plan);
    ASSERT_EQ(seen.size(), 30u);
    for (size_t i = 0; i < seen.size(); i++) {
        EXPECT_EQ(seen[i].generation, static_cast<int>(i) + 1);
        EXPECT_EQ(seen[i].generations, 30);
        if (i > 0) {
            EXPECT_LE(seen[i].best_time_s, seen[i - 1].best_time_s);  // elitism
            EXPECT_GE(seen[i].candidates, seen[i - 1].candidates);
        }
    }
    EXPECT_DOUBLE_EQ(plan.time_s, seen.back().best_time_s);
    EXPECT_EQ(plan.generations, 30);
    EXPECT_EQ(plan.candidates, seen.back().candidates);
    EXPECT_TRUE(valid_order(c.g, plan.order));
    // The search is at least as good as its seeds alone.
    SwapOptions seeds_only = o;
    seeds_only.generations = 0;
    seeds_only.progress = nullptr;
    SwapPlan seeds = plan_swaps(pr, seeds_only);
    EXPECT_EQ(seeds.generations, 0);
    EXPECT_LE(plan.time_s, seeds.time_s);
    std::printf("seeds %.3f ms, after 30 generations %.3f ms, ideal %.3f ms\n", seeds.time_s * 1e3, plan.time_s * 1e3,
                plan.ideal_time_s * 1e3);
}

TEST(SwapSearch, TimeLimitStopsTheSearch) {
    Case c = training_case("mlp:layers=8,hidden=128", 256);
    SwapProblem pr = quarter_budget(c);
    SwapOptions o;
    o.generations = 1000000;
    o.time_limit_s = 0.2;
    auto t0 = std::chrono::steady_clock::now();
    SwapPlan plan = plan_swaps(pr, o);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 1.5);
    EXPECT_LT(plan.generations, 1000000);
    check_swap_plan(c.g, plan);
    o.time_limit_s = 0;
    SwapPlan first = plan_swaps(pr, o);
    EXPECT_EQ(first.generations, 0);
    check_swap_plan(c.g, first);
}

// Patience ends the search where the best time has not gained 0.1% for that
// many generations: the last generations (per the progress it reported) are
// flat, the one before them was not, and the plan is the one a search of
// exactly that many generations finds (it counts generations, not seconds).
TEST(SwapSearch, PatienceStopsWhereTheSearchStopsImproving) {
    Case c = training_case("transformer:layers=2,d_model=32,heads=2,seq=16,vocab=50", 16);
    SwapProblem pr = quarter_budget(c);
    SwapOptions o;
    o.population = 16;
    o.generations = 100000;
    o.time_limit_s = 60;
    o.patience = 15;
    std::vector<double> best;  // after each generation
    std::vector<int> last;     // the generations reported as the last
    o.progress = [&](const SwapProgress &p) {
        best.push_back(p.best_time_s);
        if (p.last) last.push_back(p.generation);
    };
    SwapPlan plan = plan_swaps(pr, o);
    check_swap_plan(c.g, plan);
    EXPECT_EQ(plan.stopped_by, "patience");
    ASSERT_EQ(static_cast<int>(best.size()), plan.generations);
    EXPECT_EQ(last, std::vector<int>{plan.generations});
    ASSERT_GT(plan.generations, o.patience);
    // The last gain of 0.1% came at generation G - patience (counting the
    // seeds as generation 0): nothing after it gained that much over it...
    const int mark = plan.generations - o.patience;
    const double at_mark = best[static_cast<size_t>(mark - 1)];
    for (int g = mark; g < plan.generations; g++)
        EXPECT_GE(best[static_cast<size_t>(g)], at_mark * (1 - kSwapImprovement)) << "generation " << g + 1;
    // ...and it was a gain of 0.1% over every generation before it.
    for (int g = 0; g + 1 < mark; g++) EXPECT_GT(best[static_cast<size_t>(g)], at_mark) << "generation " << g + 1;
    SwapOptions fixed = o;
    fixed.patience = 0;
    fixed.generations = plan.generations;
    fixed.progress = nullptr;
    SwapPlan same = plan_swaps(pr, fixed);
    EXPECT_EQ(same.stopped_by, "generations");
    same.stopped_by = plan.stopped_by;
    same.search_s = plan.search_s;
    EXPECT_EQ(same, plan);
}

TEST(SwapSearch, FixedOrderWithoutReorder) {
    Case c = training_case("lstm:layers=1,hidden=32,seq=6,vocab=40", 8);
    SwapProblem pr = problem_for(c, c.footprint / 3);
    SwapOptions o;
    o.generations = 20;
    o.reorder = false;
    SwapPlan plan = plan_swaps(pr, o);
    EXPECT_EQ(plan.order, pr.order);
    check_swap_plan(c.g, plan);
    o.reorder = true;
    SwapPlan moved = plan_swaps(pr, o);
    EXPECT_TRUE(valid_order(c.g, moved.order));
    EXPECT_LE(moved.time_s, plan.time_s * 1.05);
    check_swap_plan(c.g, moved);
}

// Communication nodes keep their relative order under reordering: every rank
// must issue its collectives in the same sequence.
TEST(SwapSearch, CommunicationNodesKeepTheirOrder) {
    Graph g;
    Builder b(g);
    auto named = [](const char *prefix, int i) {
        std::string s = prefix;
        s += std::to_string(i);
        return s;
    };
    std::vector<Tensor> xs;
    for (int i = 0; i < 6; i++) xs.push_back(b.data(named("x", i), {64, 64}));
    std::vector<TensorId> comm_outs;
    for (int i = 0; i < 6; i++) {
        auto scope = b.scope(named("c", i));
        Tensor y = b.relu(xs[5 - i]);
        comm_outs.push_back(g.add_comm_node(named("ar", i), Attrs{{"comm", std::string("all_reduce")}}, {y.id},
                                            y.type(), TensorRole::Activation));
    }
    Tensor sum = Tensor{comm_outs[0], &g};
    for (int i = 1; i < 6; i++) sum = b.add(sum, Tensor{comm_outs[i], &g});
    g.set_output("sum", sum.id);
    SwapProblem pr;
    pr.graph = &g;
    pr.order = default_order(g);
    pr.node_time_s.assign(g.num_nodes(), 1e-4);
    for (NodeId n = 0; n < g.num_nodes(); n++)
        if (g.node(n).comm) pr.node_time_s[n] = 5e-4;
    pr.budget = min_swap_budget(pr) + 4 * 16384;
    pr.h2d_bytes_per_s = pr.d2h_bytes_per_s = 1e8;
    SwapOptions o;
    o.generations = 40;
    o.seed = 3;
    SwapPlan plan = plan_swaps(pr, o);
    check_swap_plan(g, plan);
    EXPECT_TRUE(valid_order(g, plan.order));
    std::vector<std::string> comms;
    for (NodeId n : plan.order)
        if (g.node(n).comm) comms.push_back(g.node(n).call.name);
    EXPECT_EQ(comms, (std::vector<std::string>{"ar0", "ar1", "ar2", "ar3", "ar4", "ar5"}));
}

// The evaluation program shares the training plan's homes.
TEST(SwapSearch, HomesFromAnotherPlan) {
    Case c = training_case("mlp:layers=6,hidden=128", 128);
    SwapProblem pr = problem_for(c, c.footprint);
    pr.budget = std::max(c.footprint / 3, min_swap_budget(pr));
    SwapOptions o;
    o.generations = 20;
    SwapPlan train = plan_swaps(pr, o);
    check_swap_plan(c.g, train);
    SwapProblem fwd = pr;
    fwd.order.clear();
    for (NodeId n : default_order(c.g))
        if (!c.g.node(n).backward && !c.g.node(n).optimizer) fwd.order.push_back(n);
    fwd.homes_from = &train;
    for (SwapPolicy p : {SwapPolicy::Advisor, SwapPolicy::Lru, SwapPolicy::Vdnn}) {
        o.policy = p;
        SwapPlan eval = plan_swaps(fwd, o);
        check_swap_plan(c.g, eval, "eval");
        EXPECT_EQ(eval.pinned, train.pinned);
        EXPECT_EQ(eval.pinned_bytes, train.pinned_bytes);
        for (const SwapPool &pool : eval.pools) EXPECT_GE(pool.offset, train.pinned_bytes);
    }
    // Homes from a plan of another graph.
    Case other = training_case("mlp:layers=2,hidden=16", 4);
    SwapProblem wrong = problem_for(other, other.footprint);
    wrong.homes_from = &train;
    try {
        plan_swaps(wrong, o);
        FAIL();
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("it must be a plan for the same graph"), std::string::npos) << e.what();
    }
}

// The bar is a 1000-operator graph planned well in under 30 s on one
// core; a candidate (decode, schedule, simulate) must stay in milliseconds.
TEST(SwapSearch, SpeedOnAThousandOperators) {
    Case c = training_case("transformer:layers=13,d_model=64,heads=4,seq=32,vocab=100", 8);
    ASSERT_GE(c.g.num_nodes(), 1000);
    SwapProblem pr = problem_for(c, c.footprint / 6);
    SwapOptions o;
    o.population = 32;
    o.generations = 10;
    SwapPlan plan = plan_swaps(pr, o);
    check_swap_plan(c.g, plan);
    double per = plan.search_s / static_cast<double>(plan.candidates);
    std::printf("%d operators: %lld candidates in %.2f s (%.2f ms each); ideal/time %.3f\n", c.g.num_nodes(),
                static_cast<long long>(plan.candidates), plan.search_s, per * 1e3, plan.ideal_time_s / plan.time_s);
    EXPECT_LT(per, 0.05);
}

}  // namespace
}  // namespace tessera
