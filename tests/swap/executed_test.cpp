// Swapped execution on the CPU device: programs that move tensors between the
// arena and the host area, written by hand against plan_memory's placement,
// then (build_swap_run) from the swap planner. Every swapped run is compared
// bit for bit with the unswapped run of the same graph.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>

#include "internal.h"  // swap/src: the scheduler, for white-box cases
#include "expect_error.h"
#include "tessera/error.h"
#include "tessera/exec/cpu_device.h"
#include "tessera/exec/executor.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"
#include "tessera/program/verify.h"
#include "tessera/swap/swap_program.h"
#include "test_graphs.h"
#include "zoo_training_graph.h"
#include "trials.h"

namespace tessera {
namespace {

using test::mlp_training_graph;

using test::error_of;

int64_t align64(int64_t b) { return (b + 63) / 64 * 64; }

// ---- running and comparing ----

std::vector<std::byte> read_bytes(Executor &ex, TensorId t) {
    std::vector<std::byte> v(static_cast<size_t>(ex.graph().tensor(t).type.bytes()));
    ex.read(t, v.data(), v.size());
    return v;
}

std::vector<TensorId> persistent_roots(const Graph &g) {
    std::vector<bool> persistent = persistent_tensors(g);
    std::vector<TensorId> out;
    for (TensorId t = 0; t < g.num_tensors(); t++)
        if (persistent[t] && storage_root(g, t) == t) out.push_back(t);
    return out;
}

// The same inputs for every run of a step: random images, labels in range,
// and Adam's 1-based step.
void feed(Executor &ex, int step) {
    const Graph &g = ex.graph();
    std::mt19937 rng(1000 + step);
    for (TensorId t : g.with_role(TensorRole::Data)) {
        const TensorInfo &info = g.tensor(t);
        int64_t n = info.type.elements();
        if (info.name == kStepTensor) {
            int32_t s = step + 1;
            ex.write(t, &s, sizeof s);
        } else if (info.type.dtype == DType::I32) {
            int32_t classes = 2;
            if (g.has_output("logits")) classes = static_cast<int32_t>(g.tensor(g.output("logits")).type.shape.back());
            std::vector<int32_t> v(static_cast<size_t>(n));
            for (int32_t &x : v) x = std::uniform_int_distribution<int32_t>(0, classes - 1)(rng);
            ex.write(t, v.data(), v.size() * 4);
        } else {
            std::vector<float> v(static_cast<size_t>(n));
            for (float &x : v) x = std::uniform_real_distribution<float>(-1, 1)(rng);
            ex.write(t, v.data(), v.size() * 4);
        }
    }
}

struct Trace {
    std::vector<std::vector<std::byte>> losses;  // per step
    std::vector<std::vector<std::byte>> state;   // every persistent tensor after the last step
    std::vector<StepStats> stats;
};

Trace train(Executor &ex, const Program &step, int steps, uint64_t seed = 5) {
    Trace tr;
    ex.initialize(seed);
    for (int s = 0; s < steps; s++) {
        feed(ex, s);
        tr.stats.push_back(ex.run(step));
        tr.losses.push_back(read_bytes(ex, ex.graph().output("loss")));
    }
    for (TensorId t : persistent_roots(ex.graph())) tr.state.push_back(read_bytes(ex, t));
    return tr;
}

Trace train_unswapped(const Graph &g, int steps) {
    MemoryPlan plan = plan_memory(g, default_order(g));
    CpuDevice dev(plan.arena_bytes);
    Executor ex(g, dev, plan);
    return train(ex, build_program(g, default_order(g)), steps);
}

void expect_same_bits(const Trace &a, const Trace &b, const std::string &what) {
    ASSERT_EQ(a.losses.size(), b.losses.size());
    for (size_t s = 0; s < a.losses.size(); s++) EXPECT_TRUE(a.losses[s] == b.losses[s]) << what << ": loss of step " << s;
    ASSERT_EQ(a.state.size(), b.state.size());
    for (size_t k = 0; k < a.state.size(); k++)
        EXPECT_TRUE(a.state[k] == b.state[k]) << what << ": persistent tensor #" << k << " differs";
}

// ---- hand-written swapped programs ----

// `plan` with `homed` moved to the host area: no arena offset between steps.
MemoryPlan host_home(const Graph &g, MemoryPlan plan, const std::vector<TensorId> &homed) {
    plan.host_offset.assign(g.num_tensors(), -1);
    for (TensorId r : homed) {
        plan.host_offset[r] = plan.host_bytes;
        plan.host_bytes += align64(g.tensor(r).type.bytes());
        for (TensorId t = 0; t < g.num_tensors(); t++)
            if (storage_root(g, t) == r) plan.offset[t] = -1;
    }
    return plan;
}

// `base` with `before[i]` inserted before its instruction i and `tail` at the end.
Program with_inserts(const Program &base, std::map<int, std::vector<Instruction>> before,
                     const std::vector<Instruction> &tail, int new_events) {
    Program p;
    p.num_events = base.num_events + new_events;
    p.place = base.place;
    for (size_t i = 0; i < base.instructions.size(); i++) {
        for (const Instruction &in : before[static_cast<int>(i)]) p.instructions.push_back(in);
        p.instructions.push_back(base.instructions[i]);
    }
    for (const Instruction &in : tail) p.instructions.push_back(in);
    return p;
}

int index_computing(const Graph &g, const Program &p, TensorId t) {
    for (size_t i = 0; i < p.instructions.size(); i++)
        if (p.instructions[i].kind == Instruction::Kind::Compute && p.instructions[i].node == g.tensor(t).producer)
            return static_cast<int>(i);
    return -1;
}

std::vector<int> indices_reading(const Graph &g, const Program &p, TensorId t) {
    std::vector<int> out;
    for (size_t i = 0; i < p.instructions.size(); i++) {
        const Instruction &in = p.instructions[i];
        if (in.kind != Instruction::Kind::Compute) continue;
        const auto &ins = g.node(in.node).inputs;
        if (std::find(ins.begin(), ins.end(), t) != ins.end()) out.push_back(static_cast<int>(i));
    }
    return out;
}

std::string node_name(const Graph &g, const Program &p, int i) { return g.node(p.instructions[i].node).call.name; }

// A small MLP, with the first layer's weight and the images host-homed: both
// swapped in at the start to the slots plan_memory gave them, and the weight
// (updated in place) swapped out at the end.
struct HomedWeight {
    Graph g = mlp_training_graph(8, {16, 32, 32, 4}, OptimizerConfig::Kind::Sgd);
    std::vector<NodeId> order = default_order(g);
    MemoryPlan plan = plan_memory(g, order);
    TensorId w = g.tensor_named("fc1.w"), images = g.tensor_named("images");
    MemoryPlan memory = host_home(g, plan, {w, images});
    int64_t wb = g.tensor(w).type.bytes(), ib = g.tensor(images).type.bytes();

