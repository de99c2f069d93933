// The static memory plan, checked against lifetimes and lower bounds computed
// here by brute force, on random graphs in random orders.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "expect_error.h"
#include "tessera/error.h"
#include "tessera/graph/builder.h"
#include "tessera/graph/optimizer.h"
#include "tessera/program/memory_plan.h"
#include "test_graphs.h"

namespace tessera {
namespace {

using test::mlp_training_graph;
using test::random_topological_order;

using test::error_of;

using test::f32;

// ---- an independent model of the rules ----

struct Life {
    bool stored = false;
    int start = 0, end = 0;  // inclusive positions; persistent: [-1, n]
};

TensorId root_of(const Graph &g, TensorId t) {
    while (g.tensor(t).updates != kNoTensor) t = g.tensor(t).updates;
    return t;
}

// Lifetimes of storage roots, straight from the rules in memory_plan.h.
std::vector<Life> lifetimes(const Graph &g, const std::vector<NodeId> &order) {
    int n = static_cast<int>(order.size());
    std::vector<Life> life(g.num_tensors());
    std::vector<bool> keep(g.num_tensors(), false);
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        TensorRole r = g.tensor(t).role;
        if (r == TensorRole::Data || r == TensorRole::Param || r == TensorRole::OptState ||
            r == TensorRole::Constant)
            keep[root_of(g, t)] = true;
    }
    for (const auto &[k, t] : g.outputs()) keep[root_of(g, t)] = true;
    for (int i = 0; i < n; i++) {
        const Node &node = g.node(order[i]);
        for (TensorId t : node.outputs) {
            Life &l = life[root_of(g, t)];
            if (!l.stored) l = {true, i, i};
            l.end = std::max(l.end, i);
        }
        for (TensorId t : node.inputs) {
            Life &l = life[root_of(g, t)];
            if (l.stored) l.end = std::max(l.end, i);
        }
    }
    for (TensorId t = 0; t < g.num_tensors(); t++)
        if (keep[t]) life[t] = {true, -1, n};
    return life;
}

int64_t brute_force_lower_bound(const Graph &g, const std::vector<NodeId> &order) {
    std::vector<Life> life = lifetimes(g, order);
    int n = static_cast<int>(order.size());
    int64_t best = 0;
    for (int i = std::min(0, n - 1); i < std::max(n, 1); i++) {
        int64_t live = 0;
        for (TensorId t = 0; t < g.num_tensors(); t++)
            if (root_of(g, t) == t && life[t].stored && life[t].start <= i && i <= life[t].end)
                live += g.tensor(t).type.bytes();
        best = std::max(best, live);
    }
    return best;
}

// Every rule the plan must satisfy, checked pairwise.
void expect_valid(const Graph &g, const std::vector<NodeId> &order, const MemoryPlan &plan) {
    ASSERT_EQ(static_cast<int>(plan.offset.size()), g.num_tensors());
    std::vector<Life> life = lifetimes(g, order);
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const Life &l = life[root_of(g, t)];
        int64_t off = plan.offset[t];
        ASSERT_EQ(off >= 0, l.stored) << g.tensor(t).name;
        if (off < 0) continue;
        EXPECT_EQ(off % 64, 0) << g.tensor(t).name;
        EXPECT_LE(off + g.tensor(t).type.bytes(), plan.arena_bytes) << g.tensor(t).name;
        EXPECT_EQ(off, plan.offset[root_of(g, t)]) << g.tensor(t).name << " must share its target's storage";
    }
    for (TensorId a = 0; a < g.num_tensors(); a++) {
        if (root_of(g, a) != a || plan.offset[a] < 0) continue;
        for (TensorId b = a + 1; b < g.num_tensors(); b++) {
            if (root_of(g, b) != b || plan.offset[b] < 0) continue;
            bool together = life[a].start <= life[b].end && life[b].start <= life[a].end;
            if (!together) continue;
            int64_t a0 = plan.offset[a], a1 = a0 + g.tensor(a).type.bytes();
            int64_t b0 = plan.offset[b], b1 = b0 + g.tensor(b).type.bytes();
            EXPECT_TRUE(a1 <= b0 || b1 <= a0) << "'" << g.tensor(a).name << "' [" << a0 << ", " << a1 << ") and '"
                                              << g.tensor(b).name << "' [" << b0 << ", " << b1
                                              << ") are live together but overlap";
        }
    }
    EXPECT_EQ(plan.lower_bound, brute_force_lower_bound(g, order));
    EXPECT_GE(plan.arena_bytes, plan.lower_bound);
    EXPECT_EQ(plan.order, order);
}

