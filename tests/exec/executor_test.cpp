// The executor and programs, on the CPU device: results against plain loops and
// the reference evaluator, measured memory against the plan, multi-stream
// programs, and every user-facing error.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "expect_error.h"
#include "tessera/error.h"
#include "tessera/exec/cpu_device.h"
#include "tessera/exec/executor.h"
#include "tessera/exec/init.h"
#include "tessera/exec/reference.h"
#include "tessera/graph/builder.h"
#include "tessera/graph/optimizer.h"
#include "tessera/size.h"
#include "test_graphs.h"

namespace tessera {
namespace {

using test::mlp_training_graph;
using test::random_topological_order;

using test::error_of;

using test::f32;

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (float &x : v) x = u(rng);
    return v;
}

// ---- a tiny network with a hand-written backward pass for its last layer ----
//
//   h = x @ w1 + b1; r = relu(h); logits = r @ w2; loss = softmax_xent(logits, labels)
//   dlogits = softmax_xent_grad(logits, labels, 1); dw2 = r^T @ dlogits
//   w2, v2 <- sgd_momentum(w2, dw2, v2)
struct TinyNet {
    static constexpr int N = 4, I = 3, H = 5, C = 3;
    static constexpr double kLr = 0.1, kMomentum = 0.9;
    Graph g;
    TensorId x, labels, w1, b1, w2, v2, dloss, h, z, r, logits, loss, dlogits, dw2, w2_new, v2_new;

    TinyNet() {
        x = g.add_data("x", f32({N, I}));
        labels = g.add_data("labels", TensorType{DType::I32, {N}});
        w1 = g.add_param("w1", f32({I, H}), Init::he_normal(I));
        b1 = g.add_param("b1", f32({H}), Init::uniform(0.5));
        w2 = g.add_param("w2", f32({H, C}), Init::xavier_uniform(H, C));
        v2 = g.add_opt_state("w2.momentum", f32({H, C}));
        dloss = g.add_constant("dloss", f32({}), Init::constant(1.0));
        h = g.add_node({OpKind::Matmul, "fc1", {}}, {x, w1})[0];
        z = g.add_node({OpKind::BiasAdd, "fc1.bias", {}}, {h, b1})[0];
        r = g.add_node({OpKind::Relu, "relu", {}}, {z})[0];
        logits = g.add_node({OpKind::Matmul, "fc2", {}}, {r, w2})[0];
        loss = g.add_node({OpKind::SoftmaxXent, "loss", {}}, {logits, labels})[0];
        dlogits = g.add_node({OpKind::SoftmaxXentGrad, "dlogits", {}}, {logits, labels, dloss},
                             TensorRole::Gradient)[0];
        dw2 = g.add_node({OpKind::Matmul, "dw2", {{"transpose_a", int64_t{1}}}}, {r, dlogits}, TensorRole::Gradient)[0];
        auto outs = g.add_node({OpKind::SgdMomentum, "w2.update", {{"lr", kLr}, {"momentum", kMomentum}}},
                               {w2, dw2, v2});
        w2_new = outs[0];
        v2_new = outs[1];
        g.set_updates(w2_new, w2);
        g.set_updates(v2_new, v2);
        g.set_output("loss", loss);
        g.set_output("logits", logits);
    }
};

// The same step as plain loops, in double precision.
struct LoopResult {
    double loss;
    std::vector<double> logits, w2, v2;
};

LoopResult tiny_step_by_loops(const std::vector<float> &x, const std::vector<int32_t> &labels,
                              const std::vector<float> &w1, const std::vector<float> &b1, std::vector<double> w2,
                              std::vector<double> v2) {
    constexpr int N = TinyNet::N, I = TinyNet::I, H = TinyNet::H, C = TinyNet::C;
    std::vector<double> r(N * H), logits(N * C), dlogits(N * C);
    for (int n = 0; n < N; n++)
        for (int j = 0; j < H; j++) {
            double s = b1[j];
            for (int i = 0; i < I; i++) s += double(x[n * I + i]) * w1[i * H + j];
            r[n * H + j] = std::max(0.0, s);
        }
    double loss = 0;
    for (int n = 0; n < N; n++) {
        double mx = -1e300, sum = 0;
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int j = 0; j < H; j++) s += r[n * H + j] * w2[j * C + c];
            logits[n * C + c] = s;
            mx = std::max(mx, s);
        }
        for (int c = 0; c < C; c++) sum += std::exp(logits[n * C + c] - mx);
        loss += -(logits[n * C + labels[n]] - mx - std::log(sum)) / N;
        for (int c = 0; c < C; c++)
            dlogits[n * C + c] = (std::exp(logits[n * C + c] - mx) / sum - (c == labels[n])) / N;
    }
    for (int j = 0; j < H; j++)
        for (int c = 0; c < C; c++) {
            double dw = 0;
            for (int n = 0; n < N; n++) dw += r[n * H + j] * dlogits[n * C + c];
            v2[j * C + c] = TinyNet::kMomentum * v2[j * C + c] + dw;
            w2[j * C + c] -= TinyNet::kLr * v2[j * C + c];
        }
    return {loss, logits, w2, v2};
}

