// plan_swaps on the model zoo's training graphs at 1/2 to 1/12 of the memory
// the unconstrained run needs: every plan passes the independent checker, the
// genetic algorithm is at least as fast as both baselines, and the JSON
// round-trips. Also the errors for budgets that cannot work.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "swap_problems.h"
#include "tessera/error.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"
#include "tessera/program/memory_plan.h"
#include "tessera/swap/swap_plan.h"

namespace tessera {
namespace {

// Synthetic times: an operator streams the bytes it touches at 20 GB/s, plus
// a launch cost; host transfers run at 8 GB/s each way, so swapping matters.
constexpr double kComputeBytesPerS = 20e9, kLinkBytesPerS = 8e9, kLaunchS = 5e-6;

struct Case {
    std::string spec;
    int64_t batch;
    Graph g;
    int64_t footprint = 0;  // the unconstrained arena
    std::vector<double> times;
};

Case make_case(const std::string &spec, int64_t batch) {
    Case c{spec, batch, {}, 0, {}};
    Model m = build_model(spec, batch);
    c.g = std::move(m.graph);
    make_training_graph(c.g, m.loss, OptimizerConfig{});
    c.footprint = plan_memory(c.g, default_order(c.g)).arena_bytes;
    c.times.assign(c.g.num_nodes(), 0);
    for (NodeId n = 0; n < c.g.num_nodes(); n++) {
        int64_t bytes = 0;
        for (TensorId t : c.g.node(n).inputs) bytes += c.g.tensor(t).type.bytes();
        for (TensorId t : c.g.node(n).outputs) bytes += c.g.tensor(t).type.bytes();
        c.times[n] = kLaunchS + static_cast<double>(bytes) / kComputeBytesPerS;
    }
    return c;
}

SwapProblem problem_for(const Case &c, int64_t budget) {
    return test::timed_problem(c.g, c.times, budget, kLinkBytesPerS);
}

SwapOptions options_for(SwapPolicy policy) {
    SwapOptions o;
    o.policy = policy;
    o.population = 24;
    o.generations = 40;
    o.seed = 7;
    return o;
}

// The training graphs of the zoo, each with the memory ratios (footprint over
// budget) it can reach: one operator's inputs and outputs, in pools of
// fixed-size slots, must fit. Deep rather than wide models reach the higher
// ratios; the cnn (at most four conv stages) cannot go far below its footprint.
struct ModelCase {
    std::string spec;
    int64_t batch;
    std::vector<double> ratios;
};
const std::vector<ModelCase> kModels = {
    {"mlp:layers=40,hidden=256", 1024, {2, 4, 8, 12}},
    {"cnn:convs=3,channels=16,hidden=128", 64, {1.5, 2}},
    {"lstm:layers=4,hidden=64,seq=24,vocab=50", 32, {2, 4, 8, 11}},
    {"transformer:layers=8,d_model=64,heads=4,seq=32,vocab=100", 32, {2, 4, 8, 12}},
    {"wresnet:depth=34,width=1,image=16,base=8", 64, {2, 4, 8, 12}},
};

TEST(SwapPlan, ModelsAtBudgetRatios) {
    for (const ModelCase &mc : kModels) {
        const std::string &spec = mc.spec;
        Case c = make_case(spec, mc.batch);
        SwapPlan ideal = plan_swaps(problem_for(c, c.footprint), options_for(SwapPolicy::Ideal));
        check_swap_plan(c.g, ideal, spec + " ideal");
        EXPECT_EQ(ideal.swap_in_bytes + ideal.swap_out_bytes, 0);
        EXPECT_DOUBLE_EQ(ideal.time_s, ideal.ideal_time_s);
        int64_t min_budget = min_swap_budget(problem_for(c, c.footprint));
        std::printf("%-58s footprint %lld, smallest budget %lld (ratio %.1f)\n", spec.c_str(),
                    static_cast<long long>(c.footprint), static_cast<long long>(min_budget),
                    static_cast<double>(c.footprint) / static_cast<double>(min_budget));
        for (double ratio : mc.ratios) {
            int64_t budget = static_cast<int64_t>(static_cast<double>(c.footprint) / ratio);
            SCOPED_TRACE(spec + " at 1/" + std::to_string(ratio));
            ASSERT_GE(budget, min_budget) << "the model is too wide for this ratio; footprint " << c.footprint;
            SwapProblem pr = problem_for(c, budget);
            SwapPlan adv = plan_swaps(pr, options_for(SwapPolicy::Advisor));
            SwapPlan lru = plan_swaps(pr, options_for(SwapPolicy::Lru));
            SwapPlan vdnn = plan_swaps(pr, options_for(SwapPolicy::Vdnn));
            for (const SwapPlan *p : {&adv, &lru, &vdnn}) {
                check_swap_plan(c.g, *p, std::string(swap_policy_name(p->policy)));
                EXPECT_LE(p->high_water, budget);
                EXPECT_LE(p->peak_bytes, budget);
                EXPECT_EQ(p->arena_bytes, budget);
                EXPECT_GE(p->time_s, p->ideal_time_s * (1 - 1e-12));
                EXPECT_NEAR(p->ideal_time_s, ideal.time_s, 1e-12);
                EXPECT_DOUBLE_EQ(simulate_swap_plan(*p, c.times, kLinkBytesPerS, kLinkBytesPerS), p->time_s);
            }
            EXPECT_LE(adv.time_s, lru.time_s);
            EXPECT_LE(adv.time_s, vdnn.time_s);
            std::printf("%-58s 1/%-5.2f ideal/time: advisor %.3f  lru %.3f  vdnn %.3f  (%lld candidates, %.2f s)\n",
                        spec.c_str(), ratio, ideal.time_s / adv.time_s, ideal.time_s / lru.time_s,
                        ideal.time_s / vdnn.time_s, static_cast<long long>(adv.candidates), adv.search_s);
            // JSON through text and back.
            SwapPlan back = swap_plan_from_json(nlohmann::json::parse(swap_plan_to_json(adv).dump()));
            EXPECT_EQ(back, adv);
        }
    }
}

TEST(SwapPlan, SameSeedSamePlan) {
    Case c = make_case("transformer:layers=2,d_model=32,heads=2,seq=16,vocab=50", 8);
    SwapProblem pr = problem_for(c, c.footprint / 3);
    SwapPlan a = plan_swaps(pr, options_for(SwapPolicy::Advisor));
    SwapPlan b = plan_swaps(pr, options_for(SwapPolicy::Advisor));
    a.search_s = b.search_s = 0;
    EXPECT_EQ(a, b);
    SwapOptions other = options_for(SwapPolicy::Advisor);
    other.seed = 8;
    SwapPlan d = plan_swaps(pr, other);
    check_swap_plan(c.g, d);
}

// With host times for the optimizer's nodes: four times their device time.
SwapProblem problem_with_host_updates(const Case &c, int64_t budget) {
    SwapProblem pr = problem_for(c, budget);
    pr.host_node_time_s.assign(c.g.num_nodes(), 0.0);
    for (NodeId n = 0; n < c.g.num_nodes(); n++)
        if (c.g.node(n).optimizer) pr.host_node_time_s[n] = 4 * c.times[n];
    return pr;
}

// The advisor choosing recomputations and host updates.
SwapOptions recomputing_advisor() {
    SwapOptions o = options_for(SwapPolicy::Advisor);
    o.recompute = true;
    o.host_updates = HostUpdates::Auto;
    return o;
}

// Children are scored on several threads, each with its own scratch: with
// the search ended by its generations, any number of threads gives the plan
// one thread gives, with the same number of candidates scored.
TEST(SwapPlan, SameSeedSamePlanOnAnyNumberOfThreads) {
    Case c = make_case("transformer:layers=2,d_model=32,heads=2,seq=16,vocab=50", 8);
    SwapProblem pr = problem_with_host_updates(c, c.footprint / 4);
    SwapOptions o = recomputing_advisor();
    SwapPlan one = plan_swaps(pr, o);
    one.search_s = 0;
    int on_host = 0, recomputed = 0;
    for (const SwapStep &s : one.steps) {
        on_host += s.kind == SwapStep::Kind::HostUpdate;
        recomputed += s.kind == SwapStep::Kind::Recompute;
    }
    std::cout << on_host << " updates on the host, " << recomputed << " recomputations, " << one.candidates
              << " candidates\n";
    EXPECT_GT(one.candidates, 24);
    for (int threads : {2, 3, 8}) {
        o.threads = threads;
        SwapPlan many = plan_swaps(pr, o);
        many.search_s = 0;
        EXPECT_EQ(many, one) << threads << " threads";
        EXPECT_EQ(many.candidates, one.candidates) << threads << " threads";
    }
    check_swap_plan(c.g, one);
}

// The table's busy line: each stream's time, summed here over the plan's
// steps by their kind, and the first backward node's start.
TEST(SwapPlan, TableSaysWhereTheStepGoes) {
    Case c = make_case("transformer:layers=2,d_model=32,heads=2,seq=16,vocab=50", 8);
    SwapProblem pr = problem_with_host_updates(c, c.footprint / 4);
    SwapOptions o = recomputing_advisor();
    SwapPlan plan = plan_swaps(pr, o);
    double compute = 0, again = 0, out = 0, in = 0, host = 0, backward = -1;
    for (const SwapStep &s : plan.steps) {
        double d = s.end_s - s.start_s;
        if (s.kind == SwapStep::Kind::Compute) compute += d;
        if (s.kind == SwapStep::Kind::Recompute) again += d;
        if (s.kind == SwapStep::Kind::SwapOut) out += d;
        if (s.kind == SwapStep::Kind::SwapIn) in += d;
        if (s.kind == SwapStep::Kind::HostUpdate) host += d;
        if (s.kind == SwapStep::Kind::Compute && backward < 0 && c.g.node(s.node).backward) backward = s.start_s;
    }
    ASSERT_GT(host, 0);
    ASSERT_GT(in, 0);
    ASSERT_GT(backward, 0);
    auto share = [&](const char *what, double t) {
        return fmt::format("{} {:.3f} ms ({:.0f}%)", what, t * 1e3, 100 * t / plan.time_s);
    };
    std::string want = "busy: " + share("compute", compute + again);
    if (again > 0) want += fmt::format(" of which recomputing {:.3f} ms", again * 1e3);
    want += ", " + share("swap-out", out) + ", " + share("swap-in", in) + ", " + share("host", host) +
            fmt::format("; the backward pass starts at {:.3f} ms\n", backward * 1e3);
    std::string table = swap_plan_table(c.g, plan);
    EXPECT_NE(table.find(want), std::string::npos) << "want: " << want << "table:\n" << table;
}

// The budget errors name the operator whose inputs and outputs do not fit.
TEST(SwapPlan, BudgetBelowTheMinimumThrows) {
    Case c = make_case("mlp:layers=2,hidden=64", 32);
    SwapProblem pr = problem_for(c, c.footprint);
    int64_t min_budget = min_swap_budget(pr);
    // An independent lower bound: every node's distinct storage, aligned.
    int64_t largest = 0;
    std::string worst;
    for (NodeId n = 0; n < c.g.num_nodes(); n++) {
        std::vector<TensorId> roots;
        for (TensorId t : c.g.node(n).inputs) roots.push_back(storage_root(c.g, t));
        for (TensorId t : c.g.node(n).outputs) roots.push_back(storage_root(c.g, t));
        std::sort(roots.begin(), roots.end());
        roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
        int64_t ws = 0;
        for (TensorId r : roots) ws += std::max<int64_t>(64, (c.g.tensor(r).type.bytes() + 63) / 64 * 64);
        if (ws > largest) {
            largest = ws;
            worst = c.g.node(n).call.name;
        }
    }
    EXPECT_GE(min_budget, largest);
    pr.budget = largest - 64;
    try {
        plan_swaps(pr);
        FAIL() << "expected an error";
    } catch (const Error &e) {
        std::string m = e.what();
        EXPECT_NE(m.find("cannot work: operator '" + worst + "' needs"), std::string::npos) << m;
        EXPECT_NE(m.find("for its inputs and outputs ("), std::string::npos) << m;
        EXPECT_NE(m.find("the smallest budget that can is"), std::string::npos) << m;
        EXPECT_NE(m.find("(" + std::to_string(min_budget) + " bytes)"), std::string::npos) << m;
    }
    for (SwapPolicy p : {SwapPolicy::Advisor, SwapPolicy::Lru, SwapPolicy::Vdnn}) {
        pr.budget = min_budget - 1;
        EXPECT_THROW(plan_swaps(pr, options_for(p)), Error);
        pr.budget = min_budget;
        SwapPlan plan = plan_swaps(pr, options_for(p));
        check_swap_plan(c.g, plan);
        EXPECT_LE(plan.high_water, min_budget);
    }
}

TEST(SwapPlan, MalformedProblemsThrow) {
    Case c = make_case("mlp:layers=2,hidden=64", 8);
    auto message = [&](SwapProblem pr, SwapOptions o = {}) -> std::string {
        try {
            plan_swaps(pr, o);
        } catch (const Error &e) {
            return e.what();
        }
        return "no error";
    };
    SwapProblem pr = problem_for(c, c.footprint);
    SwapProblem bad = pr;
    bad.graph = nullptr;
    EXPECT_NE(message(bad).find("no graph"), std::string::npos);
    bad = pr;
    bad.node_time_s.pop_back();
    EXPECT_NE(message(bad).find("node_time_s has"), std::string::npos);
    bad = pr;
    std::swap(bad.order[0], bad.order[1]);
    EXPECT_NE(message(bad).find("not topological"), std::string::npos) << message(bad);
    bad = pr;
    bad.order.push_back(bad.order[0]);
    EXPECT_NE(message(bad).find("appears twice"), std::string::npos);
    bad = pr;
    bad.budget = 0;
    EXPECT_NE(message(bad).find("the budget must be positive"), std::string::npos);
    bad = pr;
    bad.h2d_bytes_per_s = 0;
    EXPECT_NE(message(bad).find("host-to-device bandwidth must be positive"), std::string::npos);
    bad = pr;
    bad.node_time_s[bad.order[0]] = -1;
    EXPECT_NE(message(bad).find("times must be finite and non-negative"), std::string::npos);
    SwapOptions o;
    o.population = 1;
    EXPECT_NE(message(pr, o).find("population must be at least 2"), std::string::npos);
    o.population = 2;
    o.threads = 65;
    EXPECT_NE(message(pr, o).find("threads must be between 1 and 64, got 65"), std::string::npos);
    o.threads = 1;
    o.patience = -1;
    EXPECT_NE(message(pr, o).find("patience must be non-negative, got -1"), std::string::npos);
    EXPECT_EQ(swap_policy_from_name("vdnn"), SwapPolicy::Vdnn);
    try {
        swap_policy_from_name("fifo");
        FAIL();
    } catch (const Error &e) {
        EXPECT_EQ(std::string(e.what()), "unknown swap policy 'fifo'; valid: advisor, lru, vdnn, ideal");
    }
}

TEST(SwapPlan, JsonErrorsNameTheField) {
    Case c = make_case("mlp:layers=2,hidden=64", 8);
    SwapProblem pr = problem_for(c, c.footprint);
    pr.budget = min_swap_budget(pr);
    SwapPlan plan = plan_swaps(pr, options_for(SwapPolicy::Lru));
    nlohmann::json j = swap_plan_to_json(plan);
    EXPECT_EQ(swap_plan_from_json(j), plan);
    nlohmann::json bad = j;
    bad.erase("pools");
    try {
        swap_plan_from_json(bad, "plan.json");
        FAIL();
    } catch (const Error &e) {
        EXPECT_EQ(std::string(e.what()), "plan.json: the plan has no 'pools'");
    }
    bad = j;
    bad["steps"][0]["kind"] = "teleport";
    try {
        swap_plan_from_json(bad, "plan.json");
        FAIL();
    } catch (const Error &e) {
        EXPECT_EQ(std::string(e.what()),
                  "plan.json: steps[0]: unknown step kind 'teleport'; valid: compute, swap-out, swap-in, host-update, recompute");
    }
    bad = j;
    bad["arena_bytes"] = "lots";
    try {
        swap_plan_from_json(bad, "plan.json");
        FAIL();
    } catch (const Error &e) {
        EXPECT_EQ(std::string(e.what()), "plan.json: the plan: 'arena_bytes' has the wrong type (\"lots\")");
    }
    std::string table = swap_plan_table(c.g, plan);
    EXPECT_NE(table.find("swap plan (lru)"), std::string::npos) << table;
    EXPECT_NE(table.find("swap-in"), std::string::npos) << table;
}

}  // namespace
}  // namespace tessera