// ---- random graphs ----

struct RandomGraph {
    Graph g;
    std::vector<TensorId> values;  // tensors nodes may read
};

RandomGraph random_graph(std::mt19937 &rng, int nodes) {
    RandomGraph r;
    Graph &g = r.g;
    auto pick = [&](int n) { return static_cast<int>(std::uniform_int_distribution<int>(0, n - 1)(rng)); };
    auto dim = [&] { return int64_t{1} + pick(48); };
    std::vector<TensorId> params;
    for (int i = 0; i < 3; i++) r.values.push_back(g.add_data("x" + std::to_string(i), f32({dim(), dim()})));
    for (int i = 0; i < nodes; i++) {
        std::string name = "n" + std::to_string(i);
        TensorId a = r.values[pick(static_cast<int>(r.values.size()))];
        const Shape s = g.tensor(a).type.shape;  // a copy: adding tensors moves them
        switch (pick(5)) {
        case 0: {  // a binary op with another value of the same shape, or itself
            std::vector<TensorId> same;
            for (TensorId t : r.values)
                if (g.tensor(t).type.shape == s) same.push_back(t);
            TensorId b = same[pick(static_cast<int>(same.size()))];
            r.values.push_back(g.add_node({pick(2) ? OpKind::Add : OpKind::Mul, name, {}}, {a, b})[0]);
            break;
        }
        case 1: r.values.push_back(g.add_node({OpKind::Relu, name, {}}, {a})[0]); break;
        case 2: {  // matmul with a fresh weight: changes the size
            TensorId w = g.add_param(name + ".w", f32({s[1], dim()}), Init::zeros());
            params.push_back(w);
            r.values.push_back(g.add_node({OpKind::Matmul, name, {}}, {a, w})[0]);
            break;
        }
        case 3: {  // an in-place optimizer update of a weight of this shape
            TensorId w = kNoTensor;
            for (TensorId p : params)
                if (g.tensor(p).type.shape == s && g.tensor(p).updates == kNoTensor) w = p;
            if (w == kNoTensor) w = g.add_param(name + ".w", f32(s), Init::zeros());
            TensorId v = g.add_opt_state(name + ".v", f32(s));
            auto outs = g.add_node({OpKind::SgdMomentum, name, {{"lr", 0.1}}}, {w, a, v});
            g.set_updates(outs[0], w);
            g.set_updates(outs[1], v);
            break;
        }
        case 4: r.values.push_back(g.add_node({OpKind::Scale, name, {{"alpha", 2.0}}}, {a})[0]); break;
        }
        if (pick(10) == 0 && g.tensor(r.values.back()).producer != kNoNode)
            g.set_output("out" + std::to_string(i), r.values.back());
    }
    return r;
}

TEST(MemoryPlan, RandomGraphsInRandomOrdersNeverShareBytesWhileLiveTogether) {
    std::mt19937 rng(2024);
    double worst = 0;
    for (int trial = 0; trial < 60; trial++) {
        RandomGraph r = random_graph(rng, 5 + trial);
        std::vector<NodeId> order = trial % 3 == 0 ? default_order(r.g) : random_topological_order(r.g, rng);
        ASSERT_EQ(static_cast<int>(order.size()), r.g.num_nodes());
        if (trial % 5 == 4) order.resize(order.size() / 2);  // a prefix is an order too
        // Both placements: the greedy passes, and the allocator run in time
        // that large graphs get.
        for (size_t greedy_blocks : {size_t{8192}, size_t{0}}) {
            MemoryPlanOptions options;
            options.greedy_blocks = greedy_blocks;
            MemoryPlan plan = plan_memory(r.g, order, options);
            SCOPED_TRACE("trial " + std::to_string(trial) + ", greedy up to " + std::to_string(greedy_blocks) +
                         " blocks: " + plan.summary());
            expect_valid(r.g, order, plan);
            EXPECT_NO_THROW(check_memory_plan(r.g, plan));
            EXPECT_EQ(plan, plan_memory(r.g, order, options)) << "planning is deterministic";
            worst = std::max(worst, double(plan.arena_bytes) / double(plan.lower_bound));
        }
    }
    // Random graphs are full of tiny tensors that alignment inflates; this is
    // a sanity bound, the real bar is the MLP test below.
    EXPECT_LT(worst, 2.0);
}