std::vector<double> to_double(const std::vector<float> &v) { return {v.begin(), v.end()}; }

void expect_near(const std::vector<float> &got, const std::vector<double> &want, double tol, const char *what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); i++) EXPECT_NEAR(got[i], want[i], tol) << what << "[" << i << "]";
}

TEST(Executor, TrainingStepsMatchPlainLoops) {
    TinyNet net;
    CpuDevice dev(1 << 20);
    Executor ex(net.g, dev, plan_memory(net.g, default_order(net.g)));
    ex.initialize(17);
    std::vector<float> x = random_floats(TinyNet::N * TinyNet::I, 1);
    std::vector<int32_t> labels = {0, 2, 1, 2};
    ex.write(net.x, x.data(), x.size() * 4);
    ex.write(net.labels, labels.data(), labels.size() * 4);
    std::vector<float> w1 = ex.read_vector<float>(net.w1), b1 = ex.read_vector<float>(net.b1);
    std::vector<double> w2 = to_double(ex.read_vector<float>(net.w2)), v2(w2.size(), 0.0);
    Program step = build_program(net.g, default_order(net.g));
    for (int s = 0; s < 3; s++) {
        SCOPED_TRACE("step " + std::to_string(s));
        LoopResult want = tiny_step_by_loops(x, labels, w1, b1, w2, v2);
        ex.run(step);
        float loss;
        ex.read(net.loss, &loss, sizeof loss);
        EXPECT_NEAR(loss, want.loss, 1e-5);
        expect_near(ex.read_vector<float>(net.logits), want.logits, 1e-5, "logits");
        // The update ran in place: w2 and w2' are the same bytes.
        expect_near(ex.read_vector<float>(net.w2), want.w2, 1e-5, "w2");
        expect_near(ex.read_vector<float>(net.v2), want.v2, 1e-5, "v2");
        EXPECT_EQ(ex.read_vector<float>(net.w2_new), ex.read_vector<float>(net.w2));
        EXPECT_EQ(ex.address(net.w2_new), ex.address(net.w2));
        w2 = to_double(ex.read_vector<float>(net.w2));
        v2 = to_double(ex.read_vector<float>(net.v2));
    }
    EXPECT_EQ(ex.read_vector<float>(net.w1), w1) << "w1 has no update";
}

// Values of every graph input as the executor holds them, for the reference evaluator.
std::map<TensorId, HostBuffer> graph_inputs(Executor &ex) {
    std::map<TensorId, HostBuffer> in;
    for (TensorId t = 0; t < ex.graph().num_tensors(); t++)
        if (ex.graph().tensor(t).producer == kNoNode) {
            HostBuffer b(static_cast<size_t>(ex.graph().tensor(t).type.bytes()));
            ex.read(t, b.data(), b.size());
            in[t] = std::move(b);
        }
    return in;
}