    Program program(bool swap_out_at_end = true) const {
        Program base = build_program(g, order);
        std::vector<Instruction> head = {
            Instruction::swap_in(images, plan.offset[images], memory.host_offset[images], ib),
            Instruction::swap_in(w, plan.offset[w], memory.host_offset[w], wb),
            Instruction::record(0, StreamKind::SwapIn), Instruction::wait(0, StreamKind::Compute)};
        std::vector<Instruction> tail;
        if (swap_out_at_end)
            tail = {Instruction::record(1, StreamKind::Compute), Instruction::wait(1, StreamKind::SwapOut),
                    Instruction::swap_out(w, memory.host_offset[w], wb, plan.offset[w])};
        return with_inserts(base, {{0, head}}, tail, 2);
    }
};

TEST(SwapExecution, HostHomedWeightAndImagesTrainBitIdentically) {
    HomedWeight m;
    Trace want = train_unswapped(m.g, 3);
    CpuDevice dev(m.memory.arena_bytes);
    Executor ex(m.g, dev, m.memory);
    EXPECT_TRUE(ex.host_homed(m.w));
    EXPECT_EQ(ex.persistent_bytes(), m.plan.persistent_bytes - m.wb - m.ib);
    Trace got = train(ex, m.program(), 3);
    expect_same_bits(got, want, "host-homed fc1.w and images");

    // The unswapped run touches the same slots.
    CpuDevice dev2(m.plan.arena_bytes);
    Executor ref(m.g, dev2, m.plan);
    Trace ref_trace = train(ref, build_program(m.g, m.order), 1);
    for (const StepStats &st : got.stats) {
        EXPECT_EQ(st.swap_in_bytes, m.wb + m.ib);
        EXPECT_EQ(st.swap_out_bytes, m.wb);
        EXPECT_EQ(st.arena_high_water, ref_trace.stats[0].arena_high_water);
        // The weight is live all step, as in the unswapped run; the images
        // only until their last reader.
        EXPECT_LE(st.peak_live_bytes, m.plan.lower_bound);
        EXPECT_GE(st.peak_live_bytes, m.plan.lower_bound - m.ib);
    }
}

TEST(SwapExecution, HostHomedTensorsInitializeWriteAndReadInHostMemory) {
    HomedWeight m;
    CpuDevice dev(m.memory.arena_bytes), dev2(m.plan.arena_bytes);
    Executor ex(m.g, dev, m.memory), ref(m.g, dev2, m.plan);
    ex.initialize(11);
    ref.initialize(11);
    for (TensorId t : persistent_roots(m.g)) {
        if (m.g.tensor(t).producer != kNoNode) continue;  // graph outputs hold nothing before a step
        EXPECT_TRUE(read_bytes(ex, t) == read_bytes(ref, t)) << m.g.tensor(t).name;
    }
    std::vector<float> v(static_cast<size_t>(m.wb / 4));
    for (size_t i = 0; i < v.size(); i++) v[i] = 0.25f * static_cast<float>(i);
    dev.reset_peak();
    ex.write(m.w, v.data(), v.size() * 4);
    EXPECT_EQ(ex.read_vector<float>(m.w), v);
    // The arena was not touched: the host area holds the value.
    EXPECT_EQ(dev.counters().arena_high_water, 0);
    EXPECT_EQ(error_of([&] { ex.address(m.w); }),
              "address: tensor 'fc1.w' is host-homed: between steps its value is in host memory (host offset " +
                  std::to_string(m.memory.host_offset[m.w]) + "), not in the arena; use read() or write()");
    EXPECT_EQ(ex.address(m.g.tensor_named("fc2.w")), dev.arena() + m.plan.offset[m.g.tensor_named("fc2.w")]);
    EXPECT_EQ(error_of([&] { ex.write(m.w, v.data(), 4); }),
              "write to 'fc1.w': got 4 bytes but f32[16, 32] takes 2048 bytes");
}

TEST(SwapExecution, ComputeReadingAHostHomedTensorNeverSwappedInFails) {
    HomedWeight m;
    CpuDevice dev(m.memory.arena_bytes);
    Executor ex(m.g, dev, m.memory);
    Program p = build_program(m.g, m.order);
    EXPECT_EQ(error_of([&] { ex.run(p); }),
              "program instruction 0 (compute '" + node_name(m.g, p, 0) +
                  "' on the compute stream) reads 'images', which is not in the arena: it is host-homed and no "
                  "swap-in brings it in before");
}

TEST(SwapExecution, AHostHomedTensorWrittenButNotSwappedOutFails) {
    HomedWeight m;
    CpuDevice dev(m.memory.arena_bytes);
    Executor ex(m.g, dev, m.memory);
    Program p = m.program(false);
    TensorId updated = kNoTensor;
    for (TensorId t = 0; t < m.g.num_tensors(); t++)
        if (m.g.tensor(t).updates == m.w) updated = t;
    int upd = index_computing(m.g, p, updated);
    ASSERT_GE(upd, 0);
    EXPECT_EQ(error_of([&] { ex.run(p); }),
              "program: the host-homed 'fc1.w' is written by instruction " + std::to_string(upd) + " (compute '" +
                  node_name(m.g, p, upd) + "' on the compute stream) but not swapped out after that, so its new "
                  "value would be lost at the end of the step; swap it out after instruction " + std::to_string(upd));
}

// The first ReLU's output, swapped out after its forward reader and swapped
// back in before its backward readers, at a slot other than the one it was
// produced at; meanwhile the second ReLU's output is produced over its old
// slot. Both slots lie above plan_memory's arena, so nothing else is there.
struct MovedActivation {
    Graph g = mlp_training_graph(8, {16, 32, 32, 4}, OptimizerConfig::Kind::Sgd);
    std::vector<NodeId> order = default_order(g);
    MemoryPlan plan = plan_memory(g, order);
    TensorId r = g.tensor_named("fc1.relu"), q = g.tensor_named("fc2.relu");
    int64_t bytes = g.tensor(r).type.bytes();
    int64_t produce_at = align64(plan.arena_bytes), swap_to = produce_at + align64(bytes);
    MemoryPlan memory;