TEST(MemoryPlan, InPlaceUpdatesShareTheirTargetsStorage) {
    Graph g;
    TensorId x = g.add_data("x", f32({8, 16}));
    TensorId w = g.add_param("w", f32({16, 4}), Init::zeros());
    TensorId v = g.add_opt_state("w.momentum", f32({16, 4}));
    TensorId y = g.add_node({OpKind::Matmul, "mm", {}}, {x, w})[0];
    TensorId gw = g.add_node({OpKind::Matmul, "dw", {{"transpose_a", int64_t{1}}}}, {x, y})[0];
    // dw is [16, 4]: x^T [16, 8] times y [8, 4].
    auto outs = g.add_node({OpKind::SgdMomentum, "w.update", {{"lr", 0.1}}}, {w, gw, v});
    g.set_updates(outs[0], w);
    g.set_updates(outs[1], v);
    MemoryPlan plan = plan_memory(g, default_order(g));
    expect_valid(g, default_order(g), plan);
    EXPECT_EQ(plan.offset[outs[0]], plan.offset[w]);
    EXPECT_EQ(plan.offset[outs[1]], plan.offset[v]);
    EXPECT_NE(plan.offset[gw], plan.offset[w]);
    // Persistent: x, w, v; w' and v' add nothing.
    EXPECT_EQ(plan.persistent_bytes, (8 * 16 + 16 * 4 + 16 * 4) * 4);

    MemoryPlan broken = plan;
    broken.offset[outs[0]] = plan.offset[gw];
    EXPECT_EQ(error_of([&] { check_memory_plan(g, broken); }),
              "memory plan: tensor 'w.update:0' updates 'w' in place, so it must have the same offset (" +
                  std::to_string(plan.offset[w]) + "), not " + std::to_string(plan.offset[gw]));
}

TEST(MemoryPlan, OutputsNeverOverlapTheInputsOfTheirNode) {
    // y = relu(x) is x's last use; the bytes of x are free after the node but
    // not during it.
    Graph g;
    TensorId x0 = g.add_data("x0", f32({256}));
    TensorId a = g.add_node({OpKind::Scale, "a", {{"alpha", 2.0}}}, {x0})[0];
    TensorId b = g.add_node({OpKind::Relu, "b", {}}, {a})[0];
    TensorId c = g.add_node({OpKind::Relu, "c", {}}, {b})[0];
    MemoryPlan plan = plan_memory(g, default_order(g));
    expect_valid(g, default_order(g), plan);
    EXPECT_NE(plan.offset[a], plan.offset[b]);
    EXPECT_NE(plan.offset[b], plan.offset[c]);
    EXPECT_EQ(plan.offset[a], plan.offset[c]) << "a is dead when c is written, so c can reuse it";
    EXPECT_EQ(plan.arena_bytes, 3 * 1024) << plan.summary();
}

TEST(MemoryPlan, AChainReusesTwoBuffers) {
    Graph g;
    const int64_t n = 1 << 18;  // 1 MiB
    TensorId t = g.add_data("x", f32({n}));
    for (int i = 0; i < 20; i++) t = g.add_node({OpKind::Relu, "r" + std::to_string(i), {}}, {t})[0];
    g.set_output("y", t);
    MemoryPlan plan = plan_memory(g, default_order(g));
    expect_valid(g, default_order(g), plan);
    // x and y persist; at a node in the middle its input and output are live
    // too: 4 MiB, however long the chain.
    EXPECT_EQ(plan.lower_bound, 4 * n * 4);
    EXPECT_EQ(plan.arena_bytes, plan.lower_bound);
}