void feed_mlp(Executor &ex, uint32_t seed) {
    const Graph &g = ex.graph();
    TensorId images = g.tensor_named("images"), labels = g.tensor_named("labels");
    std::vector<float> x = random_floats(static_cast<size_t>(g.tensor(images).type.elements()), seed);
    std::vector<int32_t> y(static_cast<size_t>(g.tensor(labels).type.elements()));
    for (size_t i = 0; i < y.size(); i++) y[i] = static_cast<int32_t>((i * 7 + seed) % 10);
    ex.write(images, x.data(), x.size() * 4);
    ex.write(labels, y.data(), y.size() * 4);
    if (auto step = g.find_tensor(kStepTensor)) {
        int32_t one = 1;
        ex.write(*step, &one, 4);
    }
}

TEST(Executor, MatchesTheReferenceEvaluatorBitForBit) {
    for (auto opt : {OptimizerConfig::Kind::Sgd, OptimizerConfig::Kind::Adam}) {
        SCOPED_TRACE(optimizer_name(opt));
        Graph g = mlp_training_graph(16, {20, 32, 24, 10}, opt);
        CpuDevice dev(16 << 20);
        Executor ex(g, dev, plan_memory(g, default_order(g)));
        ex.initialize(5);
        feed_mlp(ex, 3);
        std::vector<HostBuffer> ref = evaluate_reference(g, graph_inputs(ex));
        ex.run(build_program(g, default_order(g)));
        // Persistent results: the outputs, and every in-place update (whose
        // bytes the executor shares with the tensor it replaces).
        int compared = 0;
        for (TensorId t = 0; t < g.num_tensors(); t++) {
            const TensorInfo &info = g.tensor(t);
            bool output = false;
            for (const auto &[k, o] : g.outputs()) output = output || o == t;
            if (!output && info.updates == kNoTensor) continue;
            HostBuffer got(static_cast<size_t>(info.type.bytes()));
            ex.read(t, got.data(), got.size());
            EXPECT_EQ(got, ref[t]) << info.name;
            compared++;
        }
        EXPECT_GE(compared, 2 + 6);
    }
}

// The bytes the step touches, from the plan: the executor's high-water mark
// must come out as exactly this.
int64_t touched_end(const Graph &g, const MemoryPlan &plan, const Program &p) {
    int64_t end = 0;
    for (const Instruction &in : p.instructions) {
        if (in.kind != Instruction::Kind::Compute) continue;
        const Node &n = g.node(in.node);
        for (const auto *list : {&n.inputs, &n.outputs})
            for (TensorId t : *list) end = std::max(end, plan.offset[t] + g.tensor(t).type.bytes());
    }
    return end;
}

TEST(Executor, MeasuredPeakEqualsThePlansLowerBound) {
    Graph g = mlp_training_graph(128, {784, 1024, 1024, 10}, OptimizerConfig::Kind::Sgd);
    std::vector<NodeId> order = default_order(g);
    MemoryPlan plan = plan_memory(g, order);
    CpuDevice dev(plan.arena_bytes);  // exactly what the plan asks for
    Executor ex(g, dev, plan);
    ex.initialize(1);
    feed_mlp(ex, 1);
    Program step = build_program(g, order);
    for (int s = 0; s < 2; s++) {
        StepStats st = ex.run(step);
        EXPECT_EQ(st.peak_live_bytes, plan.lower_bound);
        EXPECT_EQ(st.arena_high_water, touched_end(g, plan, step));
        EXPECT_LE(st.arena_high_water, plan.arena_bytes);
        EXPECT_GT(st.step_time_s, 0);
        EXPECT_EQ(dev.counters().live_bytes, plan.persistent_bytes) << "transients all died";
    }
    EXPECT_EQ(ex.persistent_bytes(), plan.persistent_bytes);
    float loss;
    ex.read(g.output("loss"), &loss, 4);
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_NEAR(loss, std::log(10.0), 1.5);
}

