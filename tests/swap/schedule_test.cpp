// The swap scheduler against an exhaustive search, the simulator against
// hand-computed times, and check_swap_plan against plans broken on purpose.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>

#include "internal.h"  // swap/src: the scheduler, for white-box cases
#include "check_message.h"
#include "tessera/error.h"
#include "tessera/graph/builder.h"
#include "tessera/graph/optimizer.h"
#include "tessera/program/memory_plan.h"
#include "tessera/swap/swap_plan.h"

namespace tessera {
namespace {

using namespace swap_detail;

// A random graph of elementwise operators on [4, 4] f32 tensors (64 bytes,
// one size class): two data inputs, each node reading one or two earlier
// tensors.
Graph random_uniform_graph(std::mt19937 &rng, int nodes) {
    Graph g;
    Builder b(g);
    std::vector<Tensor> ts = {b.data("x", {4, 4}), b.data("y", {4, 4})};
    for (int i = 0; i < nodes; i++) {
        Tensor a = ts[rng() % ts.size()], c = ts[rng() % ts.size()];
        auto scope = b.scope("n" + std::to_string(i));
        ts.push_back(rng() % 3 == 0 ? b.relu(a) : rng() % 2 ? b.add(a, c) : b.mul(a, c));
    }
    return g;
}

SwapProblem uniform_problem(const Graph &g, int64_t budget) {
    SwapProblem p;
    p.graph = &g;
    p.order = default_order(g);
    p.node_time_s.assign(g.num_nodes(), 1e-3);
    p.budget = budget;
    p.h2d_bytes_per_s = p.d2h_bytes_per_s = 64e3;
    return p;
}

// The fewest swap-ins any eviction choice gives, for one class of `slots`
// slots and the fixed order: a depth-first search over every victim at every
// eviction. Buffers leave the device after their last use, and every buffer
// a node reads must be on the device (a miss otherwise).
int brute_force_swap_ins(const Prepared &p, int slots) {
    const int nb = static_cast<int>(p.bufs.size()), n = static_cast<int>(p.order.size());
    std::vector<int> last_use(nb, -1);
    for (int i = 0; i < n; i++)
        for (int k = p.use_begin[p.order[i]]; k < p.use_begin[p.order[i] + 1]; k++) last_use[p.uses[k].buf] = i;
    int best = 1 << 30;
    std::function<void(int, std::vector<bool>, int)> go = [&](int i, std::vector<bool> res, int misses) {
        if (misses >= best) return;
        if (i == n) {
            best = misses;
            return;
        }
        NodeId node = p.order[i];
        std::vector<int> need;
        std::vector<bool> used(nb, false);
        for (int k = p.use_begin[node]; k < p.use_begin[node + 1]; k++) {
            used[p.uses[k].buf] = true;
            if (!res[p.uses[k].buf]) {
                need.push_back(p.uses[k].buf);
                if (p.uses[k].read) misses++;
            }
        }
        // Place the missing buffers one by one, branching on each victim.
        std::function<void(size_t, std::vector<bool>)> place = [&](size_t k, std::vector<bool> r) {
            if (k == need.size()) {
                for (int b = 0; b < nb; b++)
                    if (r[b] && last_use[b] == i) r[b] = false;
                go(i + 1, r, misses);
                return;
            }
            int count = static_cast<int>(std::count(r.begin(), r.end(), true));
            if (count < slots) {
                r[need[k]] = true;
                place(k + 1, r);
                return;
            }
            for (int v = 0; v < nb; v++) {
                if (!r[v] || used[v]) continue;
                std::vector<bool> r2 = r;
                r2[v] = false;
                r2[need[k]] = true;
                place(k + 1, r2);
            }
        };
        place(0, res);
    };
    go(0, std::vector<bool>(nb, false), 0);
    return best;
}

TEST(SwapSchedule, BeladyMatchesExhaustiveSearch) {
    std::mt19937 rng(11);
    int compared = 0, lru_worse = 0, evicting = 0;
    for (int trial = 0; trial < 60; trial++) {
        Graph g = random_uniform_graph(rng, 4 + trial % 4);
        SwapProblem pr = uniform_problem(g, 1 << 20);
        Prepared p = prepare(pr, SwapPolicy::Advisor, true);
        p.classes = make_classes(p, 0.25, 16);
        ASSERT_EQ(p.classes.bytes.size(), 1u);
        Layout layout;
        choose_pins(p, 0, layout);
        int min = min_slots(p, p.classes, layout.pin)[0];
        for (int slots = min; slots <= min + 2; slots++) {
            layout.slots = {slots};
            Scheduler s;
            Schedule out;
            s.run(p, p.order, p.classes, layout, SwapPolicy::Advisor, out);
            int ins = 0;
            for (const IStep &st : out.steps) ins += st.kind == SwapStep::Kind::SwapIn;
            int best = brute_force_swap_ins(p, slots);
            EXPECT_EQ(ins, best) << "trial " << trial << ", " << slots << " slots";
            Schedule lru;
            s.run(p, p.order, p.classes, layout, SwapPolicy::Lru, lru);
            int lru_ins = 0;
            for (const IStep &st : lru.steps) lru_ins += st.kind == SwapStep::Kind::SwapIn;
            EXPECT_GE(lru_ins, best);
            lru_worse += lru_ins > best;
            evicting += out.swap_out_bytes > 0;
            // The plan the schedule makes passes the independent checker.
            SwapPlan plan = make_plan(p, p.order, p.classes, layout, SwapPolicy::Advisor, out);
            check_swap_plan(g, plan, "trial " + std::to_string(trial));
            compared++;
        }
    }
    EXPECT_EQ(compared, 180);
    // The cases discriminate: some evict dirty buffers, and LRU loses on some.
    EXPECT_GT(evicting, 20);
    EXPECT_GT(lru_worse, 5);
    std::printf("%d of %d cases evict dirty buffers; LRU swaps in more than the optimum in %d\n", evicting, compared,
                lru_worse);
}

// The advisor's schedule of p's order under whole slots `slots` with pieces
// and spans, as a plan the independent checker passed.
SwapPlan plan_split(const Graph &g, const Prepared &p, std::vector<int> slots, Schedule &out) {
    Layout layout;
    choose_pins(p, 0, layout);
    layout.slots = std::move(slots);
    layout.split = true;
    Scheduler s;
    s.run(p, p.order, p.classes, layout, SwapPolicy::Advisor, out);
    SwapPlan plan = make_plan(p, p.order, p.classes, layout, SwapPolicy::Advisor, out);
    check_swap_plan(g, plan, "split slots");
    return plan;
}

// Buffers the plan produces or swaps in at arena offset `off`.
int placed_at_offset(const SwapPlan &plan, int64_t off) {
    int n = 0;
    for (int64_t o : plan.produce_at) n += o == off;
    for (const SwapStep &st : plan.steps) n += st.kind == SwapStep::Kind::SwapIn && st.offset == off;
    return n;
}

// A layout of one 64-byte slot and one 128-byte slot, with an operator of
// three 64-byte operands: whole slots alone hold two of them (pools of whole
// slots need a third), and the 128-byte slot's two pieces hold the rest. The
// plan passes the independent checker, and the second piece is used.
TEST(SwapSchedule, PiecesOfALargerSlotHoldSmallerBuffers) {
    Graph g;
    Builder b(g);
    Tensor x = b.data("x", {4, 4}), y = b.data("y", {4, 4});
    b.relu(b.add(x, y));
    SwapProblem pr = uniform_problem(g, 1 << 20);
    Prepared p = prepare(pr, SwapPolicy::Advisor, true);
    p.classes = make_classes(p, -1, 16);
    ASSERT_EQ(p.classes.bytes, (std::vector<int64_t>{64}));
    p.classes.bytes.push_back(128);  // a class no buffer has: only its slot's pieces fit them
    EXPECT_EQ(min_slots(p, p.classes, std::vector<int64_t>(p.bufs.size(), -1))[0], 3);
    Schedule out;
    SwapPlan plan = plan_split(g, p, {1, 1}, out);
    EXPECT_GT(placed_at_offset(plan, out.pool_offset[1] + 64), 0);  // the second piece
    EXPECT_EQ(plan.peak_bytes, 192);
}

// A layout of two 64-byte slots and one 128-byte slot, with an operator of
// two 128-byte operands: the two adjacent 64-byte slots make a span that
// holds the second (pools of whole slots need two 128-byte slots).
TEST(SwapSchedule, AdjacentSmallerSlotsSpanALargerBuffer) {
    Graph g;
    Builder b(g);
    b.relu(b.data("w", {4, 8}));
    SwapProblem pr = uniform_problem(g, 1 << 20);
    Prepared p = prepare(pr, SwapPolicy::Advisor, true);
    p.classes = make_classes(p, -1, 16);
    ASSERT_EQ(p.classes.bytes, (std::vector<int64_t>{128}));
    p.classes.bytes.insert(p.classes.bytes.begin(), 64);  // a class no buffer has
    for (int &k : p.classes.of_buf)
        if (k >= 0) k++;
    EXPECT_EQ(min_slots(p, p.classes, std::vector<int64_t>(p.bufs.size(), -1)), (std::vector<int>{0, 2}));
    Schedule out;
    SwapPlan plan = plan_split(g, p, {2, 1}, out);
    EXPECT_EQ(placed_at_offset(plan, out.pool_offset[0]), 1);  // the span over the two 64-byte slots
    EXPECT_EQ(plan.peak_bytes, 256);
}

// Random graphs of 64- and 128-byte tensors under tight whole-slot layouts:
// with pieces and spans, every plan passes the independent checker, and over all
// cases the scheduler swaps in fewer bytes than with whole slots only.
TEST(SwapSchedule, PiecesAndSpansPassTheCheckerAndSwapLess) {
    std::mt19937 rng(5);
    int64_t whole_in = 0, split_in = 0;
    int cases = 0;
    for (int trial = 0; trial < 40; trial++) {
        Graph g;
        Builder b(g);
        std::vector<Tensor> small = {b.data("x", {4, 4}), b.data("y", {4, 4})}, big = {b.data("w", {4, 8})};
        for (int i = 0; i < 6 + trial % 5; i++) {
            auto scope = b.scope("n" + std::to_string(i));
            Tensor a = small[rng() % small.size()], c = small[rng() % small.size()];
            if (rng() % 3 == 0) big.push_back(b.relu(b.matmul(a, big[rng() % big.size()])));
            else small.push_back(rng() % 2 ? b.add(a, c) : b.mul(a, c));
        }
        SwapProblem pr = uniform_problem(g, 1 << 20);
        Prepared p = prepare(pr, SwapPolicy::Advisor, true);
        p.classes = make_classes(p, -1, 16);
        if (p.classes.bytes.size() != 2) continue;
        Layout layout;
        choose_pins(p, 0, layout);
        layout.slots = min_slots(p, p.classes, layout.pin);
        for (bool split : {false, true}) {
            layout.split = split;
            Scheduler s;
            Schedule out;
            s.run(p, p.order, p.classes, layout, SwapPolicy::Advisor, out);
            check_swap_plan(g, make_plan(p, p.order, p.classes, layout, SwapPolicy::Advisor, out),
                            "trial " + std::to_string(trial));
            (split ? split_in : whole_in) += out.swap_in_bytes;
        }
        cases++;
    }
    EXPECT_GT(cases, 20);
    EXPECT_LT(split_in, whole_in);
    std::printf("%d cases: %lld bytes swapped in with pieces and spans, %lld with whole slots only\n", cases,
                static_cast<long long>(split_in), static_cast<long long>(whole_in));
}

// Random graphs whose every forward activation is dropped, at the fewest
// slots: where the recomputations cannot run, the scheduler blames a buffer
// that was dropped, and clearing what it blames (schedule_repairing) ends in
// a plan that passes the independent checker.
TEST(SwapSchedule, RepairsClearOnlyDroppedBuffersAndEndFeasible) {
    std::mt19937 rng(11);
    int repaired = 0;
    for (int trial = 0; trial < 30; trial++) {
        Graph g = random_uniform_graph(rng, 10 + trial % 7);
        Prepared p = prepare(uniform_problem(g, 1 << 20), SwapPolicy::Advisor, true);
        p.classes = make_classes(p, -1, 16);
        Layout layout;
        choose_pins(p, 0, layout);
        layout.slots = min_slots(p, p.classes, layout.pin);
        layout.split = true;
        layout.recompute = p.recomputable;
        const std::vector<uint8_t> dropped = layout.recompute;
        Scheduler s;
        Schedule out;
        std::vector<int> cleared;
        const int bits = static_cast<int>(p.recompute_bufs.size());
        ASSERT_TRUE(schedule_repairing(s, p, p.order, p.classes, layout, bits, out, &cleared)) << "trial " << trial;
        for (int b : cleared) {
            EXPECT_TRUE(dropped[b]) << "trial " << trial << " cleared buffer " << b << ", which was not dropped";
            EXPECT_FALSE(layout.recompute[b]);
        }
        check_swap_plan(g, make_plan(p, p.order, p.classes, layout, SwapPolicy::Advisor, out),
                        "trial " + std::to_string(trial));
        repaired += !cleared.empty();
    }
    EXPECT_GT(repaired, 0);  // else the cases test nothing
    std::printf("%d of 30 layouts needed repairs\n", repaired);
}

// Three streams, hand-computed: compute a (1 s), a swap-out of 100 bytes at
// 100 B/s (1 s) after it, a swap-in of 200 bytes (2 s) after the swap-out,
// and compute b (1 s) after the swap-in.
TEST(SwapSimulate, HandComputedTimes) {
    SwapPlan plan;
    SwapStep a{SwapStep::Kind::Compute, 0, kNoTensor, -1, 0, {}, 0, 0};
    SwapStep out{SwapStep::Kind::SwapOut, kNoNode, 0, 0, 100, {0}, 0, 0};
    SwapStep in{SwapStep::Kind::SwapIn, kNoNode, 1, 0, 200, {1}, 0, 0};
    SwapStep b{SwapStep::Kind::Compute, 1, kNoTensor, -1, 0, {2}, 0, 0};
    plan.steps = {a, out, in, b};
    EXPECT_DOUBLE_EQ(simulate_swap_plan(plan, {1, 1}, 100, 100), 5.0);
    // b not waiting for the swap-in: it follows a; the swap-in ends last.
    plan.steps[3].after.clear();
    EXPECT_DOUBLE_EQ(simulate_swap_plan(plan, {1, 1}, 100, 100), 4.0);
    // A faster link: out 0.5 s, in 1 s; b waits for the swap-in again.
    plan.steps[3].after = {2};
    EXPECT_DOUBLE_EQ(simulate_swap_plan(plan, {1, 1}, 200, 200), 3.5);
    // Two swap-ins in a row share their stream.
    SwapStep in2{SwapStep::Kind::SwapIn, kNoNode, 2, 64, 100, {}, 0, 0};
    plan.steps = {a, in2, in, b};
    plan.steps[2].after.clear();
    plan.steps[3].after = {2};
    EXPECT_DOUBLE_EQ(simulate_swap_plan(plan, {1, 1}, 100, 100), 4.0);  // in2 0-1, in 1-3, b 3-4
    plan.steps[3].after = {7};
    try {
        simulate_swap_plan(plan, {1, 1}, 100, 100);
        FAIL();
    } catch (const Error &e) {
        EXPECT_EQ(std::string(e.what()), "swap plan: step 3 waits for step 7, which is not an earlier step");
    }
}

struct Broken {
    Graph g;
    SwapPlan plan;
};

// An SGD-trained MLP under a tight budget: weights swap in and out.
Broken swapped_mlp(SwapPolicy policy) {
    Broken b;
    Builder bl(b.g);
    Tensor x = bl.data("images", {16, 32});
    Tensor labels = bl.data("labels", {16}, DType::I32);
    Tensor h = x;
    for (int i = 0; i < 3; i++) {
        auto scope = bl.scope("fc" + std::to_string(i));
        h = bl.linear(h, i == 2 ? 4 : 32);
        if (i < 2) h = bl.relu(h);
    }
    Tensor loss = bl.softmax_xent(h, labels);
    b.g.set_output("loss", loss.id);
    make_training_graph(b.g, loss.id, OptimizerConfig{});
    SwapProblem pr = uniform_problem(b.g, 0);
    pr.budget = min_swap_budget(pr);
    SwapOptions o;
    o.policy = policy;
    o.generations = 5;
    b.plan = plan_swaps(pr, o);
    return b;
}

using test::check_message;

// Removes step i, renumbering the waits of the later ones.
void remove_step(SwapPlan &plan, int i) {
    plan.steps.erase(plan.steps.begin() + i);
    for (SwapStep &s : plan.steps) {
        std::vector<int> after;
        for (int a : s.after)
            if (a != i) after.push_back(a > i ? a - 1 : a);
        s.after = after;
    }
}

// A tensor's name, quoted as the checker's messages quote it.
std::string quoted(const Graph &g, TensorId t) { return "'" + g.tensor(t).name + "'"; }

// A compute that no longer waits for its swap-in: 1 when the plan has one and the check caught it.
int unwait_a_swap_in(const Broken &b) {
    const auto &steps = b.plan.steps;
    for (size_t i = 0; i < steps.size(); i++) {
        if (steps[i].kind != SwapStep::Kind::Compute) continue;
        int in = -1;
        for (int a : steps[i].after)
            if (steps[a].kind == SwapStep::Kind::SwapIn) in = a;
        if (in < 0) continue;
        SwapPlan bad = b.plan;
        auto &after = bad.steps[i].after;
        after.erase(std::find(after.begin(), after.end(), in));
        // Nothing else (a later compute's wait) may order it, so the check names this step or a later one.
        std::string m = check_message(b.g, bad);
        EXPECT_NE(m.find("which step " + std::to_string(in) + " (swap-in "), std::string::npos) << m;
        EXPECT_NE(m.find("writes with no wait between them: the two would race. Make step "), std::string::npos) << m;
        return 1;
    }
    return 0;
}

// A swap-in to an offset that is no slot.
int misplace_a_swap_in(const Broken &b) {
    const auto &steps = b.plan.steps;
    for (size_t i = 0; i < steps.size(); i++) {
        if (steps[i].kind != SwapStep::Kind::SwapIn) continue;
        SwapPlan bad = b.plan;
        bad.steps[i].offset += 1;
        std::string m = check_message(b.g, bad);
        EXPECT_EQ(m.rfind("plan: step " + std::to_string(i) + " (swap-in " + quoted(b.g, steps[i].tensor) + "): offset ", 0), 0u)
            << m;
        EXPECT_NE(m.find("is not a place inside one pool"), std::string::npos) << m;
        return 1;
    }
    return 0;
}

// Dropping the last swap-out of an updated weight that lives in host memory.
int drop_a_weights_last_swap_out(const Broken &b) {
    const auto &steps = b.plan.steps;
    int last_out = -1;
    for (size_t i = 0; i < steps.size(); i++)
        if (steps[i].kind == SwapStep::Kind::SwapOut && b.g.tensor(steps[i].tensor).role == TensorRole::Param)
            last_out = static_cast<int>(i);
    if (last_out >= 0) {
        TensorId w = steps[last_out].tensor;
        bool later_in = false;
        for (size_t i = last_out; i < steps.size(); i++) later_in |= steps[i].kind == SwapStep::Kind::SwapIn && steps[i].tensor == w;
        if (!later_in) {
            SwapPlan bad = b.plan;
            remove_step(bad, last_out);
            std::string m = check_message(b.g, bad);
            EXPECT_EQ(m.rfind("plan: the host-homed " + quoted(b.g, w) + " is written by step ", 0), 0u) << m;
            EXPECT_NE(m.find(" but not swapped out after that, so its new value would be lost at the end of the step"),
                      std::string::npos)
                << m;
            return 1;
        }
    }
    return 0;
}

// Dropping a swap-out whose tensor is swapped in again later: its slot is
// overwritten while it is still needed, or it comes back stale.
int drop_a_needed_swap_out(const Broken &b) {
    const auto &steps = b.plan.steps;
    // overwritten while it is still needed, or it comes back stale.
    for (size_t i = 0; i < steps.size(); i++) {
        if (steps[i].kind != SwapStep::Kind::SwapOut) continue;
        TensorId v = steps[i].tensor;
        bool later_in = false;
        for (size_t k = i; k < steps.size(); k++) later_in |= steps[k].kind == SwapStep::Kind::SwapIn && steps[k].tensor == v;
        if (!later_in) continue;
        SwapPlan bad = b.plan;
        remove_step(bad, static_cast<int>(i));
        std::string m = check_message(b.g, bad);
        EXPECT_TRUE(m.find("reads " + quoted(b.g, v) + ", which is not in the arena: it was written over") != std::string::npos ||
                    m.find("the host region of " + quoted(b.g, v) + " does not hold its current value") != std::string::npos)
            << m;
        return 1;
    }
    return 0;
}

TEST(SwapCheck, CatchesBrokenPlans) {
    Broken b = swapped_mlp(SwapPolicy::Advisor);
    ASSERT_EQ(check_message(b.g, b.plan), "passed");
    ASSERT_GT(b.plan.swap_in_bytes, 0);
    int hits = unwait_a_swap_in(b) + misplace_a_swap_in(b) + drop_a_weights_last_swap_out(b) + drop_a_needed_swap_out(b);
    EXPECT_EQ(hits, 4);
    // Waiting for a later step; computing out of order; a pinned tensor overlapping another.
    SwapPlan bad = b.plan;
    bad.steps[1].after.push_back(5);
    EXPECT_EQ(check_message(b.g, bad).find("plan: step 1 ("), 0u);
    EXPECT_NE(check_message(b.g, bad).find("waits for step 5, which is not an earlier step"), std::string::npos);
    bad = b.plan;
    std::swap(bad.order[0], bad.order[1]);
    EXPECT_NE(check_message(b.g, bad).find("computes out of the plan's order (expected position 0)"), std::string::npos);
    bad = b.plan;
    bad.swapped.assign(bad.swapped.size(), 0);
    EXPECT_NE(check_message(b.g, bad).find("is persistent and not pinned, so it lives in host memory, but swapped is 0"),
              std::string::npos)
        << check_message(b.g, bad);
}

TEST(SwapCheck, BaselinePlansPass) {
    for (SwapPolicy p : {SwapPolicy::Lru, SwapPolicy::Vdnn, SwapPolicy::Ideal}) {
        Broken b = swapped_mlp(p);
        EXPECT_EQ(check_message(b.g, b.plan), "passed") << swap_policy_name(p);
    }
}

}  // namespace
}  // namespace tessera
