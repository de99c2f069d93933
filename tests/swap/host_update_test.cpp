// Host-side optimizer updates (after ZeRO-Offload): the planner's
// host-update steps, the simulator's host stream, and the checks that reject
// a host update racing with the swaps of what it reads and writes.
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "swap_problems.h"
#include "check_message.h"
#include "expect_error.h"
#include "tessera/error.h"
#include "tessera/program/memory_plan.h"
#include "tessera/swap/swap_plan.h"

namespace tessera {
namespace {

using test::check_message;
using test::error_of;

// An Adam-trained MLP: three [32, 32] weights, their biases.
struct AdamMlp {
    Graph g;
    SwapProblem problem;
};

void build_adam_mlp(AdamMlp &m) { m.problem = test::adam_swap_problem(m.g, test::mlp_loss(m.g, /*bias=*/true)); }

SwapPlan plan_with(const SwapProblem &p, HostUpdates h, int64_t budget) {
    SwapProblem q = p;
    q.budget = budget;
    SwapOptions o;
    o.host_updates = h;
    o.generations = 20;
    return plan_swaps(q, o);
}

int count_steps(const SwapPlan &plan, SwapStep::Kind kind) {
    int n = 0;
    for (const SwapStep &s : plan.steps) n += s.kind == kind;
    return n;
}

int optimizer_nodes(const Graph &g) {
    int n = 0;
    for (NodeId i = 0; i < g.num_nodes(); i++) n += g.node(i).optimizer;
    return n;
}

// With "all", every update runs on the host, the moments never cross the
// link, and the plan passes the verifier.
TEST(HostUpdates, MomentsNeverCrossTheLink) {
    AdamMlp m;
    build_adam_mlp(m);
    const int64_t budget = min_swap_budget(m.problem, HostUpdates::Off);
    SwapPlan host = plan_with(m.problem, HostUpdates::All, budget);
    SwapPlan device = plan_with(m.problem, HostUpdates::Off, budget);
    EXPECT_EQ(check_message(m.g, host), "passed");
    EXPECT_EQ(count_steps(host, SwapStep::Kind::HostUpdate), optimizer_nodes(m.g));
    EXPECT_EQ(count_steps(device, SwapStep::Kind::HostUpdate), 0);
    for (const SwapStep &s : host.steps) {
        if (s.kind == SwapStep::Kind::HostUpdate) {
            EXPECT_TRUE(m.g.node(s.node).optimizer);
            continue;
        }
        if (s.kind == SwapStep::Kind::Compute) {
            EXPECT_FALSE(m.g.node(s.node).optimizer) << m.g.node(s.node).call.name << " ran on the device";
            continue;
        }
        const std::string &name = m.g.tensor(s.tensor).name;
        EXPECT_EQ(name.find(".adam_"), std::string::npos) << name << " was moved";
    }
    // Each update's state (weight, two moments) moved both ways on the
    // device; on the host only the gradient goes out.
    EXPECT_LT(host.swap_in_bytes + host.swap_out_bytes, device.swap_in_bytes + device.swap_out_bytes);
    EXPECT_LT(host.time_s, device.time_s);
    EXPECT_EQ(swap_plan_from_json(swap_plan_to_json(host)), host);
}

// The host stream runs its updates one after another for their host times,
// and re-simulating keeps them.
TEST(HostUpdates, SimulatorCostsTheHostStream) {
    AdamMlp m;
    build_adam_mlp(m);
    for (NodeId n = 0; n < m.g.num_nodes(); n++)
        if (m.g.node(n).optimizer) m.problem.host_node_time_s[n] = 1.0;
    SwapPlan plan = plan_with(m.problem, HostUpdates::All, min_swap_budget(m.problem, HostUpdates::Off));
    double host_busy = 0;
    for (const SwapStep &s : plan.steps) {
        if (s.kind != SwapStep::Kind::HostUpdate) continue;
        EXPECT_DOUBLE_EQ(s.end_s - s.start_s, 1.0);
        host_busy += 1.0;
    }
    EXPECT_EQ(host_busy, optimizer_nodes(m.g));
    EXPECT_GE(plan.time_s, host_busy);
    EXPECT_DOUBLE_EQ(simulate_swap_plan(plan, m.problem.node_time_s, m.problem.h2d_bytes_per_s,
                                        m.problem.d2h_bytes_per_s),
                     plan.time_s);
}

// A budget below an update's working set on the device: an error without
// host updates, and that update on the host with auto.
TEST(HostUpdates, UpdatesThatCannotFitGoToTheHost) {
    AdamMlp m;
    build_adam_mlp(m);
    const int64_t on_device = min_swap_budget(m.problem, HostUpdates::Off);
    const int64_t with_host = min_swap_budget(m.problem, HostUpdates::Auto);
    ASSERT_LT(with_host, on_device);  // Adam's w, g, m, v is the largest working set
    EXPECT_NE(error_of([&] { plan_with(m.problem, HostUpdates::Off, with_host); }).find(".update' needs"),
              std::string::npos);
    SwapPlan plan = plan_with(m.problem, HostUpdates::Auto, with_host);
    EXPECT_EQ(check_message(m.g, plan), "passed");
    EXPECT_GT(count_steps(plan, SwapStep::Kind::HostUpdate), 0);
    // Without host times there are no host updates to choose.
    SwapProblem no_times = m.problem;
    no_times.host_node_time_s.clear();
    EXPECT_EQ(min_swap_budget(no_times, HostUpdates::Auto), on_device);
}

// The search's first population already overlaps host updates with the
// backward pass: with no generations and only the exact seeds (no random
// perturbation), a plan that may reorder runs some update before the last
// backward operator, and beats the best plan of the given order (every
// update after the backward pass, one after another on the host stream).
TEST(HostUpdates, SeedsRunUpdatesAsTheirGradientsAreReady) {
    AdamMlp m;
    build_adam_mlp(m);
    SwapProblem q = m.problem;
    q.budget = min_swap_budget(m.problem, HostUpdates::All);
    SwapOptions o;
    o.host_updates = HostUpdates::All;
    o.generations = 0;
    o.population = 6;
    o.reorder = false;
    SwapPlan given = plan_swaps(q, o);
    o.reorder = true;
    SwapPlan seeded = plan_swaps(q, o);
    EXPECT_EQ(check_message(m.g, seeded), "passed");
    int last_backward = -1, first_update = -1;
    for (size_t i = 0; i < seeded.steps.size(); i++) {
        const SwapStep &s = seeded.steps[i];
        if (s.kind == SwapStep::Kind::Compute && m.g.node(s.node).backward) last_backward = static_cast<int>(i);
        if (s.kind == SwapStep::Kind::HostUpdate && first_update < 0) first_update = static_cast<int>(i);
    }
    ASSERT_GE(first_update, 0);
    EXPECT_LT(first_update, last_backward);
    EXPECT_LT(seeded.time_s, given.time_s);
}

// A host update that no longer waits for its gradient's swap-out, and one
// whose gradient is never swapped out, are rejected, naming the step.
TEST(HostUpdates, CheckRejectsRacesOnHostMemory) {
    AdamMlp m;
    build_adam_mlp(m);
    SwapPlan plan = plan_with(m.problem, HostUpdates::All, min_swap_budget(m.problem, HostUpdates::Off));
    int broken = 0;
    for (size_t i = 0; i < plan.steps.size() && broken == 0; i++) {
        const SwapStep &s = plan.steps[i];
        if (s.kind != SwapStep::Kind::HostUpdate) continue;
        for (int a : s.after) {
            if (plan.steps[a].kind != SwapStep::Kind::SwapOut) continue;
            SwapPlan bad = plan;
            auto &after = bad.steps[i].after;
            after.erase(std::find(after.begin(), after.end(), a));
            std::string msg = check_message(m.g, bad);
            EXPECT_NE(msg.find("'" + m.g.node(s.node).call.name + "' on the host stream"), std::string::npos) << msg;
            EXPECT_NE(msg.find("would race"), std::string::npos) << msg;
            broken++;
            break;
        }
    }
    EXPECT_EQ(broken, 1);
    // The gradient's swap-out turned into nothing: the host copy is stale.
    for (size_t i = 0; i < plan.steps.size(); i++) {
        if (plan.steps[i].kind != SwapStep::Kind::HostUpdate) continue;
        const Node &node = m.g.node(plan.steps[i].node);
        SwapPlan bad = plan;
        for (SwapStep &s : bad.steps)
            if (s.kind == SwapStep::Kind::SwapOut && s.tensor == node.inputs[1]) s.kind = SwapStep::Kind::SwapIn;
        std::string msg = check_message(m.g, bad);
        EXPECT_NE(msg, "passed");
        break;
    }
}

TEST(HostUpdates, NamesAndErrors) {
    EXPECT_EQ(host_updates_from_name("auto"), HostUpdates::Auto);
    EXPECT_EQ(std::string(host_updates_name(HostUpdates::All)), "all");
    EXPECT_EQ(error_of([] { host_updates_from_name("sometimes"); }),
              "unknown host-updates setting 'sometimes'; valid: off, auto, all");
    AdamMlp m;
    build_adam_mlp(m);
    m.problem.host_node_time_s.pop_back();
    EXPECT_NE(error_of([&] { plan_with(m.problem, HostUpdates::All, 1 << 20); })
                  .find("host_node_time_s has " + std::to_string(m.g.num_nodes() - 1) + " entries"),
              std::string::npos);
    // A host update in a plan without host times is refused by the check.
    AdamMlp fresh;
    build_adam_mlp(fresh);
    SwapPlan plan = plan_with(fresh.problem, HostUpdates::All, min_swap_budget(fresh.problem, HostUpdates::Off));
    plan.host_node_time_s.clear();
    EXPECT_NE(check_message(fresh.g, plan).find("the plan has no host time for it"), std::string::npos);
}

}  // namespace
}  // namespace tessera