// A random topological order, to show the measurement follows the order.
std::vector<NodeId> shuffled_order(const Graph &g, uint32_t seed) {
    std::mt19937 rng(seed);
    return test::random_topological_order(g, rng);
}

TEST(Executor, MeasuredPeakFollowsTheOrderAndResultsDoNot) {
    Graph g = mlp_training_graph(32, {64, 128, 96, 10}, OptimizerConfig::Kind::Adam);
    std::vector<float> baseline_loss;
    for (uint32_t seed : {0u, 1u, 2u, 3u}) {
        std::vector<NodeId> order = seed == 0 ? default_order(g) : shuffled_order(g, seed);
        MemoryPlan plan = plan_memory(g, order);
        CpuDevice dev(plan.arena_bytes);
        Executor ex(g, dev, plan);
        ex.initialize(9);
        feed_mlp(ex, 4);
        StepStats st = ex.run(build_program(g, order));
        EXPECT_EQ(st.peak_live_bytes, plan.lower_bound) << "order seed " << seed;
        std::vector<float> w = ex.read_vector<float>(g.tensor_named("fc1.w"));
        float loss;
        ex.read(g.output("loss"), &loss, 4);
        if (seed == 0) {
            baseline_loss = {loss};
            baseline_loss.insert(baseline_loss.end(), w.begin(), w.end());
        } else {
            std::vector<float> now = {loss};
            now.insert(now.end(), w.begin(), w.end());
            EXPECT_EQ(now, baseline_loss) << "a different order must change no bits";
        }
    }
}

TEST(Executor, EvaluationProgramRunsTheForwardPassOnlyOnTheTrainingPlan) {
    Graph g = mlp_training_graph(16, {20, 32, 10}, OptimizerConfig::Kind::Sgd);
    std::vector<NodeId> order = default_order(g);
    MemoryPlan plan = plan_memory(g, order);
    CpuDevice dev(plan.arena_bytes);
    Executor ex(g, dev, plan);
    ex.initialize(2);
    feed_mlp(ex, 5);
    Program eval = build_program_for(g, order, {g.output("loss"), g.output("logits")});
    for (const Instruction &in : eval.instructions) {
        EXPECT_FALSE(g.node(in.node).backward) << g.node(in.node).call.name;
        EXPECT_FALSE(g.node(in.node).optimizer) << g.node(in.node).call.name;
    }
    int forward = 0;
    for (const Node &n : g.nodes()) forward += !n.backward && !n.optimizer;
    EXPECT_EQ(static_cast<int>(eval.instructions.size()), forward);

    std::vector<float> w_before = ex.read_vector<float>(g.tensor_named("fc1.w"));
    StepStats se = ex.run(eval);
    float eval_loss, train_loss;
    ex.read(g.output("loss"), &eval_loss, 4);
    EXPECT_EQ(ex.read_vector<float>(g.tensor_named("fc1.w")), w_before) << "evaluation must not train";
    StepStats st = ex.run(build_program(g, order));
    ex.read(g.output("loss"), &train_loss, 4);
    EXPECT_EQ(eval_loss, train_loss) << "the training step's loss is computed before its update";
    EXPECT_NE(ex.read_vector<float>(g.tensor_named("fc1.w")), w_before);
    EXPECT_LT(se.peak_live_bytes, st.peak_live_bytes);
    EXPECT_GE(se.peak_live_bytes, plan.persistent_bytes);

    // A target that needs only part of the forward pass gets only that part.
    Program part = build_program_for(g, order, {g.tensor_named("fc1.relu")});
    EXPECT_EQ(part.instructions.size(), 3u) << part.to_string(g);
}

// ---- errors ----

