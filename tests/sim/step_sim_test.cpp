// The whole-step simulator (tessera/sim/step_sim.h): hand-built programs whose
// times are worked out by hand in each test, the error messages, and an MLP
// lowered over two ranks, checked against sums computed here from the
// programs and the communication nodes' attributes.
#include "tessera/sim/step_sim.h"

#include <cmath>
#include <limits>
#include <map>

#include <gtest/gtest.h>

#include "expect_error.h"
#include "tessera/graph/comm_attrs.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"
#include "tessera/partition/lower.h"
#include "tessera/partition/partition.h"
#include "tessera/program/memory_plan.h"
#include "tessera/swap/swap_plan.h"
#include "tessera/swap/swap_program.h"

namespace tessera {
namespace {

using test::expect_error;

constexpr double kTol = 1e-9;

// One level of `count` devices.
Machine flat(int count, double bandwidth, double latency) {
    return Machine{"test", {LinkLevel{"gpu", count, bandwidth, latency}}};
}

TensorId data(Graph &g, const std::string &name, int64_t n = 4) {
    return g.add_data(name, TensorType{DType::F32, {n}});
}

// A relu named `name`; its node is the graph's last.
TensorId relu(Graph &g, const std::string &name, TensorId in) {
    return g.add_node(OpCall{OpKind::Relu, name, {}}, {in})[0];
}

TensorId comm(Graph &g, const std::string &name, const CommAttrs &a, TensorId in) {
    return g.add_comm_node(name, comm_attrs_to(a), {in}, g.tensor(in).type, TensorRole::Activation);
}

CommAttrs all_reduce(std::vector<int> ranks, int64_t bytes) {
    CommAttrs a;
    a.ranks = std::move(ranks);
    a.bytes = bytes;
    return a;
}

// Node times by name; every other node takes no time.
std::vector<double> times(const Graph &g, const std::map<std::string, double> &by_name) {
    std::vector<double> t(g.num_nodes(), 0);
    for (NodeId n = 0; n < g.num_nodes(); n++)
        if (auto it = by_name.find(g.node(n).call.name); it != by_name.end()) t[n] = it->second;
    return t;
}

Program program_of(const Graph &g) { return build_program(g, default_order(g)); }

// The instruction index of node `name` in `p`.
int instruction_of(const Graph &g, const Program &p, const std::string &name) {
    for (size_t i = 0; i < p.instructions.size(); i++)
        if (p.instructions[i].node != kNoNode && g.node(p.instructions[i].node).call.name == name)
            return static_cast<int>(i);
    ADD_FAILURE() << "no instruction runs '" << name << "'";
    return 0;
}

TEST(StepSim, ComputeChainAddsNodeTimes) {
    Graph g;
    relu(g, "c", relu(g, "b", relu(g, "a", data(g, "x"))));
    const Program p = program_of(g);
    StepSimOptions opt;
    opt.batch = 12;
    StepPrediction s = simulate_step({{&g, &p, times(g, {{"a", 1}, {"b", 2}, {"c", 3}})}}, opt);
    EXPECT_NEAR(s.step_s, 6, kTol);
    EXPECT_NEAR(s.ranks[0].compute_s, 6, kTol);
    EXPECT_NEAR(s.ranks[0].exposed_comm_s + s.ranks[0].exposed_swap_s + s.ranks[0].idle_s, 0, kTol);
    EXPECT_NEAR(s.throughput, 2, kTol);
    const InstructionTime b = s.ranks[0].times[instruction_of(g, p, "b")];
    EXPECT_NEAR(b.start_s, 1, kTol);
    EXPECT_NEAR(b.end_s, 3, kTol);

    opt.instruction_overhead_s = 0.5;  // three instructions (the program has no events)
    s = simulate_step({{&g, &p, times(g, {{"a", 1}, {"b", 2}, {"c", 3}})}}, opt);
    EXPECT_NEAR(s.step_s, 7.5, kTol);
}

// Swap in x (100 bytes), record; node 0; wait for the swap-in; node 1 (making
// y), record; on the swap-out stream, wait for it and swap y out (300 bytes).
Program swap_in_compute_swap_out(TensorId x, TensorId y) {
    Program p;
    p.num_events = 2;
    p.instructions = {Instruction::swap_in(x, 0, 0, 100), Instruction::record(0, StreamKind::SwapIn),
                      Instruction::compute(0),
                      Instruction::wait(0, StreamKind::Compute),
                      Instruction::compute(1),
                      Instruction::record(1, StreamKind::Compute),
                      Instruction::wait(1, StreamKind::SwapOut),
                      Instruction::swap_out(y, 0, 300)};
    return p;
}

// swap-in x (100 bytes at 50 bytes/s: 2 s) | a (1 s), wait for the swap-in,
// b (1 s) | then y swapped out (300 bytes at 100 bytes/s: 3 s) after b. Then
// the same with its swaps' measured times.
TEST(StepSim, ComputeWaitsForASwapIn) {
    Graph g;
    const TensorId x = data(g, "x");
    const TensorId y = relu(g, "b", relu(g, "a", x));
    const Program p = swap_in_compute_swap_out(x, y);
    StepSimOptions opt;
    opt.swap_in_bandwidth = 50;
    opt.swap_out_bandwidth = 100;
    const StepPrediction s = simulate_step({{&g, &p, times(g, {{"a", 1}, {"b", 1}})}}, opt);
    const RankStepTime &r = s.ranks[0];
    EXPECT_NEAR(r.times[0].end_s, 2, kTol);  // the swap-in
    EXPECT_NEAR(r.times[4].start_s, 2, kTol);  // b, after the wait
    EXPECT_NEAR(r.times[7].start_s, 3, kTol);  // the swap-out, after b
    EXPECT_NEAR(r.step_s, 6, kTol);
    EXPECT_NEAR(r.compute_s, 2, kTol);
    EXPECT_NEAR(r.exposed_swap_s, 1, kTol);
    EXPECT_NEAR(r.exposed_comm_s, 0, kTol);
    EXPECT_NEAR(r.idle_s, 3, kTol);  // the swap-out after the compute stream is done

    // The swaps timed in a real step (the swap-in 0.5 s, the swap-out 0.25 s,
    // in place of 2 s and 3 s) and an overhead of 0.125 s on every instruction
    // but a wait: swap-in 0 to 0.625, its record to 0.75; a 0 to 1.125; b from
    // 1.125 to 2.25 (the wait past the record), its record to 2.375; the
    // swap-out from 2.375 to 2.75.
    opt.instruction_overhead_s = 0.125;
    RankProgram rp{&g, &p, times(g, {{"a", 1}, {"b", 1}})};
    rp.transfer_s = {0.5, 0, 0, 0, 0, 0, 0, 0.25};
    const RankStepTime m = simulate_step({rp}, opt).ranks[0];
    EXPECT_NEAR(m.times[0].end_s, 0.625, kTol);
    EXPECT_NEAR(m.times[1].end_s, 0.75, kTol);
    EXPECT_NEAR(m.times[4].start_s, 1.125, kTol);
    EXPECT_NEAR(m.times[5].end_s, 2.375, kTol);
    EXPECT_NEAR(m.times[7].start_s, 2.375, kTol);
    EXPECT_NEAR(m.step_s, 2.75, kTol);
}

// The gaps measured before each instruction in a real step (its stream
// getting to it) come first, and nothing is stretched or added on top. Same
// program, transfers measured (0.5 s in, 0.25 s out), no fixed overhead:
// the swap-in runs from its 0.1 s gap to 0.6, its record at 0.6; a ends at
// 0.2 + 1 = 1.2; the wait reaches its record at 1.2 + 0.3 = 1.5, past 0.6;
// b ends at 1.5 + 0.05 + 1 = 2.55, its record there; the swap-out stream's
// wait (gap 0.15) ends at that record, 2.55; the swap-out at 2.55 + 0.1 +
// 0.25 = 2.9.
TEST(StepSim, MeasuredGapsComeBeforeTheirInstructions) {
    Graph g;
    const TensorId x = data(g, "x");
    const TensorId y = relu(g, "b", relu(g, "a", x));
    const Program p = swap_in_compute_swap_out(x, y);
    StepSimOptions opt;
    opt.swap_in_bandwidth = opt.swap_out_bandwidth = 1;
    RankProgram rp{&g, &p, times(g, {{"a", 1}, {"b", 1}})};
    rp.transfer_s = {0.5, 0, 0, 0, 0, 0, 0, 0.25};
    rp.gap_s = {0.1, 0, 0.2, 0.3, 0.05, 0, 0.15, 0.1};
    const RankStepTime m = simulate_step({rp}, opt).ranks[0];
    EXPECT_NEAR(m.times[0].end_s, 0.6, kTol);
    EXPECT_NEAR(m.times[1].end_s, 0.6, kTol);
    EXPECT_NEAR(m.times[2].end_s, 1.2, kTol);
    EXPECT_NEAR(m.times[3].end_s, 1.5, kTol);
    EXPECT_NEAR(m.times[4].end_s, 2.55, kTol);
    EXPECT_NEAR(m.times[6].end_s, 2.55, kTol);
    EXPECT_NEAR(m.step_s, 2.9, kTol);
}

// Swap-in x (100 bytes) | node 0 | wait for the swap-in | node 1.
Program swap_in_beside_compute(TensorId x) {
    Program p;
    p.num_events = 1;
    p.instructions = {Instruction::swap_in(x, 0, 0, 100), Instruction::record(0, StreamKind::SwapIn),
                      Instruction::compute(0), Instruction::wait(0, StreamKind::Compute), Instruction::compute(1)};
    return p;
}

// A CPU rank's streams share its cores. a (4 s) runs beside a swap-in of x
// (100 bytes at 50 bytes/s: 2 s alone); b (1 s) waits for the swap-in. On one
// core both run at half speed: the swap-in ends at 4 s, having had half the
// core; a has done 2 s of its work by then and ends at 6 s alone; b runs from
// 6 to 7 s. On two cores, or with no core model, they do not slow each other:
// the swap-in ends at 2 s, a at 4 s, and b runs from 4 to 5 s.
TEST(StepSim, InstructionsOfARankShareItsCores) {
    Graph g;
    const TensorId x = data(g, "x");
    relu(g, "a", data(g, "w"));
    relu(g, "b", x);
    const Program p = swap_in_beside_compute(x);
    StepSimOptions opt;
    opt.swap_in_bandwidth = 50;
    const std::vector<double> t = times(g, {{"a", 4}, {"b", 1}});
    struct Case { double cores, swap_end, a_end, step; };
    for (Case c : {Case{1, 4, 6, 7}, Case{2, 2, 4, 5}, Case{0, 2, 4, 5}}) {
        opt.cores_per_rank = c.cores;
        const RankStepTime r = simulate_step({{&g, &p, t}}, opt).ranks[0];
        EXPECT_NEAR(r.times[0].end_s, c.swap_end, 1e-3) << c.cores << " cores";
        EXPECT_NEAR(r.times[2].end_s, c.a_end, 1e-3) << c.cores << " cores";
        EXPECT_NEAR(r.step_s, c.step, 1e-3) << c.cores << " cores";
        EXPECT_NEAR(r.compute_s + r.exposed_swap_s + r.exposed_comm_s + r.idle_s, r.step_s, kTol);
    }
}

// A measured hand-off delays the stream after its wait: b starts 0.25 s after
// the swap-in ends (2 s). A wait that was not blocked pays its hand-off too.
TEST(StepSim, AWaitTakesItsHandOff) {
    Graph g;
    const TensorId x = data(g, "x");
    relu(g, "b", relu(g, "a", x));
    const Program p = swap_in_beside_compute(x);
    StepSimOptions opt;
    opt.swap_in_bandwidth = 50;
    const std::vector<double> t = times(g, {{"a", 1}, {"b", 1}});
    std::vector<double> wait(p.instructions.size(), 0);
    wait[3] = 0.25;
    RankStepTime r = simulate_step({{&g, &p, t, wait}}, opt).ranks[0];
    EXPECT_NEAR(r.times[4].start_s, 2.25, kTol);
    EXPECT_NEAR(r.step_s, 3.25, kTol);
    EXPECT_NEAR(r.exposed_swap_s, 1.25, kTol);
    opt.swap_in_bandwidth = 1000;  // the swap-in ends at 0.1 s, before a does
    r = simulate_step({{&g, &p, t, wait}}, opt).ranks[0];
    EXPECT_NEAR(r.times[4].start_s, 1.25, kTol);
    wait.pop_back();
    expect_error([&] { simulate_step({{&g, &p, t, wait}}, opt); },
                 "rank 0 was given 4 hand-off times, but its program has 5 instructions");
    wait = {0, 0, 0, -1, 0};
    expect_error([&] { simulate_step({{&g, &p, t, wait}}, opt); }, "has a hand-off time of -1 s");
}

// x -> a -> all-reduce "ar" over ranks {0, 1} -> b, on two ranks.
Graph all_reduce_graph(int64_t bytes) {
    Graph g;
    relu(g, "b", comm(g, "ar", all_reduce({0, 1}, bytes), relu(g, "a", data(g, "x"))));
    return g;
}

// Rank 1 reaches the all-reduce 2 s after rank 0; it takes 2 x 0.1 s of
// latency + 200 bytes / 100 bytes/s = 2.2 s from then on both.
TEST(StepSim, AllReduceStartsWhenTheSlowerRankArrives) {
    const Graph g = all_reduce_graph(200);
    const Program p = program_of(g);
    StepSimOptions opt;
    opt.machine = flat(2, 100, 0.1);
    opt.batch = 62;
    const StepPrediction s = simulate_step(
        {{&g, &p, times(g, {{"a", 1}, {"b", 1}})}, {&g, &p, times(g, {{"a", 3}, {"b", 1}})}}, opt);
    const int ar = instruction_of(g, p, "ar");
    for (int r = 0; r < 2; r++) {
        EXPECT_NEAR(s.ranks[r].times[ar].start_s, 3, kTol) << "rank " << r;
        EXPECT_NEAR(s.ranks[r].times[ar].end_s, 5.2, kTol) << "rank " << r;
        EXPECT_NEAR(s.ranks[r].step_s, 6.2, kTol) << "rank " << r;
    }
    EXPECT_NEAR(s.ranks[0].compute_s, 2, kTol);
    EXPECT_NEAR(s.ranks[0].exposed_comm_s, 4.2, kTol);  // from a's end at 1 to 5.2
    EXPECT_NEAR(s.ranks[1].compute_s, 4, kTol);
    EXPECT_NEAR(s.ranks[1].exposed_comm_s, 2.2, kTol);
    EXPECT_NEAR(s.step_s, 6.2, kTol);
    EXPECT_NEAR(s.throughput, 10, kTol);
}

// Measured collectives: rank 0 timed the all-reduce at 2.5 s (it arrived at
// 1 s and waited 2 s for rank 1), rank 1 at 0.5 s (it arrived last). The
// collective takes the lesser, 0.5 s, from rank 1's arrival at 3 s, in place
// of the link model's 2.2 s; when one member has no time, the model again.
TEST(StepSim, MeasuredCollectiveTakesItsLastMembersTime) {
    const Graph g = all_reduce_graph(200);
    const Program p = program_of(g);
    StepSimOptions opt;
    opt.machine = flat(2, 100, 0.1);
    const int ar = instruction_of(g, p, "ar");
    std::vector<double> c0(p.instructions.size(), 0), c1 = c0;
    c0[ar] = 2.5;
    c1[ar] = 0.5;
    std::vector<RankProgram> ranks = {{&g, &p, times(g, {{"a", 1}, {"b", 1}})},
                                      {&g, &p, times(g, {{"a", 3}, {"b", 1}})}};
    ranks[0].transfer_s = c0;
    ranks[1].transfer_s = c1;
    StepPrediction s = simulate_step(ranks, opt);
    for (int r = 0; r < 2; r++) {
        EXPECT_NEAR(s.ranks[r].times[ar].start_s, 3, kTol) << "rank " << r;
        EXPECT_NEAR(s.ranks[r].times[ar].end_s, 3.5, kTol) << "rank " << r;
    }
    EXPECT_NEAR(s.step_s, 4.5, kTol);
    ranks[1].transfer_s.clear();
    s = simulate_step(ranks, opt);
    EXPECT_NEAR(s.ranks[0].times[ar].end_s, 5.2, kTol);
    ranks[1].transfer_s = {0, 0};
    expect_error([&] { simulate_step(ranks, opt); },
                 "rank 1 was given 2 transfer times, but its program has " + std::to_string(c1.size()));
    ranks[1].transfer_s = c1;
    ranks[1].transfer_s[ar] = std::numeric_limits<double>::quiet_NaN();
    expect_error([&] { simulate_step(ranks, opt); }, "rank 1 has a transfer time of nan s");
}

// 2 nodes x 2 GPUs. Three all-reduces of 1000 bytes in a row: inside a node
// (2 x 0.01 s + 1000 / 100 = 10.02 s), across the nodes between the same GPU
// index (2 x 1 s + 1000 / 10 = 102 s), and over all four (6 x 1 s + 100 s = 106 s).
TEST(StepSim, GroupSpanningNodesUsesTheNodeLink) {
    Machine m{"2x2", {LinkLevel{"node", 2, 10, 1}, LinkLevel{"gpu", 2, 100, 0.01}}};
    std::vector<Graph> graphs(4);
    std::vector<Program> programs;
    std::vector<RankProgram> ranks;
    for (int r = 0; r < 4; r++) {
        Graph &g = graphs[r];
        TensorId t = relu(g, "a", data(g, "x"));
        t = comm(g, "in_node", all_reduce({r / 2 * 2, r / 2 * 2 + 1}, 1000), t);
        t = comm(g, "across", all_reduce({r % 2, r % 2 + 2}, 1000), t);
        t = comm(g, "all", all_reduce({0, 1, 2, 3}, 1000), t);
        relu(g, "b", t);
        programs.push_back(program_of(g));
    }
    for (int r = 0; r < 4; r++) ranks.push_back({&graphs[r], &programs[r], times(graphs[r], {})});
    StepSimOptions opt;
    opt.machine = m;
    const StepPrediction s = simulate_step(ranks, opt);
    for (int r = 0; r < 4; r++) {
        const auto span = [&](const char *name) {
            const InstructionTime t = s.ranks[r].times[instruction_of(graphs[r], programs[r], name)];
            return t.end_s - t.start_s;
        };
        EXPECT_NEAR(span("in_node"), 10.02, kTol) << "rank " << r;
        EXPECT_NEAR(span("across"), 102, kTol) << "rank " << r;
        EXPECT_NEAR(span("all"), 106, kTol) << "rank " << r;
        EXPECT_NEAR(s.ranks[r].step_s, 218.02, 1e-7) << "rank " << r;
        EXPECT_NEAR(s.ranks[r].exposed_comm_s, 218.02, 1e-7) << "rank " << r;
    }
}

// a (1 s) -> all-reduce (2.2 s) -> b (1 s), and c (on x, independent) between
// the all-reduce and b in the order: the all-reduce runs beside c.
StepPrediction overlap_run(double c_seconds) {
    Graph g;
    const TensorId x = data(g, "x");
    const TensorId ar = comm(g, "ar", all_reduce({0, 1}, 200), relu(g, "a", x));
    relu(g, "c", x);
    relu(g, "b", ar);
    const Program p = program_of(g);
    StepSimOptions opt;
    opt.machine = flat(2, 100, 0.1);
    const std::vector<double> t = times(g, {{"a", 1}, {"b", 1}, {"c", c_seconds}});
    return simulate_step({{&g, &p, t}, {&g, &p, t}}, opt);
}

TEST(StepSim, CommunicationHidesBehindIndependentCompute) {
    // c ends at 6, after the all-reduce (1 to 3.2): nothing exposed.
    StepPrediction s = overlap_run(5);
    EXPECT_NEAR(s.step_s, 7, kTol);
    EXPECT_NEAR(s.ranks[0].compute_s, 7, kTol);
    EXPECT_NEAR(s.ranks[0].exposed_comm_s, 0, kTol);
    // c ends at 1.5: b waits until 3.2.
    s = overlap_run(0.5);
    EXPECT_NEAR(s.step_s, 4.2, kTol);
    EXPECT_NEAR(s.ranks[0].compute_s, 2.5, kTol);
    EXPECT_NEAR(s.ranks[0].exposed_comm_s, 1.7, kTol);
    EXPECT_NEAR(s.ranks[0].idle_s, 0, kTol);
}

// A reduce-scatter over 3 ranks: (3 - 1) x 0.1 s + the most any member sends
// (600 bytes) / 100 bytes/s = 6.2 s.
TEST(StepSim, ReduceScatterTakesKMinusOneSteps) {
    std::vector<Graph> graphs(3);
    std::vector<Program> programs;
    std::vector<RankProgram> ranks;
    for (int r = 0; r < 3; r++) {
        CommAttrs a;
        a.kind = CommNodeKind::ReduceScatter;
        a.ranks = {0, 1, 2};
        a.bytes = r == 2 ? 600 : 300;
        a.chunks = {Box{{0}, {1}}, Box{{1}, {2}}, Box{{2}, {3}}};
        Graph &g = graphs[r];
        const TensorId x = data(g, "x", 3);
        g.add_comm_node("rs", comm_attrs_to(a), {x}, TensorType{DType::F32, {1}}, TensorRole::Activation);
        programs.push_back(program_of(g));
    }
    for (int r = 0; r < 3; r++) ranks.push_back({&graphs[r], &programs[r], times(graphs[r], {})});
    StepSimOptions opt;
    opt.machine = flat(3, 100, 0.1);
    const StepPrediction s = simulate_step(ranks, opt);
    for (int r = 0; r < 3; r++) EXPECT_NEAR(s.ranks[r].step_s, 6.2, kTol) << "rank " << r;
}

// Three ranks redistribute: rank 0 sends 25 floats (100 bytes) to rank 1, and
// rank 2 sends 50 floats (200 bytes) to rank 0, both in round 1 (r -> r+1).
// Ranks arrive at 0, 1 and 2 s. 0 -> 1 starts at 1 and ends at 1 + 0.1 + 1 =
// 2.1; 2 -> 0 starts at 2 and ends at 2 + 0.1 + 2 = 4.1. Then b (1 s).
TEST(StepSim, RedistributeRunsPairwiseRounds) {
    std::vector<Graph> graphs(3);
    std::vector<Program> programs;
    std::vector<RankProgram> ranks;
    for (int r = 0; r < 3; r++) {
        CommAttrs a;
        a.kind = CommNodeKind::Redistribute;
        a.world = 3;
        if (r == 0) a.sends = {{1, Box{{0}, {25}}}};
        if (r == 2) a.sends = {{0, Box{{0}, {50}}}};
        if (r == 0) a.recvs = {{2, Box{{0}, {50}}}};
        if (r == 1) a.recvs = {{0, Box{{0}, {25}}}};
        a.bytes = r == 0 ? 100 : r == 2 ? 200 : 0;
        Graph &g = graphs[r];
        relu(g, "b", comm(g, "move", a, relu(g, "a", data(g, "x", 100))));
        programs.push_back(program_of(g));
    }
    for (int r = 0; r < 3; r++) ranks.push_back({&graphs[r], &programs[r], times(graphs[r], {{"a", r}, {"b", 1}})});
    StepSimOptions opt;
    opt.machine = flat(3, 100, 0.1);
    const StepPrediction s = simulate_step(ranks, opt);
    const double start[] = {1, 1, 2}, end[] = {4.1, 2.1, 4.1};
    for (int r = 0; r < 3; r++) {
        const InstructionTime t = s.ranks[r].times[instruction_of(graphs[r], programs[r], "move")];
        EXPECT_NEAR(t.start_s, start[r], kTol) << "rank " << r;
        EXPECT_NEAR(t.end_s, end[r], kTol) << "rank " << r;
        EXPECT_NEAR(s.ranks[r].step_s, end[r] + 1, kTol) << "rank " << r;
    }
    EXPECT_EQ(s.slowest_rank, 0);
}

// 2 nodes x 2 GPUs: rank 0 sends 100 floats (400 bytes) to rank 1 in round 1
// (inside its node: 0.01 + 400 / 100 = 4.01 s) and to rank 2 in round 2
// (across the nodes: 1 + 400 / 10 = 41 s, from 4.01, when rank 0 reaches round
// 2). Rank 3 takes part in nothing.
TEST(StepSim, RedistributeChargesEachPairItsOwnLink) {
    std::vector<Graph> graphs(4);
    std::vector<Program> programs;
    std::vector<RankProgram> ranks;
    for (int r = 0; r < 4; r++) {
        CommAttrs a;
        a.kind = CommNodeKind::Redistribute;
        a.world = 4;
        if (r == 0) a.sends = {{1, Box{{0}, {100}}}, {2, Box{{100}, {200}}}};
        if (r == 1 || r == 2) a.recvs = {{0, Box{{0}, {100}}}};
        a.bytes = r == 0 ? 800 : 0;
        Graph &g = graphs[r];
        comm(g, "move", a, data(g, "x", 200));
        programs.push_back(program_of(g));
    }
    for (int r = 0; r < 4; r++) ranks.push_back({&graphs[r], &programs[r], times(graphs[r], {})});
    StepSimOptions opt;
    opt.machine = Machine{"2x2", {LinkLevel{"node", 2, 10, 1}, LinkLevel{"gpu", 2, 100, 0.01}}};
    const StepPrediction s = simulate_step(ranks, opt);
    const double end[] = {45.01, 4.01, 45.01, 0};
    for (int r = 0; r < 4; r++) EXPECT_NEAR(s.ranks[r].step_s, end[r], 1e-9) << "rank " << r;
    EXPECT_NEAR(s.ranks[2].times[0].start_s, 4.01, 1e-9);
}

TEST(StepSimError, RankCountMustMatchTheMachine) {
    Graph g;
    relu(g, "a", data(g, "x"));
    const Program p = program_of(g);
    StepSimOptions opt;
    opt.machine = flat(2, 100, 0);
    expect_error([&] { simulate_step({{&g, &p, {1}}}, opt); }, "has 2 devices, but 1 ranks' programs were given");
}

TEST(StepSimError, OneTimePerNode) {
    Graph g;
    relu(g, "b", relu(g, "a", data(g, "x")));
    const Program p = program_of(g);
    expect_error([&] { simulate_step({{&g, &p, {1}}}, {}); },
                 "rank 0 was given 1 node times, but its graph has 2 nodes");
    expect_error([&] { simulate_step({{&g, &p, {1, -1}}}, {}); }, "node 'b' has time -1 s");
}

TEST(StepSimError, OneGapPerInstruction) {
    Graph g;
    relu(g, "a", data(g, "x"));
    const Program p = program_of(g);
    RankProgram rp{&g, &p, {1}};
    rp.gap_s = {0.1, 0.2};
    expect_error([&] { simulate_step({rp}, {}); }, "rank 0 was given 2 gap times, but its program has 1 instructions");
    rp.gap_s = {-1};
    expect_error([&] { simulate_step({rp}, {}); }, "rank 0 has a gap time of -1 s");
}

TEST(StepSimError, SwapNeedsABandwidth) {
    Graph g;
    const TensorId x = data(g, "x");
    relu(g, "a", x);
    Program p;
    p.instructions = {Instruction::swap_in(x, 0, 0, 100)};
    expect_error([&] { simulate_step({{&g, &p, {1}}}, {}); }, "the swap-in (host to device) bandwidth is 0");
}

TEST(StepSimError, AMemberWithoutTheCollectiveIsADeadlock) {
    const Graph g0 = all_reduce_graph(200);
    Graph g1;
    relu(g1, "b", relu(g1, "a", data(g1, "x")));
    const Program p0 = program_of(g0), p1 = program_of(g1);
    StepSimOptions opt;
    opt.machine = flat(2, 100, 0);
    expect_error([&] { simulate_step({{&g0, &p0, {1, 1, 1}}, {&g1, &p1, {1, 1}}}, opt); },
                 "deadlock: communication node 'ar' (all_reduce over ranks [0,1]) runs on ranks [0], but ranks [1] "
                 "never run it");
}

// Rank 0 sends to rank 1, which expects nothing from it.
TEST(StepSimError, AnUnmatchedSendIsADeadlock) {
    std::vector<Graph> graphs(2);
    std::vector<Program> programs;
    for (int r = 0; r < 2; r++) {
        CommAttrs a;
        a.kind = CommNodeKind::Redistribute;
        a.world = 2;
        if (r == 0) a.sends = {{1, Box{{0}, {4}}}};
        a.bytes = r == 0 ? 16 : 0;
        comm(graphs[r], "move", a, data(graphs[r], "x"));
        programs.push_back(program_of(graphs[r]));
    }
    StepSimOptions opt;
    opt.machine = flat(2, 100, 0);
    expect_error([&] { simulate_step({{&graphs[0], &programs[0], {0}}, {&graphs[1], &programs[1], {0}}}, opt); },
                 "communication node 'move': rank 0 sends 16 bytes to rank 1, which receives nothing from it");
}

// Rank 0 runs "one" then "two", rank 1 "two" then "one": each waits for the other.
TEST(StepSimError, CollectivesInADifferentOrderDeadlock) {
    std::vector<Graph> graphs(2);
    std::vector<Program> programs;
    for (int r = 0; r < 2; r++) {
        Graph &g = graphs[r];
        const TensorId x = data(g, "x");
        const char *first = r == 0 ? "one" : "two", *second = r == 0 ? "two" : "one";
        comm(g, second, all_reduce({0, 1}, 8), comm(g, first, all_reduce({0, 1}, 8), x));
        programs.push_back(program_of(g));
    }
    StepSimOptions opt;
    opt.machine = flat(2, 100, 0);
    expect_error([&] { simulate_step({{&graphs[0], &programs[0], {0, 0}}, {&graphs[1], &programs[1], {0, 0}}}, opt); },
                 "deadlock: communication node 'one' (all_reduce over ranks [0,1]) was reached by ranks [0] but never "
                 "by ranks [1]; rank 1 is stuck at instruction 0 (collective 'two'");
}

// ---------------------------------------------------------------------------
// An MLP lowered over two ranks.

struct Lowered {
    std::vector<DeviceGraph> ranks;
    std::vector<Program> programs;
};

Lowered lower_mlp(PartitionStrategy strategy) {
    Model m = build_model("mlp:hidden=64", 8);
    OptimizerConfig cfg;
    cfg.kind = OptimizerConfig::Kind::Adam;
    make_training_graph(m.graph, m.loss, cfg);
    PartitionOptions po;
    po.strategy = strategy;
    po.executable = true;
    const Plan plan = partition(m.graph, flat_machine(2), po);
    Lowered l;
    for (int r = 0; r < 2; r++) l.ranks.push_back(lower(m.graph, plan, r));
    for (int r = 0; r < 2; r++) l.programs.push_back(program_of(l.ranks[r].graph));
    return l;
}

// Every operator takes `op_s`, every collective what `machine` makes of it.
StepPrediction simulate_lowered(const Lowered &l, const Machine &machine, double op_s) {
    std::vector<RankProgram> ranks;
    for (int r = 0; r < 2; r++) {
        const Graph &g = l.ranks[r].graph;
        std::vector<double> t(g.num_nodes(), 0);
        for (NodeId n = 0; n < g.num_nodes(); n++) t[n] = g.node(n).comm ? 0 : op_s;
        ranks.push_back({&g, &l.programs[r], t});
    }
    StepSimOptions opt;
    opt.machine = machine;
    opt.batch = 8;
    return simulate_step(ranks, opt);
}

// The cost of each of rank 0's collectives, in program order, from the
// attributes on both ranks: 2 ranks, so one ring step each way for an
// all-reduce, one for a reduce-scatter, and one round of a redistribution.
std::vector<double> collective_costs(const Lowered &l, double bandwidth, double latency) {
    std::vector<double> costs;
    for (const Instruction &in : l.programs[0].instructions) {
        if (in.kind != Instruction::Kind::Collective) continue;
        const std::string &name = l.ranks[0].graph.node(in.node).call.name;
        int64_t bytes = 0;
        CommNodeKind kind = CommNodeKind::AllReduce;
        for (int r = 0; r < 2; r++) {
            const Graph &g = l.ranks[r].graph;
            for (NodeId n = 0; n < g.num_nodes(); n++) {
                if (g.node(n).call.name != name) continue;
                const CommAttrs a = read_comm_attrs(g.node(n).call, g.tensor(g.node(n).inputs[0]).type.shape.size());
                bytes = std::max(bytes, a.bytes);
                kind = a.kind;
            }
        }
        const double beta = static_cast<double>(bytes) / bandwidth;
        if (kind == CommNodeKind::AllReduce) costs.push_back(2 * latency + beta);
        else costs.push_back(bytes > 0 ? latency + beta : 0);  // reduce-scatter, redistribute: one step
    }
    return costs;
}

int compute_instructions(const Program &p) {
    int n = 0;
    for (const Instruction &in : p.instructions) n += in.kind == Instruction::Kind::Compute;
    return n;
}

class StepSimLowered : public testing::TestWithParam<PartitionStrategy> {};

// With free communication the compute stream is the critical path: each
// rank's step is its operators' count times their time.
TEST_P(StepSimLowered, FreeCommunicationLeavesTheComputeChain) {
    const Lowered l = lower_mlp(GetParam());
    const double op_s = 1e-3;
    const StepPrediction s = simulate_lowered(l, flat(2, std::numeric_limits<double>::infinity(), 0), op_s);
    for (int r = 0; r < 2; r++) {
        const double chain = compute_instructions(l.programs[r]) * op_s;
        EXPECT_NEAR(s.ranks[r].step_s, chain, 1e-12) << "rank " << r;
        EXPECT_NEAR(s.ranks[r].compute_s, chain, 1e-12) << "rank " << r;
        EXPECT_NEAR(s.ranks[r].exposed_comm_s, 0, 1e-12) << "rank " << r;
    }
    EXPECT_NEAR(s.throughput, 8 / s.step_s, 1e-6);
}

// With free operators the comm stream is the critical path: the step is the
// sum of the collectives' costs, the same on both ranks, all of it exposed.
TEST_P(StepSimLowered, FreeComputeLeavesTheCollectives) {
    const Lowered l = lower_mlp(GetParam());
    const double bandwidth = 1e9, latency = 1e-5;
    const StepPrediction s = simulate_lowered(l, flat(2, bandwidth, latency), 0);
    double total = 0;
    for (double c : collective_costs(l, bandwidth, latency)) total += c;
    ASSERT_GT(total, 0);
    for (int r = 0; r < 2; r++) {
        EXPECT_NEAR(s.ranks[r].step_s, total, 1e-12) << "rank " << r;
        // Exposed where the compute stream waits for a collective, idle where
        // it has finished before one.
        EXPECT_NEAR(s.ranks[r].exposed_comm_s + s.ranks[r].idle_s, total, 1e-12) << "rank " << r;
        EXPECT_GT(s.ranks[r].exposed_comm_s, 0) << "rank " << r;
    }
}

INSTANTIATE_TEST_SUITE_P(Strategies, StepSimLowered,
                         testing::Values(PartitionStrategy::DataParallel, PartitionStrategy::Tofu),
                         [](const auto &info) {
                             return info.param == PartitionStrategy::Tofu ? "Tofu" : "DataParallel";
                         });

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// A swap-planned program (build_swap_run) of an Adam-trained mlp at a quarter
// of its footprint, against bounds computed here from the program: with swaps
// that cost nothing the step is the compute stream's sum; with slow swaps it
// is at least each stream's own total; the four parts add up to the step.
TEST(StepSimSwapped, ASwapPlannedProgramIsBoundedByItsStreams) {
    Model m = build_model("mlp:layers=4,hidden=64,input=64,classes=8", 16);
    OptimizerConfig cfg;
    cfg.kind = OptimizerConfig::Kind::Adam;
    make_training_graph(m.graph, m.loss, cfg);
    const Graph &g = m.graph;
    SwapProblem pr;
    pr.graph = &g;
    pr.order = default_order(g);
    pr.node_time_s.assign(g.num_nodes(), 1e-3);
    pr.h2d_bytes_per_s = pr.d2h_bytes_per_s = 1e9;
    pr.budget = std::max(plan_memory(g, pr.order).arena_bytes / 4 / 64 * 64, min_swap_budget(pr));
    SwapOptions so;
    so.generations = 3;
    so.population = 6;
    const SwapRun run = build_swap_run(g, plan_swaps(pr, so));
    double compute = 0, in_bytes = 0, out_bytes = 0;
    for (const Instruction &in : run.train.instructions) {
        if (in.kind == Instruction::Kind::Compute) compute += 1e-3;
        if (in.kind == Instruction::Kind::SwapIn) in_bytes += static_cast<double>(in.bytes);
        if (in.kind == Instruction::Kind::SwapOut) out_bytes += static_cast<double>(in.bytes);
    }
    ASSERT_GT(in_bytes, 0);
    const std::vector<double> times(static_cast<size_t>(g.num_nodes()), 1e-3);
    StepSimOptions opt;
    opt.swap_in_bandwidth = opt.swap_out_bandwidth = 1e30;
    StepPrediction free_swaps = simulate_step({{&g, &run.train, times}}, opt);
    EXPECT_NEAR(free_swaps.step_s, compute, 1e-9);
    opt.swap_in_bandwidth = opt.swap_out_bandwidth = 1e5;  // bytes/s: the swaps dominate
    StepPrediction slow = simulate_step({{&g, &run.train, times}}, opt);
    const RankStepTime &r = slow.ranks[0];
    EXPECT_GE(slow.step_s, in_bytes / 1e5 - 1e-9);
    EXPECT_GE(slow.step_s, out_bytes / 1e5 - 1e-9);
    EXPECT_GE(slow.step_s, compute);
    EXPECT_GT(r.exposed_swap_s, 0);
    EXPECT_NEAR(r.compute_s, compute, 1e-9);
    EXPECT_NEAR(r.compute_s + r.exposed_comm_s + r.exposed_swap_s + r.idle_s, slow.step_s, 1e-9);
}

}  // namespace
}  // namespace tessera