    MovedActivation() {
        memory = plan;
        memory.host_offset.assign(g.num_tensors(), -1);
        memory.host_offset[r] = 0;
        memory.host_bytes = align64(bytes);
        memory.arena_bytes = swap_to + align64(bytes);
    }

    struct Options {
        bool swap_in = true;
        bool wait_before_overwrite = true;
        int64_t swap_to = -1, host_offset = 0;
    };
    Program program(Options o) const {
        Program base = build_program(g, order);
        base.place.assign(g.num_tensors(), -1);
        base.place[r] = produce_at;
        base.place[q] = produce_at;
        std::vector<int> readers = indices_reading(g, base, r);
        int make_q = index_computing(g, base, q);
        EXPECT_GE(readers.size(), 2u);
        EXPECT_LT(readers[0], make_q);
        EXPECT_LT(make_q, readers[1]);
        std::map<int, std::vector<Instruction>> before;
        before[readers[0] + 1] = {Instruction::record(0, StreamKind::Compute), Instruction::wait(0, StreamKind::SwapOut),
                                  Instruction::swap_out(r, 0, bytes, produce_at),
                                  Instruction::record(1, StreamKind::SwapOut)};
        if (o.wait_before_overwrite) before[make_q].push_back(Instruction::wait(1, StreamKind::Compute));
        if (o.swap_in)
            before[readers[1]] = {Instruction::wait(1, StreamKind::SwapIn),
                                  Instruction::swap_in(r, o.swap_to >= 0 ? o.swap_to : swap_to, o.host_offset, bytes),
                                  Instruction::record(2, StreamKind::SwapIn), Instruction::wait(2, StreamKind::Compute)};
        return with_inserts(base, before, {}, 3);
    }
};

TEST(SwapExecution, AnActivationSwappedBackInAtAnotherSlotTrainsBitIdentically) {
    MovedActivation m;
    Trace want = train_unswapped(m.g, 3);
    CpuDevice dev(m.memory.arena_bytes);
    Executor ex(m.g, dev, m.memory);
    Trace got = train(ex, m.program({}), 3);
    expect_same_bits(got, want, "fc1.relu moved");
    for (const StepStats &st : got.stats) {
        EXPECT_EQ(st.swap_out_bytes, m.bytes);
        EXPECT_EQ(st.swap_in_bytes, m.bytes);
        EXPECT_EQ(st.arena_high_water, m.swap_to + m.bytes);
        EXPECT_LE(st.peak_live_bytes, m.memory.arena_bytes);
        EXPECT_GE(st.peak_live_bytes, m.plan.persistent_bytes);
    }
}

TEST(SwapExecution, ReadingATensorWrittenOverFails) {
    MovedActivation m;
    CpuDevice dev(m.memory.arena_bytes);
    Executor ex(m.g, dev, m.memory);
    MovedActivation::Options o;
    o.swap_in = false;
    Program p = m.program(o);
    int reader = indices_reading(m.g, p, m.r)[1];
    EXPECT_EQ(error_of([&] { ex.run(p); }),
              "program instruction " + std::to_string(reader) + " (compute '" + node_name(m.g, p, reader) +
                  "' on the compute stream) reads 'fc1.relu', which is not in the arena: it was written over, or "
                  "never produced or swapped in, before");
}

TEST(SwapExecution, OverwritingATensorBeingSwappedOutWithoutAnEventFails) {
    MovedActivation m;
    CpuDevice dev(m.memory.arena_bytes);
    Executor ex(m.g, dev, m.memory);
    MovedActivation::Options o;
    o.wait_before_overwrite = false;
    Program p = m.program(o);
    int make_q = index_computing(m.g, p, m.q);
    int out = -1;
    for (size_t i = 0; i < p.instructions.size(); i++)
        if (p.instructions[i].kind == Instruction::Kind::SwapOut) out = static_cast<int>(i);
    std::string region = "arena [" + std::to_string(m.produce_at) + ", " + std::to_string(m.produce_at + m.bytes) + ")";
    EXPECT_EQ(error_of([&] { ex.run(p); }),
              "program instruction " + std::to_string(make_q) + " (compute '" + node_name(m.g, p, make_q) +
                  "' on the compute stream) writes 'fc2.relu' at " + region + ", over 'fc1.relu', which instruction " +
                  std::to_string(out) + " (swap-out 'fc1.relu' on the swap-out stream) uses with no event between "
                  "them: the two would race. Record an event after instruction " + std::to_string(out) +
                  " and wait for it on the compute stream before instruction " + std::to_string(make_q));
}

TEST(SwapExecution, SwapsOutsideTheArenaOrHostAreaFail) {
    MovedActivation m;
    CpuDevice dev(m.memory.arena_bytes);
    Executor ex(m.g, dev, m.memory);
    auto swap_in_index = [&](const Program &p) {
        for (size_t i = 0; i < p.instructions.size(); i++)
            if (p.instructions[i].kind == Instruction::Kind::SwapIn) return std::to_string(i);
        return std::string("?");
    };
    MovedActivation::Options o;
    o.swap_to = m.memory.arena_bytes - 64;
    Program p = m.program(o);
    EXPECT_EQ(error_of([&] { ex.run(p); }),
              "program instruction " + swap_in_index(p) + " (swap-in 'fc1.relu' on the swap-in stream): copies "
              "'fc1.relu' at arena offset " + std::to_string(o.swap_to) + " (1024 bytes, ending at " +
                  std::to_string(o.swap_to + 1024) + "), past the arena of " + std::to_string(m.memory.arena_bytes) +
                  " bytes");
    o.swap_to = m.swap_to + 32;
    p = m.program(o);
    EXPECT_EQ(error_of([&] { ex.run(p); }),
              "program instruction " + swap_in_index(p) + " (swap-in 'fc1.relu' on the swap-in stream): copies "
              "'fc1.relu' at arena offset " + std::to_string(o.swap_to) + ", which is not a multiple of 64");
    o = {};
    o.host_offset = 64;
    p = m.program(o);
    EXPECT_EQ(error_of([&] { ex.run(p); }),
              "program instruction " + swap_in_index(p) + " (swap-in 'fc1.relu' on the swap-in stream): host offset "
              "64 (1024 bytes, ending at 1088) is past the host area of 1024 bytes");
    // Inside the host area but not the tensor's region.
    MemoryPlan bigger = m.memory;
    bigger.host_bytes = 4096;
    Executor ex2(m.g, dev, bigger);
    EXPECT_EQ(error_of([&] { ex2.run(p); }),
              "program instruction " + swap_in_index(p) + " (swap-in 'fc1.relu' on the swap-in stream): host offset "
              "64 is not 'fc1.relu''s host region in the memory plan (0)");
}

TEST(SwapExecution, BadSwapsNameTheInstructionAndTensor) {
    MovedActivation m;
    CpuDevice dev(m.memory.arena_bytes);
    Executor ex(m.g, dev, m.memory);
    Program base = m.program({});
    int after_q = index_computing(m.g, base, m.q) + 1;
    auto run_with = [&](Instruction extra) {
        return error_of([&] { ex.run(with_inserts(base, {{after_q, {extra}}}, {}, 0)); });
    };
    std::string at = "program instruction " + std::to_string(after_q);
    EXPECT_EQ(run_with(Instruction::swap_out(m.q, 0, m.bytes)),
              at + " (swap-out 'fc2.relu' on the swap-out stream): 'fc2.relu' has no host region in the memory plan "
                   "(host_offset -1), so it cannot be swapped");
    EXPECT_EQ(run_with(Instruction::swap_out(m.r, 0, 100)),
              at + " (swap-out 'fc1.relu' on the swap-out stream): moves 100 bytes but 'fc1.relu' (f32[8, 32]) has 1024");
    // After fc2.relu was produced over it, fc1.relu is not in the arena.
    EXPECT_EQ(run_with(Instruction::swap_out(m.r, 0, m.bytes)),
              at + " (swap-out 'fc1.relu' on the swap-out stream): 'fc1.relu' is not in the arena, so there is "
                   "nothing to swap out");
    int make_r = index_computing(m.g, base, m.r);
    EXPECT_EQ(error_of([&] {
                  ex.run(with_inserts(base, {{make_r + 1, {Instruction::swap_out(m.r, 0, m.bytes, 0)}}}, {}, 0));
              }),
              "program instruction " + std::to_string(make_r + 1) + " (swap-out 'fc1.relu' on the swap-out stream): "
              "expects 'fc1.relu' at arena offset 0 but it is at " + std::to_string(m.produce_at));
    EXPECT_EQ(error_of([&] {
                  ex.run(with_inserts(base, {{make_r + 1, {Instruction::swap_in(m.r, m.swap_to, 0, m.bytes)}}}, {}, 0));
              }),
              "program instruction " + std::to_string(make_r + 1) + " (swap-in 'fc1.relu' on the swap-in stream): "
              "the host region of 'fc1.relu' does not hold its current value: instruction " + std::to_string(make_r) +
                  " wrote it after its last swap-out");
    // Produced over a pinned tensor.
    Program p = base;
    TensorId w2 = m.g.tensor_named("fc2.w");
    p.place[m.r] = m.plan.offset[w2];
    EXPECT_EQ(error_of([&] { ex.run(p); }),
              "program instruction " + std::to_string(make_r) + " (compute '" + node_name(m.g, p, make_r) +
                  "' on the compute stream) writes 'fc1.relu' at arena [" + std::to_string(m.plan.offset[w2]) + ", " +
                  std::to_string(m.plan.offset[w2] + 1024) + "), over the pinned 'fc2.w' at [" +
                  std::to_string(m.plan.offset[w2]) + ", " + std::to_string(m.plan.offset[w2] + 4096) +
                  "), which must keep its value all step");
    // The executor still runs a good program after all that.
    Trace got = train(ex, base, 1);
    EXPECT_EQ(got.stats[0].swap_in_bytes, m.bytes);
}

// ---- from the swap planner ----

Graph training_graph(const std::string &spec, int64_t batch, OptimizerConfig::Kind opt) {
    return test::zoo_training_graph(spec, batch, test::optimizer_config(opt, 0.01));
}

// Times that make the planner's choices matter without profiling: an
// operator takes as long as moving its bytes would at 4 GB/s, and swaps run at
// 1 GB/s, so swapping costs more than computing.
SwapProblem problem_for(const Graph &g, std::vector<NodeId> order, int64_t budget) {
    SwapProblem pr;
    pr.graph = &g;
    pr.order = std::move(order);
    pr.node_time_s.assign(g.num_nodes(), 0.0);
    for (NodeId n = 0; n < g.num_nodes(); n++) {
        int64_t bytes = 0;
        for (const auto *list : {&g.node(n).inputs, &g.node(n).outputs})
            for (TensorId t : *list) bytes += g.tensor(t).type.bytes();
        pr.node_time_s[n] = 1e-6 + static_cast<double>(bytes) / 4e9;
    }
    pr.budget = budget;
    pr.h2d_bytes_per_s = pr.d2h_bytes_per_s = 1e9;
    return pr;
}

SwapOptions quick(SwapPolicy policy) {
    SwapOptions o;
    o.policy = policy;
    o.population = 8;
    o.generations = 4;
    o.time_limit_s = 5;
    return o;
}

// The advisor recomputing, with host updates `host`, for `generations` of
// `population` from `seed`.
SwapOptions recomputing(HostUpdates host, int generations, int population, uint64_t seed = 1) {
    SwapOptions o = quick(SwapPolicy::Advisor);
    o.recompute = true;
    o.host_updates = host;
    o.generations = generations;
    o.population = population;
    o.seed = seed;
    return o;
}

void expect_run_matches_plan(const std::vector<StepStats> &stats, const SwapPlan &plan, const std::string &what) {
    for (size_t s = 0; s < stats.size(); s++) {
        const StepStats &st = stats[s];
        // The planner counts whole slots (64-byte multiples); the device
        // counts the bytes a kernel or copy really touched.
        EXPECT_EQ(st.arena_high_water, plan.high_water) << what << " step " << s;
        EXPECT_LE(st.peak_live_bytes, plan.arena_bytes) << what << " step " << s;
        EXPECT_EQ(st.swap_out_bytes, plan.swap_out_bytes) << what << " step " << s;
        EXPECT_EQ(st.swap_in_bytes, plan.swap_in_bytes) << what << " step " << s;
    }
}

// How many compute instructions of `run`'s training program write their
// output over one of their inputs (op_may_overwrite_input), as the verifier
// places them.
int overwrites_in(const Graph &g, const SwapRun &run) {
    const std::vector<VerifiedInstruction> v = verify_program(g, run.train, run.memory);
    int n = 0;
    for (size_t i = 0; i < v.size(); i++) {
        const Instruction &in = run.train.instructions[i];
        if (in.kind != Instruction::Kind::Compute || v[i].outputs.size() != 1) continue;
        for (size_t k = 0; k < v[i].inputs.size(); k++)
            if (v[i].inputs[k] == v[i].outputs[0]) {
                EXPECT_TRUE(op_may_overwrite_input(g.node(in.node).call.kind, static_cast<int>(k)))
                    << g.node(in.node).call.who() << " writes over its input " << k;
                n++;
                break;
            }
    }
    return n;
}

// Trains `spec` unswapped and at budgets of 1/2, 1/4, 1/8 and 1/12 of
// plan_memory's arena (those down to 1/deepest_ratio must be feasible; the
// others run when min_swap_budget allows), and at min_swap_budget itself,
// with the given policy: losses and every persistent tensor must match bit for bit, and
// the measured memory and swap traffic must be what the plan says. The
// advisor's plans write element-wise outputs over inputs they read for the
// last time; the baselines' never do.
void check_model(const std::string &spec, int64_t batch, SwapPolicy policy, int deepest_ratio, int steps = 2) {
    for (auto opt : {OptimizerConfig::Kind::Sgd, OptimizerConfig::Kind::Adam}) {
        Graph g = training_graph(spec, batch, opt);
        std::string name = spec + " " + optimizer_name(opt) + " " + swap_policy_name(policy);
        Trace want = train_unswapped(g, steps);
        const int64_t full = plan_memory(g, default_order(g)).arena_bytes;
        const int64_t least = min_swap_budget(problem_for(g, default_order(g), full));
        int planned = 0, overwrites = 0;
        // 0 stands for the tightest budget there is, min_swap_budget itself.
        for (int ratio : {2, 4, 8, 12, 0}) {
            int64_t budget = ratio ? align64(full / ratio) : least;
            if (budget < least) {
                EXPECT_GT(ratio, deepest_ratio) << name << ": min_swap_budget " << least << " of " << full;
                continue;
            }
            std::string what = name + (ratio ? " at 1/" + std::to_string(ratio) : " at min_swap_budget");
            SwapPlan plan = plan_swaps(problem_for(g, default_order(g), budget), quick(policy));
            SwapRun run = build_swap_run(g, plan);
            ASSERT_EQ(run.memory.arena_bytes, budget) << what;
            overwrites += overwrites_in(g, run);
            CpuDevice dev(budget);
            Executor ex(g, dev, run.memory);
            Trace got = train(ex, run.train, steps);
            expect_same_bits(got, want, what);
            expect_run_matches_plan(got.stats, plan, what);
            EXPECT_GT(got.stats[0].swap_in_bytes + got.stats[0].swap_out_bytes, 0) << what << ": nothing swapped";
            planned++;
        }
        if (policy == SwapPolicy::Advisor) EXPECT_GT(overwrites, 0) << name << ": no output written over an input";
        else EXPECT_EQ(overwrites, 0) << name;
        std::printf("%s: arena %lld, min_swap_budget %lld (1/%.1f), %d budgets run, %d outputs over inputs\n",
                    name.c_str(), static_cast<long long>(full), static_cast<long long>(least),
                    double(full) / double(least), planned, overwrites);
    }
}

TEST(SwapPlanned, MlpTrainsBitIdenticallyUnderEveryBudget) {
    check_model("mlp:layers=16,hidden=64,input=64,classes=10", 16, SwapPolicy::Advisor, 12);
}
TEST(SwapPlanned, CnnTrainsBitIdenticallyUnderEveryBudget) {
    check_model("cnn:convs=4,channels=4,hidden=64", 2, SwapPolicy::Advisor, 0);
}
TEST(SwapPlanned, LstmTrainsBitIdenticallyUnderEveryBudget) {
    check_model("lstm:layers=6,hidden=32,seq=6,vocab=10", 2, SwapPolicy::Advisor, 8);
}
TEST(SwapPlanned, TransformerTrainsBitIdenticallyUnderEveryBudget) {
    check_model("transformer:layers=6,d_model=16,heads=2,seq=8,vocab=20", 2, SwapPolicy::Advisor, 12);
}
TEST(SwapPlanned, WresnetTrainsBitIdenticallyUnderEveryBudget) {
    check_model("wresnet:depth=50,width=1,image=16,base=2", 2, SwapPolicy::Advisor, 8);
}
TEST(SwapPlanned, TheBaselinesRunBitIdenticallyToo) {
    check_model("mlp:layers=16,hidden=64,input=64,classes=10", 16, SwapPolicy::Lru, 12);
    check_model("mlp:layers=16,hidden=64,input=64,classes=10", 16, SwapPolicy::Vdnn, 12);
}

// Recomputation: where swapping costs far more than computing,
// the advisor drops activations and recomputes them; the run
// stays bit-identical and moves what the plan says. Host updates too.
void check_recomputation(const std::string &spec, int64_t batch, double link_bytes_per_s = 1e8) {
    Graph g = training_graph(spec, batch, OptimizerConfig::Kind::Adam);
    Trace want = train_unswapped(g, 2);
    const int64_t full = plan_memory(g, default_order(g)).arena_bytes;
    int recomputed = 0, on_host = 0;
    for (int ratio : {4, 12}) {
        SwapProblem pr = problem_for(g, default_order(g), align64(full / ratio));
        pr.h2d_bytes_per_s = pr.d2h_bytes_per_s = link_bytes_per_s;  // 1e8: 40 times slower than computing
        pr.host_node_time_s = pr.node_time_s;
        if (min_swap_budget(pr, HostUpdates::Auto) > pr.budget) continue;
        SwapOptions o = recomputing(HostUpdates::Auto, 40, 16);
        // The generations end the search, not quick()'s 5 s: under a
        // sanitizer that cut it before the seeds that drop activations were
        // repaired, and the lstm's plan then recomputed nothing.
        o.time_limit_s = 600;
        SwapPlan plan = plan_swaps(pr, o);
        for (const SwapStep &st : plan.steps) {
            recomputed += st.kind == SwapStep::Kind::Recompute;
            on_host += st.kind == SwapStep::Kind::HostUpdate;
        }
        SwapRun run = build_swap_run(g, plan);
        CpuDevice dev(pr.budget);
        Executor ex(g, dev, run.memory);
        std::string what = spec + " at 1/" + std::to_string(ratio);
        Trace got = train(ex, run.train, 2);
        expect_same_bits(got, want, what);
        expect_run_matches_plan(got.stats, plan, what);
    }
    EXPECT_GT(recomputed, 0) << spec << ": the advisor never recomputed";
    std::printf("%s: %d recomputations, %d host updates over the budgets\n", spec.c_str(), recomputed, on_host);
}

TEST(SwapPlanned, RecomputationTrainsBitIdentically) {
    check_recomputation("mlp:layers=16,hidden=64,input=64,classes=10", 16);
    check_recomputation("transformer:layers=6,d_model=16,heads=2,seq=8,vocab=20", 2);
    // With pieces and spans of slots, the lstm's activations fit at 1e8
    // without recomputation; a link ten times slower makes it pay.
    check_recomputation("lstm:layers=6,hidden=32,seq=6,vocab=10", 2, 1e7);
}

// Recomputing a dropped activation may need an input that was freed at its
// last use, before the activation was dropped: the transformer's fc1 output
// is read by its bias_add and by nothing after it, so dropping the bias_add's
// output finds the matmul's output gone. The scheduler then runs that
// input's producer again too, a chain of recomputations, instead of calling
// the choice infeasible. Each layout below drops one activation; those whose
// schedules regenerate a freed input must train bit-identically.
TEST(SwapPlanned, RecomputationRegeneratesFreedInputs) {
    using namespace swap_detail;
    Graph g = training_graph("transformer:layers=2,d_model=16,heads=2,seq=8,vocab=20", 2, OptimizerConfig::Kind::Adam);
    Trace want = train_unswapped(g, 2);
    const int64_t full = plan_memory(g, default_order(g)).arena_bytes;
    SwapProblem pr = problem_for(g, default_order(g), align64(full / 4));
    Prepared p = prepare(pr, SwapPolicy::Advisor, true);
    int64_t smallest = 0;
    ASSERT_TRUE(pick_classes(p, &smallest));
    Layout layout;
    choose_pins(p, 0, layout);
    split_pools(p, p.classes, demand_weights(p, p.classes, layout.pin), layout);
    int chains = 0, infeasible = 0;
    for (int d : p.recompute_bufs) {
        layout.recompute.assign(p.bufs.size(), 0);
        layout.recompute[d] = 1;
        Scheduler sched;
        Schedule s;
        try {
            sched.run(p, p.order, p.classes, layout, SwapPolicy::Advisor, s);
        } catch (const RecomputeInfeasible &) {
            infeasible++;
            continue;
        }
        // A recomputation of a buffer the layout did not drop, before the
        // first of the dropped one: a freed input brought back for it.
        bool regenerated = false;
        for (int gi : s.issue) {
            const IStep &st = s.steps[gi];
            if (st.kind != SwapStep::Kind::Recompute) continue;
            if (st.buf == d) break;
            regenerated = true;
        }
        if (!regenerated || chains == 3) continue;
        chains++;
        SwapPlan plan = make_plan(p, p.order, p.classes, layout, SwapPolicy::Advisor, s);
        std::string what = "dropping " + g.tensor(p.bufs[d].root).name;
        SwapRun run = build_swap_run(g, plan);  // verifies the program
        CpuDevice dev(pr.budget);
        Executor ex(g, dev, run.memory);
        Trace got = train(ex, run.train, 2);
        expect_same_bits(got, want, what);
        expect_run_matches_plan(got.stats, plan, what);
    }
    EXPECT_GT(chains, 0) << "no drop choice regenerated a freed input (" << infeasible << " of "
                         << p.recompute_bufs.size() << " were infeasible)";
}

// The verifier accepts an output written over an input only for an
// element-wise operator, exactly over that input. An advisor's plan for the
// mlp has such outputs; moving one 64 bytes up, or giving a matmul's output
// the offset of an input of its size, is refused.
TEST(SwapPlanned, OutputsOverInputsMustBeElementWiseAndExact) {
    Graph g = training_graph("mlp:layers=16,hidden=64,input=64,classes=10", 16, OptimizerConfig::Kind::Adam);
    const int64_t full = plan_memory(g, default_order(g)).arena_bytes;
    SwapPlan plan = plan_swaps(problem_for(g, default_order(g), align64(full / 4)), quick(SwapPolicy::Advisor));
    SwapRun run = build_swap_run(g, plan);
    const std::vector<VerifiedInstruction> v = verify_program(g, run.train, run.memory);
    auto expect_refused = [&](TensorId out, TensorId in, int64_t offset, const std::string &what) {
        Program bad = run.train;
        bad.place[static_cast<size_t>(out)] = offset;
        std::string msg = error_of([&] { verify_program(g, bad, run.memory); });
        EXPECT_NE(msg.find("writes '" + g.tensor(out).name + "' at arena [" + std::to_string(offset) + ", "),
                  std::string::npos) << what << ": " << msg;
        EXPECT_NE(msg.find("over '" + g.tensor(in).name + "' at ["), std::string::npos) << what << ": " << msg;
        EXPECT_NE(msg.find("which the same instruction uses"), std::string::npos) << what << ": " << msg;
    };
    const std::vector<bool> persistent = persistent_tensors(g);
    bool shifted = false, matmul = false;
    for (size_t i = 0; i < v.size(); i++) {
        const Instruction &in = run.train.instructions[i];
        if (in.kind != Instruction::Kind::Compute || in.offset >= 0 || v[i].outputs.size() != 1) continue;
        const Node &node = g.node(in.node);
        for (size_t k = 0; k < v[i].inputs.size(); k++) {
            const TensorId x = node.inputs[k], y = node.outputs[0];
            if (g.tensor(x).type.bytes() != g.tensor(y).type.bytes() || persistent[x]) continue;
            if (!shifted && v[i].outputs[0] == v[i].inputs[k]) {
                expect_refused(y, x, v[i].inputs[k] + 64, node.call.who() + " 64 bytes up");
                shifted = true;
            } else if (!matmul && node.call.kind == OpKind::Matmul) {
                expect_refused(y, x, v[i].inputs[k], node.call.who() + " over its input");
                matmul = true;
            }
        }
    }
    EXPECT_TRUE(shifted && matmul);
}

// build_swap_run refuses plans that cannot share one memory plan, naming the tensor.
TEST(SwapPlanned, PlansThatDisagreeAreRejected) {
    Graph g = training_graph("mlp:layers=16,hidden=64,input=64,classes=10", 16, OptimizerConfig::Kind::Sgd);
    const int64_t full = plan_memory(g, default_order(g)).arena_bytes;
    SwapPlan plan = plan_swaps(problem_for(g, default_order(g), align64(full / 4)), quick(SwapPolicy::Advisor));
    TensorId pinned = kNoTensor;
    for (TensorId t = 0; t < g.num_tensors() && pinned == kNoTensor; t++)
        if (plan.pinned[t] >= 0) pinned = t;
    ASSERT_NE(pinned, kNoTensor);
    SwapPlan other = plan;
    other.pinned[pinned] += 64;
    std::string msg = error_of([&] { build_swap_run(g, plan, &other); });
    EXPECT_NE(msg.find("'" + g.tensor(pinned).name + "'"), std::string::npos) << msg;
    other = plan;
    other.swapped[pinned] = 1;
    msg = error_of([&] { build_swap_run(g, plan, &other); });
    EXPECT_NE(msg.find("'" + g.tensor(pinned).name + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("pinned"), std::string::npos) << msg;
}

// A training plan and a forward plan that shares its homes: both programs
// run on one memory plan, evaluation sees the weights training left.
TEST(SwapPlanned, ForwardProgramSharesTheTrainingPlansHomes) {
    Graph g = training_graph("mlp:layers=16,hidden=64,input=64,classes=10", 16, OptimizerConfig::Kind::Adam);
    std::vector<NodeId> order = default_order(g), fwd;
    // The nodes loss and logits depend on, in order.
    std::vector<bool> needed(g.num_tensors(), false), keep(g.num_nodes(), false);
    needed[g.output("loss")] = needed[g.output("logits")] = true;
    for (NodeId n = g.num_nodes() - 1; n >= 0; n--) {
        for (TensorId t : g.node(n).outputs) keep[n] = keep[n] || needed[t];
        if (keep[n])
            for (TensorId t : g.node(n).inputs) needed[t] = true;
    }
    for (NodeId n : order)
        if (keep[n]) fwd.push_back(n);
    const int64_t full = plan_memory(g, order).arena_bytes;
    const int64_t budget = align64(full / 2);
    SwapPlan train_plan = plan_swaps(problem_for(g, order, budget), quick(SwapPolicy::Advisor));
    SwapProblem fp = problem_for(g, fwd, budget);
    fp.homes_from = &train_plan;
    SwapPlan fwd_plan = plan_swaps(fp, quick(SwapPolicy::Advisor));
    SwapRun run = build_swap_run(g, train_plan, &fwd_plan);
    ASSERT_FALSE(run.forward.instructions.empty());

    MemoryPlan full_plan = plan_memory(g, order);
    CpuDevice ref_dev(full_plan.arena_bytes), dev(budget);
    Executor ref(g, ref_dev, full_plan), ex(g, dev, run.memory);
    Program ref_eval = build_program_for(g, order, {g.output("loss"), g.output("logits")});
    Trace want = train(ref, build_program(g, order), 2);
    Trace got = train(ex, run.train, 2);
    expect_same_bits(got, want, "training");
    feed(ref, 7);
    feed(ex, 7);
    ref.run(ref_eval);
    std::vector<StepStats> stats = {ex.run(run.forward)};
    expect_run_matches_plan(stats, fwd_plan, "forward");
    EXPECT_TRUE(read_bytes(ex, g.output("loss")) == read_bytes(ref, g.output("loss")));
    EXPECT_TRUE(read_bytes(ex, g.output("logits")) == read_bytes(ref, g.output("logits")));

    // Homes that differ cannot share one memory plan.
    SwapPlan other = fwd_plan;
    TensorId moved = kNoTensor;
    for (TensorId t = 0; t < g.num_tensors() && moved == kNoTensor; t++)
        if (other.pinned[t] >= 0) moved = t;
    if (moved != kNoTensor) {
        other.pinned[moved] += 64;
        std::string msg = error_of([&] { build_swap_run(g, train_plan, &other); });
        EXPECT_NE(msg.find("'" + g.tensor(moved).name + "'"), std::string::npos) << msg;
    }
}

// Recomputation with host updates over many random timings (regression:
// a swap-out of a recomputed activation was issued after its first compute,
// reading a slot it did not hold yet; an operand given a slot that a
// recomputation at the same position had just freed waited for a later
// step). Every plan must build a program that the replay verifies, and the
// plans must between them recompute and update on the host.
TEST(SwapPlanned, RecomputationWithHostUpdatesUnderRandomTimingsGivesValidPrograms) {
    Graph g = training_graph("cnn:convs=2,depth=12,channels=2,hidden=16", 16, OptimizerConfig::Kind::Adam);
    const int64_t full = plan_memory(g, default_order(g)).arena_bytes;
    int recomputed = 0, on_host = 0;
    const int seeds = test::trials(200, 20);
    for (uint64_t seed = 1; seed <= static_cast<uint64_t>(seeds); seed++) {
        std::mt19937_64 rng(seed);
        std::uniform_real_distribution<double> scale(0.3, 3.0), exponent(7, 10.5), ratio(2.5, 5);
        SwapProblem pr = problem_for(g, default_order(g), align64(static_cast<int64_t>(full / ratio(rng))));
        for (double &t : pr.node_time_s) t *= scale(rng);
        pr.host_node_time_s = pr.node_time_s;
        for (double &t : pr.host_node_time_s) t *= 3 * scale(rng);
        pr.h2d_bytes_per_s = std::pow(10.0, exponent(rng));
        pr.d2h_bytes_per_s = std::pow(10.0, exponent(rng));
        SwapOptions o = recomputing(HostUpdates::All, 15, 24, seed);
        try {
            SwapPlan plan = plan_swaps(pr, o);
            build_swap_run(g, plan);
            for (const SwapStep &st : plan.steps) {
                recomputed += st.kind == SwapStep::Kind::Recompute;
                on_host += st.kind == SwapStep::Kind::HostUpdate;
            }
        } catch (const std::exception &e) {
            ADD_FAILURE() << "seed " << seed << ": " << e.what();
        }
    }
    EXPECT_GT(recomputed, 0);
    EXPECT_GT(on_host, 0);
}

// Chains of recomputation (a freed input run again for a dropped buffer)
// where swapping costs far more than computing (a link 40 times slower, as
// in check_recomputation): transformers and an MLP at 4x to 12x over budget
// with host updates, over seeds. Every plan's program must pass the replay's
// checks, and between them the plans must have recomputations that read a
// recomputed, never swapped input (chains, whether that input was dropped by
// the layout or freed after its last use).
TEST(SwapPlanned, RecomputationChainsUnderASlowLinkGiveValidPrograms) {
    int plans = 0, chains = 0, recomputed = 0;
    for (const char *spec : {"transformer:layers=3,d_model=32,heads=4,seq=16,vocab=40", "mlp:layers=12,hidden=96,input=64"}) {
        Graph g = training_graph(spec, 4, OptimizerConfig::Kind::Adam);
        const int64_t full = plan_memory(g, default_order(g)).arena_bytes;
        for (int ratio : {4, 8, 12}) {
            SwapProblem pr = problem_for(g, default_order(g), align64(full / ratio));
            pr.h2d_bytes_per_s = pr.d2h_bytes_per_s = 1e8;
            pr.host_node_time_s = pr.node_time_s;
            if (min_swap_budget(pr, HostUpdates::Auto) > pr.budget) continue;
            for (uint64_t seed = 1; seed <= static_cast<uint64_t>(test::trials(4)); seed++) {
                SwapOptions o = recomputing(HostUpdates::Auto, 300, 16, seed);
                std::string what = std::string(spec) + " at 1/" + std::to_string(ratio) + ", seed " + std::to_string(seed);
                try {
                    SwapPlan plan = plan_swaps(pr, o);
                    build_swap_run(g, plan);
                    plans++;
                    std::vector<uint8_t> was_recomputed(static_cast<size_t>(g.num_tensors()), 0);
                    for (const SwapStep &st : plan.steps)
                        if (st.kind == SwapStep::Kind::Recompute) {
                            was_recomputed[static_cast<size_t>(st.tensor)] = 1;
                            recomputed++;
                        }
                    // A chain: a buffer recomputed while it was swapped neither out nor in (never
                    // held), read by the producer of another recomputed buffer.
                    for (const SwapStep &st : plan.steps) {
                        if (st.kind != SwapStep::Kind::Recompute) continue;
                        for (TensorId t : g.node(st.node).inputs)
                            chains += was_recomputed[static_cast<size_t>(storage_root(g, t))] && !plan.swapped[storage_root(g, t)];
                    }
                } catch (const std::exception &e) {
                    ADD_FAILURE() << what << ": " << e.what();
                }
            }
        }
    }
    std::printf("%d plans, %d recomputations, %d that read a recomputed input\n", plans, recomputed, chains);
    EXPECT_GT(plans, 0);
    EXPECT_GT(chains, 0);
}

}  // namespace
}  // namespace tessera