TEST(Executor, ArenaTooSmallSaysWhichDeviceMemWouldWork) {
    Graph g = mlp_training_graph(128, {784, 1024, 1024, 10}, OptimizerConfig::Kind::Sgd);
    MemoryPlan plan = plan_memory(g, default_order(g));
    CpuDevice dev(1 << 20);
    std::string msg = error_of([&] { Executor ex(g, dev, plan); });
    EXPECT_EQ(msg, "the memory plan needs " + std::to_string(plan.arena_bytes) + " bytes (" +
                       format_bytes(plan.arena_bytes) +
                       ") but the cpu device arena has 1048576 bytes (1.00 MiB); use --device-mem " +
                       size_flag_at_least(plan.arena_bytes) + " or more");
    EXPECT_EQ(size_flag_at_least(plan.arena_bytes), "23MiB");  // 23295808 bytes
    // And what it suggests works.
    CpuDevice enough(parse_size(size_flag_at_least(plan.arena_bytes), "--device-mem"));
    EXPECT_NO_THROW(Executor(g, enough, plan));
}

TEST(Executor, WriteAndReadCheckTheSize) {
    TinyNet net;
    CpuDevice dev(1 << 20);
    Executor ex(net.g, dev, plan_memory(net.g, default_order(net.g)));
    std::vector<float> buf(100);
    EXPECT_EQ(error_of([&] { ex.write(net.x, buf.data(), 100); }),
              "write to 'x': got 100 bytes but f32[4, 3] takes 48 bytes");
    EXPECT_EQ(error_of([&] { ex.read(net.w2, buf.data(), 4); }),
              "read of 'w2': asked for 4 bytes but f32[5, 3] has 60 bytes");
    EXPECT_EQ(error_of([&] { ex.read(99, buf.data(), 4); }), "read: tensor id 99 does not exist; the graph has " +
                                                                  std::to_string(net.g.num_tensors()) + " tensors");
}

TEST(Executor, TensorsOutsideThePlansOrderHaveNoStorage) {
    TinyNet net;
    CpuDevice dev(1 << 20);
    std::vector<NodeId> forward = {0, 1, 2, 3, 4};
    Executor ex(net.g, dev, plan_memory(net.g, forward));
    float v;
    EXPECT_EQ(error_of([&] { ex.read(net.dw2, &v, 4); }),
              "read: tensor 'dw2' has no storage in the memory plan: no node of the plan's order produces it");
    EXPECT_EQ(error_of([&] { ex.run(build_program(net.g, default_order(net.g))); }),
              "program instruction 5 computes 'dlogits', which is not in the memory plan's order; plan memory "
              "for this program's order");
}

TEST(Executor, ProgramsMustFollowThePlansOrder) {
    // Two independent nodes: both orders are valid, but a plan holds for its own.
    Graph g;
    TensorId x = g.add_data("x", f32({8}));
    g.add_node({OpKind::Relu, "a", {}}, {x});
    g.add_node({OpKind::Tanh, "b", {}}, {x});
    CpuDevice dev2(1 << 16);
    Executor ex2(g, dev2, plan_memory(g, {0, 1}));
    EXPECT_EQ(error_of([&] { ex2.run(build_program(g, {1, 0})); }),
              "program instruction 1 computes 'a' after 'b' (instruction 0), but the memory plan's order has them "
              "the other way round; its tensor lifetimes hold only for its own order, so plan memory for this "
              "program's order");
    EXPECT_NO_THROW(ex2.run(build_program(g, {0, 1})));
}

// A device that wraps the CPU device and lets a test interfere with kernels:
// make one fail, or delay those of one stream. (The c10 way: device logic is
// tested through a fake device.)
class InterferingDevice final : public Device {
public:
    explicit InterferingDevice(int64_t bytes) : inner_(bytes) {}
    std::string fail_node;                         // the kernel of this node throws
    StreamKind slow_stream = StreamKind::Compute;  // kernels here sleep first, when `slow`
    bool slow = false;