TEST(MemoryPlan, MlpTrainingArenaIsWithinTwentyPercentOfTheLowerBound) {
    for (auto opt : {OptimizerConfig::Kind::Sgd, OptimizerConfig::Kind::Adam}) {
        Graph g = mlp_training_graph(128, {784, 1024, 1024, 10}, opt);
        std::vector<NodeId> order = default_order(g);
        MemoryPlan plan = plan_memory(g, order);
        std::printf("%s MLP 784-1024-1024-10, batch 128: %s\n", optimizer_name(opt), plan.summary().c_str());
        expect_valid(g, order, plan);
        EXPECT_LE(double(plan.arena_bytes), 1.2 * double(plan.lower_bound)) << plan.summary();
        MemoryPlanOptions in_time;  // the placement graphs of over 8192 blocks get
        in_time.greedy_blocks = 0;
        const MemoryPlan timed = plan_memory(g, order, in_time);
        std::printf("  placed in time: %s\n", timed.summary().c_str());
        expect_valid(g, order, timed);
        EXPECT_LE(double(timed.arena_bytes), 1.2 * double(timed.lower_bound)) << timed.summary();
        int64_t all = 0;
        for (const TensorInfo &t : g.tensors())
            if (t.updates == kNoTensor) all += t.type.bytes();
        EXPECT_LT(plan.arena_bytes, all) << "transient tensors must share storage";
    }
}

TEST(MemoryPlan, BadOrdersAreClearErrors) {
    Graph g;
    TensorId x = g.add_data("x", f32({4}));
    TensorId a = g.add_node({OpKind::Relu, "a", {}}, {x})[0];
    g.add_node({OpKind::Relu, "b", {}}, {a});
    EXPECT_EQ(error_of([&] { plan_memory(g, {0, 1, 0}); }),
              "node order: node 'a' appears twice (positions 0 and 2)");
    EXPECT_EQ(error_of([&] { plan_memory(g, {1, 0}); }),
              "node order: node 'b' (position 0) reads 'a', but its producer 'a' does not run before it; the "
              "order must be topological");
    EXPECT_EQ(error_of([&] { plan_memory(g, {0, 7}); }),
              "node order: position 1 names node 7 but the graph has 2 nodes");
}

TEST(MemoryPlan, NodesLeftOutOfTheOrderGetNoStorage) {
    Graph g;
    TensorId x = g.add_data("x", f32({4}));
    TensorId a = g.add_node({OpKind::Relu, "a", {}}, {x})[0];
    TensorId b = g.add_node({OpKind::Relu, "b", {}}, {a})[0];
    MemoryPlan plan = plan_memory(g, {0});
    EXPECT_GE(plan.offset[x], 0);
    EXPECT_GE(plan.offset[a], 0);
    EXPECT_EQ(plan.offset[b], -1);
    EXPECT_FALSE(plan.has_storage(b));
    MemoryPlan empty = plan_memory(g, {});
    EXPECT_EQ(empty.lower_bound, 16);
    EXPECT_EQ(empty.arena_bytes, 64);
}

TEST(MemoryPlan, RoundTripsThroughJson) {
    std::mt19937 rng(7);
    RandomGraph r = random_graph(rng, 30);
    MemoryPlan plan = plan_memory(r.g, random_topological_order(r.g, rng));
    nlohmann::json j = memory_plan_to_json(plan);
    EXPECT_EQ(memory_plan_from_json(nlohmann::json::parse(j.dump())), plan);
    EXPECT_EQ(j["alignment"], 64);
}

TEST(MemoryPlan, MalformedJsonNamesTheFieldAndSource) {
    MemoryPlan small;
    small.order = {0};
    small.offset = {0, 64};
    small.arena_bytes = 128;
    small.lower_bound = 100;
    small.persistent_bytes = 64;
    nlohmann::json good = memory_plan_to_json(small);
    nlohmann::json j = good;
    j.erase("offset");
    EXPECT_EQ(error_of([&] { memory_plan_from_json(j, "plan.json"); }), "plan.json: missing field 'offset'");
    j = good;
    j["arena_bytes"] = "big";
    EXPECT_EQ(error_of([&] { memory_plan_from_json(j, "plan.json"); }),
              "plan.json: field 'arena_bytes' must be an integer, got \"big\"");
    j = good;
    j["offset"][1] = 1.5;
    EXPECT_EQ(error_of([&] { memory_plan_from_json(j, "plan.json"); }),
              "plan.json: offset[1] must be an integer, got 1.5");
    j = good;
    j["alignment"] = 128;
    EXPECT_EQ(error_of([&] { memory_plan_from_json(j, "plan.json"); }),
              "plan.json: alignment 128 is not supported; this build aligns tensors to 64 bytes");
    EXPECT_EQ(error_of([&] { memory_plan_from_json(nlohmann::json::array(), "plan.json"); }),
              "plan.json: a memory plan must be a JSON object, got array");
}

