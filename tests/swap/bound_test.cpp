// swap_lower_bound: no plan may beat it, it is the compute time
// when memory is plentiful, and its link terms match sums worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "swap_problems.h"
#include "tessera/models/zoo.h"
#include "tessera/program/memory_plan.h"
#include "tessera/swap/swap_plan.h"

namespace tessera {
namespace {

// A training graph with Adam, every node 1 ms on the device and 2 ms on the
// host, and a link that moves 4 KiB in 4 ms.
struct Problem {
    Graph g;
    SwapProblem p;
};

void finish(Problem &m, TensorId loss) {
    m.p = test::adam_swap_problem(m.g, loss);
    m.p.budget = plan_memory(m.g, m.p.order).arena_bytes;
}

// Three [32, 32] linear layers without biases on a [16, 32] batch.
void build_mlp(Problem &m) { finish(m, test::mlp_loss(m.g, /*bias=*/false)); }

void build_zoo(Problem &m, const std::string &spec, int64_t batch) {
    Model model = build_model(spec, batch);
    m.g = std::move(model.graph);
    finish(m, model.loss);
}

double plan_time(const SwapProblem &p, SwapPolicy policy, HostUpdates host, uint64_t seed) {
    SwapOptions o;
    o.policy = policy;
    o.host_updates = host;
    o.recompute = true;
    o.seed = seed;
    o.generations = 30;
    return plan_swaps(p, o).time_s;
}

// Every plan of every policy, with and without host updates, at budgets from
// the least that works to plentiful, on three models, two link speeds and
// two balances of forward and backward time.
TEST(SwapBound, NoPlanBeatsIt) {
    int checked = 0, phased = 0;
    for (int model = 0; model < 3; model++) {
        Problem m;
        if (model == 0) build_mlp(m);
        if (model == 1) build_zoo(m, "transformer:layers=2,d_model=16,heads=2,seq=4,vocab=12", 2);
        if (model == 2) build_zoo(m, "lstm:layers=2,hidden=8,seq=3,vocab=10", 4);
        const int64_t full = m.p.budget;
        for (int timing = 0; timing < 4; timing++) {
            // Two link speeds, with every node 1 ms or with a backward pass
            // and updates 20 times faster than the forward (where the split
            // bound tends to bind).
            m.p.h2d_bytes_per_s = m.p.d2h_bytes_per_s = timing % 2 ? 4096 / 4e-6 : 4096 / 4e-3;
            for (NodeId n : m.p.order) {
                const Node &node = m.g.node(n);
                m.p.node_time_s[n] = timing >= 2 && (node.backward || node.optimizer) ? 5e-5 : 1e-3;
            }
            for (HostUpdates host : {HostUpdates::Off, HostUpdates::Auto, HostUpdates::All}) {
                int64_t least = min_swap_budget(m.p, host);
                for (int64_t budget : {least, least + (full - least) / 4, least + (full - least) / 2, full}) {
                    m.p.budget = budget;
                    SwapBound b = swap_lower_bound(m.p, host);
                    double bound = b.time_s;
                    EXPECT_GT(bound, 0);
                    phased += b.phased_s > b.streams_s;
                    for (SwapPolicy policy : {SwapPolicy::Lru, SwapPolicy::Vdnn, SwapPolicy::Advisor})
                        for (uint64_t seed : {1, 2}) {
                            // The baselines keep every update on the device: the bound
                            // of "all on the host" is not theirs.
                            if (policy != SwapPolicy::Advisor &&
                                (budget < min_swap_budget(m.p) || host == HostUpdates::All))
                                continue;
                            double t = plan_time(m.p, policy, host, seed);
                            EXPECT_LE(bound, t * (1 + 1e-9)) << "model " << model << ", budget " << budget
                                                             << ", policy " << swap_policy_name(policy) << ", timing "
                                                             << timing << ", host updates " << host_updates_name(host);
                            checked++;
                        }
                }
            }
        }
    }
    EXPECT_GT(checked, 3 * 4 * 3 * 4 * 2);
    EXPECT_GT(phased, 0);  // the split bound sets some of them
    std::cout << "the split bound set " << phased << " of the bounds\n";
}

// Random operator times (each drawn over three orders of magnitude), random
// host times and link speeds: no plan of the advisor or LRU beats the bound,
// whichever of its parts sets it.
TEST(SwapBound, NoPlanBeatsItUnderRandomTimes) {
    std::mt19937 rng(19);
    auto log_uniform = [&](double lo, double hi) {
        return lo * std::pow(hi / lo, std::uniform_real_distribution<double>(0, 1)(rng));
    };
    int checked = 0, phased = 0;
    for (int trial = 0; trial < 24; trial++) {
        Problem m;
        if (trial % 3 == 0) build_mlp(m);
        if (trial % 3 == 1) build_zoo(m, "transformer:layers=2,d_model=16,heads=2,seq=4,vocab=12", 2);
        if (trial % 3 == 2) build_zoo(m, "lstm:layers=2,hidden=8,seq=3,vocab=10", 4);
        for (NodeId n : m.p.order) {
            m.p.node_time_s[n] = log_uniform(1e-5, 1e-2);
            if (m.g.node(n).optimizer) m.p.host_node_time_s[n] = log_uniform(1e-5, 1e-2);
        }
        m.p.h2d_bytes_per_s = log_uniform(1e5, 1e8);
        m.p.d2h_bytes_per_s = log_uniform(1e5, 1e8);
        const int64_t full = m.p.budget;
        for (HostUpdates host : {HostUpdates::Off, HostUpdates::Auto}) {
            int64_t least = min_swap_budget(m.p, host);
            for (int64_t budget : {least, least + (full - least) / 3}) {
                m.p.budget = budget;
                SwapBound b = swap_lower_bound(m.p, host);
                phased += b.phased_s > b.streams_s;
                for (SwapPolicy policy : {SwapPolicy::Lru, SwapPolicy::Advisor}) {
                    if (policy == SwapPolicy::Lru && budget < min_swap_budget(m.p)) continue;
                    double t = plan_time(m.p, policy, host, trial);
                    EXPECT_LE(b.time_s, t * (1 + 1e-9)) << "trial " << trial << ", budget " << budget << ", "
                                                        << swap_policy_name(policy) << ", " << b.limit;
                    checked++;
                }
            }
        }
    }
    EXPECT_GT(checked, 24 * 2 * 2);
    EXPECT_GT(phased, 0);
    std::cout << "the split bound set " << phased << " of " << 24 * 2 * 2 << " bounds\n";
}

// With the whole footprint as budget nothing need move: the bound is the sum
// of the operator times, which the ideal plan reaches.
TEST(SwapBound, PlentifulMemoryLeavesTheComputeTime) {
    Problem m;
    build_mlp(m);
    m.p.budget *= 3;
    SwapBound b = swap_lower_bound(m.p);
    double sum = 0;
    for (NodeId n : m.p.order) sum += m.p.node_time_s[n];
    EXPECT_DOUBLE_EQ(b.compute_s, sum);
    EXPECT_NEAR(b.time_s, sum, 1e-9 * sum);
    EXPECT_EQ(b.limit, "compute");
    EXPECT_EQ(b.swap_in_s, 0);
    EXPECT_NEAR(plan_time(m.p, SwapPolicy::Ideal, HostUpdates::Off, 1), sum, 1e-9 * sum);
}

// The terms of the three-layer MLP at its least budget B (16448 B: fc0's
// update, w, dw, two moments and Adam's step), by hand:
//   read before written: images 2048 B, labels 64 B, the three weights and
//     their two moments 9 x 4096 B, the loss gradient's seed and Adam's step
//     (4 B each): 38984 B, so at least 38984 - B = 22536 B come in;
//   written: the weights, their moments and the loss: 36868 B, so at least
//     36868 - B = 20420 B go out;
//   at the turn (the loss's gradient): weights read before and after it,
//     images (by fc0's dW) and the three weights (fc1 and fc2 by dX, fc0 by
//     its update), 14336 B; activations made before and read after, the
//     [16, 32] outputs of the three matmuls and two relus, 10240 B; together
//     they exceed B by 8128 B.
TEST(SwapBound, TermsMatchTheSumsByHand) {
    Problem m;
    build_mlp(m);
    m.p.budget = min_swap_budget(m.p);
    ASSERT_EQ(m.p.budget, 16448);
    const double link = m.p.h2d_bytes_per_s;
    // Free compute: the activations are recomputed for nothing, and the
    // swap-in stream sets the bound.
    for (double &t : m.p.node_time_s) t = 0;
    SwapBound b = swap_lower_bound(m.p);
    EXPECT_EQ(b.turn_weight_bytes, 14336);
    EXPECT_EQ(b.turn_activation_bytes, 10240);
    EXPECT_NEAR(b.swap_in_s, 22536 / link, 1e-12);
    EXPECT_NEAR(b.swap_out_s, 20420 / link, 1e-12);
    EXPECT_NEAR(b.streams_s, b.swap_in_s, 1e-9 * b.swap_in_s);
    // After the turn, 49156 B are read (TheForwardAndTheBackwardDoNotOverlap)
    // of which at most B stay and 8192 B are recomputed for nothing: 24516 B
    // come in, more than the 22536 B of the streams alone.
    EXPECT_NEAR(b.phased_s, 24516 / link, 1e-12);
    EXPECT_EQ(b.time_s, b.phased_s);
    EXPECT_EQ(b.limit, "swap-in after the turn");
    // The five forward producers take t each, so that compute (5 t) and
    // swap-in (T0 = 22536 B) are both full at T0. Past T0, each second brings
    // back `link` bytes by swap-in and 2048 / t by recomputation; the turn's
    // 8128 B need T0 + 8128 / (link + 2048 / t).
    const double t0 = 22536 / link, t = t0 / 5;
    int producers = 0;
    for (NodeId n : m.p.order) {
        const Node &node = m.g.node(n);
        if (node.backward || node.optimizer || m.g.tensor(node.outputs[0]).name == "loss") continue;
        m.p.node_time_s[n] = t;
        producers++;
    }
    ASSERT_EQ(producers, 5);
    b = swap_lower_bound(m.p);
    EXPECT_NEAR(b.compute_s, t0, 1e-12);
    EXPECT_NEAR(b.streams_s, t0 + 8128 / (link + 2048 / t), 1e-9 * t0);
    // Split where the backward pass starts (TheForwardAndTheBackwardDoNotOverlap):
    // the forward's compute takes T0 before it, and after it 32708 B come
    // back, of which recomputation (free of other compute there) brings
    // back four activations of 2048 B, so 24516 B are swapped in.
    EXPECT_NEAR(b.phased_s, t0 + 24516 / link, 1e-9 * t0);
    EXPECT_EQ(b.limit, "compute, then swap-in");
    EXPECT_EQ(b.time_s, b.phased_s);
}

// The step split where the backward pass starts (the loss's gradient, x):
// the five forward operators before x take 1 s each and the rest nothing, so no
// swap-in after x overlaps the forward's compute. After x come back, less the
// budget B (16448 B, what may be resident then):
//   the three weights, read by the backward (fc1, fc2) and the updates
//     (all three), 12288 B; images, read by fc0's dW, 2048 B; the six Adam
//     moments, 24576 B; Adam's step, 4 B;
//   the five [16, 32] activations made before x and read after it, 10240 B,
//     four of which may instead be recomputed for their producer's 1 s;
// 49156 - B = 32708 B. In t seconds after x, recomputation brings back at
// most 2048 t B (its cheapest 2048 B take 1 s), so the swap-in after x needs
// t = 32708 / (link + 2048): the bound is 5 + t. The streams alone give only
// 5 s (the compute).
TEST(SwapBound, TheForwardAndTheBackwardDoNotOverlap) {
    Problem m;
    build_mlp(m);
    m.p.budget = min_swap_budget(m.p);
    const double link = m.p.h2d_bytes_per_s;
    int forward = 0;
    for (NodeId n : m.p.order) {
        const Node &node = m.g.node(n);
        bool fwd = !node.backward && !node.optimizer && m.g.tensor(node.outputs[0]).name != "loss";
        m.p.node_time_s[n] = fwd ? 1.0 : 0.0;
        forward += fwd;
    }
    ASSERT_EQ(forward, 5);
    SwapBound b = swap_lower_bound(m.p);
    EXPECT_NEAR(b.compute_s, 5.0, 1e-12);
    EXPECT_NEAR(b.streams_s, 5.0, 1e-9);
    EXPECT_EQ(b.limit, "compute, then swap-in");
    EXPECT_NEAR(b.time_s, 5 + 32708 / (link + 2048), 1e-9);
    for (SwapPolicy policy : {SwapPolicy::Lru, SwapPolicy::Vdnn, SwapPolicy::Advisor})
        EXPECT_LE(b.time_s, plan_time(m.p, policy, HostUpdates::Off, 1) * (1 + 1e-9));
}

// Every update on the host: the moments stay there, so the swap-in bound
// drops by their bytes, the gradients go out instead of weights and moments,
// and slow enough host updates set the bound.
TEST(SwapBound, HostUpdatesMoveTheWorkToTheHost) {
    Problem m;
    build_mlp(m);
    for (double &t : m.p.node_time_s) t = 0;
    m.p.budget = min_swap_budget(m.p, HostUpdates::Off);
    SwapBound device = swap_lower_bound(m.p, HostUpdates::Off);
    SwapBound host = swap_lower_bound(m.p, HostUpdates::All);
    EXPECT_LT(host.swap_in_s, device.swap_in_s);
    EXPECT_LT(host.time_s, device.time_s);
    int updates = 0;
    for (NodeId n : m.p.order) updates += m.g.node(n).optimizer;
    for (double &t : m.p.host_node_time_s) t *= 1000;
    SwapBound slow = swap_lower_bound(m.p, HostUpdates::All);
    EXPECT_EQ(slow.limit, "host");
    EXPECT_NEAR(slow.time_s, updates * 2.0, 1e-9);
    // With auto the bound may keep updates on the device instead.
    EXPECT_LT(swap_lower_bound(m.p, HostUpdates::Auto).time_s, slow.time_s);
}

}  // namespace
}  // namespace tessera