    std::string name() const override { return "interfering-cpu"; }
    int64_t arena_bytes() const override { return inner_.arena_bytes(); }
    std::byte *arena() override { return inner_.arena(); }
    Stream &stream(StreamKind k) override { return inner_.stream(k); }
    std::unique_ptr<Event> create_event() override { return inner_.create_event(); }
    void launch_op(StreamKind s, const OpCall &call, const std::vector<TensorRef> &in,
                   const std::vector<TensorRef> &out) override {
        if (call.name == fail_node) {
            stream(s).enqueue([who = call.who()] { fail(who, ": injected kernel failure"); });
            return;
        }
        if (slow && s == slow_stream)
            stream(s).enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
        Device::launch_op(s, call, in, out);
    }

protected:
    void do_copy_to_device(void *d, const void *s, size_t n) override { std::memcpy(d, s, n); }
    void do_copy_to_host(void *d, const void *s, size_t n) override { std::memcpy(d, s, n); }

private:
    CpuDevice inner_;
};

TEST(Executor, AKernelErrorOnAStreamPropagatesOutOfRun) {
    TinyNet net;
    InterferingDevice dev(1 << 20);
    MemoryPlan plan = plan_memory(net.g, default_order(net.g));
    Executor ex(net.g, dev, plan);
    ex.initialize(3);
    Program step = build_program(net.g, default_order(net.g));
    dev.fail_node = "relu";
    EXPECT_EQ(error_of([&] { ex.run(step); }), "on the compute stream: relu 'relu': injected kernel failure");
    // The device and the executor recover: the next step runs and measures right.
    dev.fail_node.clear();
    StepStats st = ex.run(step);
    EXPECT_EQ(st.peak_live_bytes, plan.lower_bound);
    EXPECT_EQ(dev.counters().live_bytes, plan.persistent_bytes);
}

// Two streams: fc1 and its bias on the swap-in stream (slowed down), the rest
// on the compute stream, ordered by one event.
Program two_stream_program(bool with_event) {
    Program p;
    p.num_events = 1;
    p.instructions.push_back(Instruction::compute(0, StreamKind::SwapIn));
    p.instructions.push_back(Instruction::compute(1, StreamKind::SwapIn));
    if (with_event) {
        p.instructions.push_back(Instruction::record(0, StreamKind::SwapIn));
        p.instructions.push_back(Instruction::wait(0, StreamKind::Compute));
    }
    for (NodeId n = 2; n < 8; n++) p.instructions.push_back(Instruction::compute(n, StreamKind::Compute));
    return p;
}

TEST(Program, TwoStreamsOrderedByAnEventComputeTheSameResult) {
    TinyNet net;
    std::vector<float> x = random_floats(TinyNet::N * TinyNet::I, 8);
    std::vector<int32_t> labels = {1, 1, 0, 2};
    auto run = [&](const Program &p, bool slow) {
        InterferingDevice dev(1 << 20);
        dev.slow = slow;
        dev.slow_stream = StreamKind::SwapIn;
        Executor ex(net.g, dev, plan_memory(net.g, default_order(net.g)));
        ex.initialize(4);
        ex.write(net.x, x.data(), x.size() * 4);
        ex.write(net.labels, labels.data(), labels.size() * 4);
        ex.run(p);
        std::vector<float> out = ex.read_vector<float>(net.logits);
        std::vector<float> w2 = ex.read_vector<float>(net.w2);
        out.insert(out.end(), w2.begin(), w2.end());
        return out;
    };
    std::vector<float> one_stream = run(build_program(net.g, default_order(net.g)), false);
    // The swap-in stream's kernels are held back 30 ms each; without the
    // event the compute stream would read h before it is written.
    EXPECT_EQ(run(two_stream_program(true), true), one_stream);
}

TEST(Program, AProgramThatWouldRaceIsRejected) {
    TinyNet net;
    std::string msg = error_of([&] { check_program(net.g, two_stream_program(false)); });
    EXPECT_EQ(msg, "program instruction 2 (compute 'relu' on the compute stream) reads 'fc1.bias', which instruction "
                   "1 computes on the swap-in stream, with no event between them: the two would race. Record an "
                   "event after instruction 1 and wait for it on the compute stream before instruction 2");
    EXPECT_NO_THROW(check_program(net.g, two_stream_program(true)));
}