TEST(MemoryPlan, CheckRejectsPlansThatDoNotFitTheGraph) {
    Graph g;
    TensorId x = g.add_data("x", f32({4, 4}));
    g.add_node({OpKind::Relu, "a", {}}, {x});
    MemoryPlan plan = plan_memory(g, default_order(g));
    MemoryPlan p = plan;
    p.offset.push_back(0);
    EXPECT_EQ(error_of([&] { check_memory_plan(g, p, "p.json"); }),
              "p.json: has offsets for 3 tensors but the graph has 2; the plan was made for another graph");
    p = plan;
    p.offset[0] = 32;
    EXPECT_EQ(error_of([&] { check_memory_plan(g, p, "p.json"); }),
              "p.json: tensor 'x' has offset 32, which is not a multiple of 64");
    p = plan;
    p.arena_bytes = 64;
    p.offset[0] = 64;
    EXPECT_EQ(error_of([&] { check_memory_plan(g, p, "p.json"); }),
              "p.json: tensor 'x' (f32[4, 4]) at offset 64 ends at 128, past the arena of 64 bytes");
}

TEST(MemoryPlan, HostRegionsRoundTripAndAreChecked) {
    Graph g;
    TensorId x = g.add_data("x", f32({4, 4}));
    TensorId w = g.add_param("w", f32({4, 4}), Init::zeros());
    TensorId y = g.add_node({OpKind::Matmul, "a", {}}, {x, w})[0];
    MemoryPlan plan = plan_memory(g, default_order(g));
    // Plans written before swapping have no host fields, and load as unswapped.
    nlohmann::json old = memory_plan_to_json(plan);
    EXPECT_FALSE(old.contains("host_offset"));
    EXPECT_EQ(memory_plan_from_json(old), plan);

    MemoryPlan p = plan;
    p.host_offset = {-1, 0, 64};
    p.offset[w] = -1;
    p.host_bytes = 128;
    EXPECT_NO_THROW(check_memory_plan(g, p, "p.json"));
    nlohmann::json j = memory_plan_to_json(p);
    EXPECT_EQ(memory_plan_from_json(nlohmann::json::parse(j.dump())), p);
    EXPECT_NE(p.summary().find("; host area 128 bytes (128 B)"), std::string::npos) << p.summary();

    MemoryPlan bad = p;
    bad.host_offset[y] = 32;
    EXPECT_EQ(error_of([&] { check_memory_plan(g, bad, "p.json"); }),
              "p.json: tensor 'a' has host offset 32, which is not a multiple of 64");
    bad = p;
    bad.host_offset[y] = 128;
    EXPECT_EQ(error_of([&] { check_memory_plan(g, bad, "p.json"); }),
              "p.json: tensor 'a' (f32[4, 4]) at host offset 128 ends at 192, past the host area of 128 bytes");
    bad = p;
    bad.host_offset[x] = -2;
    EXPECT_EQ(error_of([&] { check_memory_plan(g, bad, "p.json"); }),
              "p.json: tensor 'x' has host offset -2; use -1 for no host region");
    bad = p;
    bad.host_offset.pop_back();
    EXPECT_EQ(error_of([&] { check_memory_plan(g, bad, "p.json"); }),
              "p.json: has host offsets for 2 tensors but the graph has 3; give one per tensor, or none");
    j["host_offset"][0] = "none";
    EXPECT_EQ(error_of([&] { memory_plan_from_json(j, "p.json"); }),
              "p.json: host_offset[0] must be an integer, got \"none\"");
}

TEST(MemoryPlan, SummaryGivesTheNumbers) {
    Graph g;
    TensorId x = g.add_data("x", f32({1024}));
    g.add_node({OpKind::Relu, "a", {}}, {x});
    std::string s = plan_memory(g, default_order(g)).summary();
    EXPECT_EQ(s, "memory plan: 1 nodes, 2 of 2 tensors stored; arena 8192 bytes (8.00 KiB), lower bound 8192 bytes "
                 "(8.00 KiB), arena/bound 1.000; persistent 4096 bytes (4.00 KiB)");
}

}  // namespace
}  // namespace tessera