TEST(Program, ChecksEventsNodesAndSwaps) {
    TinyNet net;
    Program p = build_program(net.g, default_order(net.g));
    Program bad = p;
    bad.instructions.insert(bad.instructions.begin(), Instruction::wait(0, StreamKind::Compute));
    bad.num_events = 1;
    EXPECT_EQ(error_of([&] { check_program(net.g, bad); }),
              "program instruction 0 (wait e0 on the compute stream): waits for event 0, which no earlier "
              "instruction records; the wait would do nothing");
    bad = p;
    bad.instructions.push_back(Instruction::record(3, StreamKind::Comm));
    EXPECT_EQ(error_of([&] { check_program(net.g, bad); }),
              "program instruction 8 (record e3 on the comm stream): event 3 does not exist; the program has 0 events");
    bad = p;
    bad.instructions.push_back(bad.instructions[2]);
    EXPECT_EQ(error_of([&] { check_program(net.g, bad); }),
              "program instruction 8 (compute 'relu' on the compute stream): the node is computed twice");
    bad = p;
    std::swap(bad.instructions[1], bad.instructions[2]);
    EXPECT_EQ(error_of([&] { check_program(net.g, bad); }),
              "program instruction 1 (compute 'relu' on the compute stream) reads 'fc1.bias', but its producer "
              "'fc1.bias' is not computed before it");
    bad = p;
    bad.instructions.push_back(Instruction::swap_out(999, 0, 64));
    EXPECT_EQ(error_of([&] { check_program(net.g, bad); }),
              "program instruction 8 (swap-out on the swap-out stream): tensor 999 does not exist; the graph has " +
                  std::to_string(net.g.num_tensors()) + " tensors");
    bad = p;
    bad.instructions.push_back(Instruction::swap_in(net.h, -64, 0, 80));
    EXPECT_EQ(error_of([&] { check_program(net.g, bad); }),
              "program instruction 8 (swap-in 'fc1' on the swap-in stream): arena offset -64 is negative; a swap-in "
              "needs the arena offset it copies to");
    bad = p;
    bad.instructions.push_back(Instruction::swap_out(net.h, -1, 80));
    EXPECT_EQ(error_of([&] { check_program(net.g, bad); }),
              "program instruction 8 (swap-out 'fc1' on the swap-out stream): bytes (80) and host offset (-1) must "
              "not be negative");
    bad = p;
    bad.place = {0, 64};
    EXPECT_EQ(error_of([&] { check_program(net.g, bad); }),
              "program: 'place' has 2 entries but the graph has " + std::to_string(net.g.num_tensors()) +
                  " tensors; give one offset per tensor (-1: the memory plan's), or none");
    // An operator is not a collective, nor the other way round.
    bad = p;
    bad.instructions.push_back(Instruction::collective(bad.instructions[0].node));
    EXPECT_NE(error_of([&] { check_program(net.g, bad); }).find("is an operator, run as a compute instruction"),
              std::string::npos);
    EXPECT_EQ(error_of([&] { build_program_for(net.g, {0, 1, 2}, {net.loss}); }),
              "build_program_for: target 'loss' is computed by node 'loss', which is not in the node order");
}

TEST(Program, PrintsOneLinePerInstruction) {
    TinyNet net;
    std::string s = two_stream_program(true).to_string(net.g);
    EXPECT_EQ(s.substr(0, s.find('\n')), "program: 10 instructions on 2 streams, 1 event");
    EXPECT_NE(s.find("    0  swap-in   compute    'fc1' matmul(x, w1) -> (fc1)\n"), std::string::npos) << s;
    EXPECT_NE(s.find("    2  swap-in   record     e0\n"), std::string::npos) << s;
    EXPECT_NE(s.find("    3  compute   wait       e0\n"), std::string::npos) << s;
    EXPECT_NE(s.find("'w2.update' sgd_momentum(w2, dw2, w2.momentum) -> (w2.update:0, w2.update:1)"),
              std::string::npos)
        << s;
}

TEST(Program, RoundTripsThroughJson) {
    Program p = two_stream_program(true);
    p.instructions.push_back(Instruction::swap_in(3, 256, 4096, 128));
    p.instructions.push_back(Instruction::swap_out(3, 4096, 128, 256));
    p.instructions.push_back(Instruction::swap_out(3, 4096, 128));
    nlohmann::json j = program_to_json(p);
    EXPECT_EQ(program_from_json(nlohmann::json::parse(j.dump())), p);
    p.place.assign(16, -1);
    p.place[3] = 512;
    j = program_to_json(p);
    EXPECT_EQ(program_from_json(nlohmann::json::parse(j.dump())), p);
    j["place"][1] = "x";
    EXPECT_EQ(error_of([&] { program_from_json(j, "step.json"); }), "step.json: place[1] must be an integer, got \"x\"");
    p.place.clear();
    j["instructions"][0]["kind"] = "teleport";
    EXPECT_EQ(error_of([&] { program_from_json(j, "step.json"); }),
              "step.json: instruction 0: unknown instruction kind 'teleport'; expected compute, record, wait, "
              "swap-out, swap-in or collective");
    j = program_to_json(p);
    j["instructions"][2].erase("event");
    EXPECT_EQ(error_of([&] { program_from_json(j, "step.json"); }),
              "step.json: instruction 2 (record) needs an integer field 'event'");
}

TEST(Executor, InitializeFollowsEachTensorsInitAndSeed) {
    TinyNet net;
    CpuDevice dev(1 << 20);
    Executor ex(net.g, dev, plan_memory(net.g, default_order(net.g)));
    ex.initialize(123);
    std::vector<float> want(TinyNet::I * TinyNet::H);
    fill_init(Init::he_normal(TinyNet::I), 123, "w1", want.data(), static_cast<int64_t>(want.size()));
    EXPECT_EQ(ex.read_vector<float>(net.w1), want);
    for (float v : ex.read_vector<float>(net.v2)) EXPECT_EQ(v, 0.0f);
    EXPECT_EQ(ex.read_vector<float>(net.dloss), std::vector<float>{1.0f});
    for (int32_t v : ex.read_vector<int32_t>(net.labels)) EXPECT_EQ(v, 0);
    std::vector<float> b1 = ex.read_vector<float>(net.b1);
    ex.initialize(124);
    EXPECT_NE(ex.read_vector<float>(net.b1), b1);
    ex.initialize(123);
    EXPECT_EQ(ex.read_vector<float>(net.b1), b1);
}

TEST(Executor, ReusesPreparedProgramsAndTheirEvents) {
    // One executor alternates a two-stream and a one-stream program, so the
    // cached program's event is re-recorded every other step; another runs the
    // one-stream program only. They must train identically.
    TinyNet net;
    std::vector<float> x = random_floats(TinyNet::N * TinyNet::I, 2);
    std::vector<int32_t> labels = {2, 0, 1, 1};
    CpuDevice dev1(1 << 20), dev2(1 << 20);
    MemoryPlan plan = plan_memory(net.g, default_order(net.g));
    Executor ex1(net.g, dev1, plan), ex2(net.g, dev2, plan);
    for (Executor *ex : {&ex1, &ex2}) {
        ex->initialize(1);
        ex->write(net.x, x.data(), x.size() * 4);
        ex->write(net.labels, labels.data(), labels.size() * 4);
    }
    Program p = two_stream_program(true), q = build_program(net.g, default_order(net.g));
    std::vector<float> w2_start = ex1.read_vector<float>(net.w2);
    for (int i = 0; i < 20; i++) {
        ex1.run(i % 2 ? q : p);
        ex2.run(q);
    }
    EXPECT_EQ(ex1.read_vector<float>(net.w2), ex2.read_vector<float>(net.w2));
    EXPECT_NE(ex1.read_vector<float>(net.w2), w2_start) << "it trained";
}

}  // namespace
}  // namespace tessera
