// The executor's paths for a device like CUDA's, run on the CPU: a device
// whose arena the host cannot address (collectives stage through pinned host
// buffers) and whose stream host work is expensive (the counters are replayed
// on the host after the step). StagedCpuDevice is a CPU device that says both,
// so CI runs those paths without a GPU; each run is compared bit for bit with
// the plain CPU device.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <latch>
#include <map>
#include <random>
#include <thread>

#include "tessera/comm/communicator.h"
#include "tessera/error.h"
#include "tessera/exec/cpu_device.h"
#include "tessera/exec/executor.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"
#include "tessera/partition/lower.h"
#include "tessera/partition/partition.h"
#include "tessera/swap/swap_plan.h"
#include "tessera/swap/swap_program.h"
#include "test_graphs.h"
#include "zoo_training_graph.h"

namespace tessera {
namespace {

class StagedCpuDevice final : public Device {
public:
    // A comm workspace of `comm_bytes` (default: the device default) lets a
    // test force collectives on device memory into many small chunks.
    explicit StagedCpuDevice(int64_t arena, size_t comm_bytes = kDefaultCommWorkspaceBytes)
        : cpu_(arena), comm_bytes_(comm_bytes) {}
    std::string name() const override { return "staged-cpu"; }
    int64_t arena_bytes() const override { return cpu_.arena_bytes(); }
    std::byte *arena() override { return cpu_.arena(); }
    bool host_can_address_arena() const override { return false; }
    bool cheap_stream_host_work() const override { return false; }
    Stream &stream(StreamKind kind) override { return cpu_.stream(kind); }
    std::unique_ptr<Event> create_event() override { return cpu_.create_event(); }
    void *native_stream(StreamKind kind) override { return &cpu_.stream(kind); }
    size_t comm_workspace_bytes() const override { return comm_bytes_; }

protected:
    void do_copy_to_device(void *dst, const void *src, size_t bytes) override {
        cpu_.copy_to_device(dst, src, bytes);
    }
    void do_copy_to_host(void *dst, const void *src, size_t bytes) override { cpu_.copy_to_host(dst, src, bytes); }

private:
    CpuDevice cpu_;
    size_t comm_bytes_;
};

// Stands in for NCCL: collectives issued onto the stream that native_stream()
// gave (here the CPU device's Stream), run there by a host communicator on
// the buffers as they are then (the staged device's "device memory" is host
// memory). It records what was issued, and whether a sub-group's collective
// came before the group was prepared.
class OnStreamCommunicator final : public Communicator {
public:
    explicit OnStreamCommunicator(Communicator &inner) : Communicator(inner.rank(), inner.size()), inner_(inner) {}
    const char *backend() const override { return "on-stream"; }
    // Each counted when issued, as NCCL counts: the host algorithms' bytes.
    bool enqueue_all_reduce(float *data, size_t count, const Group &g, void *stream) override {
        counted(CommOp::AllReduce, all_reduce_bytes(count, g));
        return issue("all_reduce", g, stream, [=, this] { inner_.all_reduce(data, count, g); });
    }
    bool enqueue_all_reduce_f64(double *data, size_t count, const Group &g, void *stream) override {
        counted(CommOp::AllReduce, 2 * all_reduce_bytes(count, g));
        return issue("all_reduce_f64", g, stream, [=, this] { inner_.all_reduce_f64(data, count, g); });
    }
    bool enqueue_all_reduce_max(float *data, size_t count, const Group &g, void *stream) override {
        counted(CommOp::AllReduce, all_reduce_bytes(count, g));
        return issue("all_reduce_max", g, stream, [=, this] { inner_.all_reduce(data, count, g, ReduceOp::Max); });
    }
    bool enqueue_all_reduce_many(const std::vector<void *> &bufs, const std::vector<size_t> &counts, bool f64,
                                 ReduceOp reduce, const Group &g, void *stream) override {
        count_call(CommOp::AllReduce);
        for (size_t n : counts) count(CommOp::AllReduce, (f64 ? 2 : 1) * all_reduce_bytes(n, g));
        return issue("all_reduce_many", g, stream, [=, this] {
            std::vector<float *> floats;
            std::vector<double *> doubles;
            for (void *b : bufs) (f64 ? (void)doubles.push_back(static_cast<double *>(b))
                                      : (void)floats.push_back(static_cast<float *>(b)));
            if (f64) inner_.all_reduce_many_f64(doubles, counts, g);
            else inner_.all_reduce_many(floats, counts, g, reduce);
        });
    }
    bool enqueue_reduce_scatter(const float *in, float *out, const std::vector<size_t> &counts, const Group &g,
                                void *stream) override {
        counted(CommOp::ReduceScatter, g.size() == 1 ? 0 : reduce_scatter_bytes(counts, g.index_of(rank())));
        return issue("reduce_scatter", g, stream, [=, this] { inner_.reduce_scatter(in, out, counts, g); });
    }
    bool enqueue_exchange(const std::vector<Transfer> &sends, const std::vector<Transfer> &recvs,
                          void *stream) override {
        if (sends.size() > 1 || recvs.size() > 1) fail("the stand-in sends and receives one piece at a time");
        counted(CommOp::SendRecv, sends.empty() ? 0 : static_cast<int64_t>(sends[0].bytes));
        return issue("exchange", world_group(), stream, [=, this] {
            if (!sends.empty() && !recvs.empty())
                inner_.sendrecv(sends[0].data, sends[0].bytes, sends[0].peer, recvs[0].data, recvs[0].bytes,
                                recvs[0].peer);
            else if (!sends.empty()) inner_.send(sends[0].data, sends[0].bytes, sends[0].peer);
            else if (!recvs.empty()) inner_.recv(recvs[0].data, recvs[0].bytes, recvs[0].peer);
        });
    }
    void prepare_group(const Group &g) override { prepared.push_back(g.ranks); }

    std::map<std::string, int> issued;  // by operation
    std::vector<std::vector<int>> prepared;
    bool unprepared_group = false;  // a sub-group's collective before its prepare_group

protected:
    void exchange(const void *, size_t, int, void *, size_t, int, CommOp, const Group &) override {
        fail("the on-stream communicator only issues onto streams");
    }

private:
    int64_t all_reduce_bytes(size_t count, const Group &g) const {
        return g.size() == 1 ? 0 : algorithm_bytes(CommOp::AllReduce, count, g.size(), g.index_of(rank()));
    }
    void counted(CommOp op, int64_t bytes) {
        count_call(op);
        count(op, bytes);
    }
    template <class Work>
    bool issue(const char *op, const Group &g, void *stream, Work work) {
        issued[op]++;
        if (g.size() < size() && std::find(prepared.begin(), prepared.end(), g.ranks) == prepared.end())
            unprepared_group = true;
        static_cast<Stream *>(stream)->enqueue(work);
        return true;
    }
    Communicator &inner_;
};

Graph training_graph(const std::string &spec, int64_t batch) {
    return test::zoo_training_graph(spec, batch, test::optimizer_config(OptimizerConfig::Kind::Adam, 0.01));
}

std::vector<std::byte> read_bytes(Executor &ex, TensorId t) {
    std::vector<std::byte> v(static_cast<size_t>(ex.graph().tensor(t).type.bytes()));
    ex.read(t, v.data(), v.size());
    return v;
}

struct TrainRun {
    std::vector<std::vector<std::byte>> values;  // loss per step, then every persistent tensor
    std::vector<StepStats> stats;
};

TrainRun train(Executor &ex, const Program &p, int steps, int rank = 0) {
    TrainRun r;
    ex.initialize(7);
    for (int s = 0; s < steps; s++) {
        test::feed_random(ex, s, static_cast<uint32_t>(100 * rank + s));
        r.stats.push_back(ex.run(p));
        r.values.push_back(read_bytes(ex, ex.graph().output("loss")));
    }
    std::vector<bool> persistent = persistent_tensors(ex.graph());
    for (TensorId t = 0; t < ex.graph().num_tensors(); t++)
        if (persistent[t] && storage_root(ex.graph(), t) == t) r.values.push_back(read_bytes(ex, t));
    return r;
}

TEST(StagedDevice, SwappedTrainingMatchesTheCpuDeviceAndCountsTheSame) {
    Graph g = training_graph("mlp:layers=20,hidden=64", 16);
    const std::vector<NodeId> order = default_order(g);
    const int64_t full = plan_memory(g, order).arena_bytes;
    SwapProblem pr;
    pr.graph = &g;
    pr.order = order;
    pr.node_time_s.assign(g.num_nodes(), 1e-6);
    pr.h2d_bytes_per_s = pr.d2h_bytes_per_s = 1e9;
    pr.budget = full;
    pr.budget = std::max((full / 4 + 63) / 64 * 64, min_swap_budget(pr));
    ASSERT_LT(pr.budget, full * 3 / 4);
    SwapOptions so;
    so.generations = 3;
    so.population = 6;
    SwapPlan plan = plan_swaps(pr, so);
    SwapRun run = build_swap_run(g, plan);

    CpuDevice cpu(pr.budget);
    StagedCpuDevice staged(pr.budget);
    Executor a(g, cpu, run.memory), b(g, staged, run.memory);
    TrainRun want = train(a, run.train, 3), got = train(b, run.train, 3);
    ASSERT_EQ(want.values.size(), got.values.size());
    for (size_t k = 0; k < want.values.size(); k++) EXPECT_TRUE(want.values[k] == got.values[k]) << "value " << k;
    for (size_t s = 0; s < want.stats.size(); s++) {
        SCOPED_TRACE("step " + std::to_string(s));
        EXPECT_EQ(got.stats[s].arena_high_water, want.stats[s].arena_high_water);
        EXPECT_EQ(got.stats[s].arena_high_water, plan.high_water);
        EXPECT_EQ(got.stats[s].swap_out_bytes, plan.swap_out_bytes);
        EXPECT_EQ(got.stats[s].swap_in_bytes, plan.swap_in_bytes);
        EXPECT_GT(got.stats[s].swap_in_bytes, 0);
        // Replayed in program order: within the arena, and at least the pinned bytes.
        EXPECT_LE(got.stats[s].peak_live_bytes, pr.budget);
        EXPECT_GE(got.stats[s].peak_live_bytes, b.persistent_bytes());
    }
    // Between steps, exactly the pinned persistent tensors are live on both.
    EXPECT_EQ(staged.counters().live_bytes, b.persistent_bytes());
    EXPECT_EQ(cpu.counters().live_bytes, a.persistent_bytes());
}

// Two ranks in threads: every collective of the staged device goes device ->
// pinned host -> communicator -> pinned host -> device; with a device
// communicator, every collective instead runs on device memory, issued onto
// the comm stream (all-reduces in place; redistributions and reduce-scatters
// packed and unpacked by box copies through the comm workspace), and the
// executor gets no host communicator at all, so nothing can stage. A comm
// workspace of 256 bytes forces every piece into many chunks. Each is
// bit-identical to the plain CPU device, and counts the planned bytes.
enum class Comm { Cpu, Staged, DeviceComm, DeviceCommSmallChunks };

struct DeviceCommRecord {
    std::map<std::string, int> issued;
    size_t groups_prepared = 0;
    bool groups_prepared_first = true;
};

TrainRun train_rank(const Graph &g, const Plan &plan, int r, Comm mode, Communicator &comm, int64_t &planned,
                    DeviceCommRecord &record) {
    DeviceGraph dg = lower(g, plan, r);
    planned = dg.comm_bytes;
    std::vector<NodeId> order = default_order(dg.graph);
    MemoryPlan mp = plan_memory(dg.graph, order);
    std::unique_ptr<Device> dev;
    if (mode == Comm::Cpu) dev = std::make_unique<CpuDevice>(mp.arena_bytes);
    else if (mode == Comm::DeviceCommSmallChunks) dev = std::make_unique<StagedCpuDevice>(mp.arena_bytes, 256);
    else dev = std::make_unique<StagedCpuDevice>(mp.arena_bytes);
    OnStreamCommunicator on_stream(comm);
    Executor ex(dg.graph, *dev, mp);
    const bool device_comm = mode == Comm::DeviceComm || mode == Comm::DeviceCommSmallChunks;
    if (device_comm) ex.set_device_communicator(&on_stream);
    else ex.set_communicator(&comm);
    TrainRun run = train(ex, build_program(dg.graph, order), 3, r);
    record.issued = on_stream.issued;
    record.groups_prepared = on_stream.prepared.size();
    record.groups_prepared_first = !on_stream.unprepared_group;
    return run;
}

// Trains `spec` partitioned over `ranks` threads in every mode; returns what
// the device communicator issued on rank 0 (and, under "prepared groups",
// how many sub-groups it was asked to make before the first step).
std::map<std::string, int> check_partitioned(const std::string &spec, PartitionStrategy strategy, int ranks = 2) {
    Graph g = training_graph(spec, 8);
    PartitionOptions po;
    po.strategy = strategy;
    po.executable = true;
    Plan plan = partition(g, flat_machine(ranks), po);
    std::map<Comm, std::vector<TrainRun>> runs;
    std::vector<int64_t> planned(ranks);
    std::map<Comm, std::vector<DeviceCommRecord>> records;
    for (Comm mode : {Comm::Cpu, Comm::Staged, Comm::DeviceComm, Comm::DeviceCommSmallChunks}) {
        auto comms = make_thread_communicators(ranks);
        std::vector<std::thread> threads;
        std::vector<std::string> errors(ranks);
        runs[mode].resize(ranks);
        records[mode].resize(ranks);
        for (int r = 0; r < ranks; r++)
            threads.emplace_back([&, r] {
                try {
                    runs[mode][r] = train_rank(g, plan, r, mode, *comms[r], planned[r], records[mode][r]);
                } catch (const std::exception &e) {
                    errors[r] = e.what();
                }
            });
        for (auto &t : threads) t.join();
        for (int r = 0; r < ranks; r++) EXPECT_EQ(errors[r], "") << "rank " << r << " mode " << int(mode);
    }
    for (int r = 0; r < ranks; r++) {
        SCOPED_TRACE("rank " + std::to_string(r));
        EXPECT_GT(planned[r], 0);
        EXPECT_TRUE(records[Comm::DeviceComm][r].groups_prepared_first);
        // 256 bytes of workspace cut the pieces into more chunks.
        const std::map<std::string, int> &whole = records[Comm::DeviceComm][r].issued,
                                          &small = records[Comm::DeviceCommSmallChunks][r].issued;
        for (const char *op : {"exchange", "reduce_scatter"})
            if (whole.count(op)) {
                EXPECT_GT(small.at(op), whole.at(op)) << op;
            }
        const std::vector<TrainRun> &want = runs[Comm::Cpu];
        for (Comm mode : {Comm::Staged, Comm::DeviceComm, Comm::DeviceCommSmallChunks}) {
            const std::vector<TrainRun> &got = runs[mode];
            EXPECT_EQ(want[r].values.size(), got[r].values.size()) << "mode " << int(mode);
            for (size_t k = 0; k < std::min(want[r].values.size(), got[r].values.size()); k++)
                EXPECT_TRUE(want[r].values[k] == got[r].values[k]) << "mode " << int(mode) << " value " << k;
            for (size_t s = 0; s < std::min(want[r].stats.size(), got[r].stats.size()); s++) {
                EXPECT_EQ(got[r].stats[s].comm_bytes, planned[r]) << "mode " << int(mode) << " step " << s;
                EXPECT_EQ(got[r].stats[s].arena_high_water, want[r].stats[s].arena_high_water) << "step " << s;
            }
        }
    }
    std::map<std::string, int> issued = records[Comm::DeviceComm][0].issued;
    issued["prepared groups"] = static_cast<int>(records[Comm::DeviceComm][0].groups_prepared);
    return issued;
}

TEST(StagedDevice, TofuPartitionedTrainingRunsEveryCollectiveOnDeviceMemory) {
    std::map<std::string, int> issued = check_partitioned("mlp:hidden=64", PartitionStrategy::Tofu);
    EXPECT_GT(issued["exchange"] + issued["reduce_scatter"], 0);
}

// Four ranks cut twice: collectives over pairs, whose groups the device
// communicator makes when the program is prepared, before any is issued.
TEST(StagedDevice, SubGroupsAreMadeBeforeTheFirstStep) {
    std::map<std::string, int> issued = check_partitioned("mlp:hidden=64", PartitionStrategy::Tofu, 4);
    EXPECT_GT(issued["prepared groups"], 0);
}

TEST(StagedDevice, DataParallelAllReducesRunOnDeviceMemoryThroughTheDeviceCommunicator) {
    std::map<std::string, int> issued = check_partitioned("mlp:hidden=64", PartitionStrategy::DataParallel);
    // The gradients and the loss go in one bucket, issued together (one NCCL group).
    EXPECT_GT(issued["all_reduce_many"], 0);
}

// Batch norm's statistics all-reduce in double; Tofu's plan for the CNN over
// three ranks redistributes unevenly.
TEST(StagedDevice, CnnCollectivesOfEveryKindRunOnDeviceMemory) {
    std::map<std::string, int> data = check_partitioned("cnn:channels=4,hidden=16", PartitionStrategy::DataParallel);
    EXPECT_GT(data["all_reduce_f64"], 0);
    std::map<std::string, int> tofu = check_partitioned("cnn:channels=4,hidden=16", PartitionStrategy::Tofu, 3);
    EXPECT_GT(tofu["exchange"] + tofu["reduce_scatter"] + tofu["all_reduce"], 0);
}

// A six-layer MLP's training graph and a swap plan for it at a quarter of
// its footprint (or the least budget that works): what the timing tests run.
struct SwappedMlp {
    Graph g = training_graph("mlp:layers=6,hidden=64", 16);
    int64_t budget = 0;
    SwapRun run;
    SwappedMlp() {
        const std::vector<NodeId> order = default_order(g);
        SwapProblem pr;
        pr.graph = &g;
        pr.order = order;
        pr.node_time_s.assign(g.num_nodes(), 1e-6);
        pr.h2d_bytes_per_s = pr.d2h_bytes_per_s = 1e9;
        budget = pr.budget = std::max((plan_memory(g, order).arena_bytes / 4 + 63) / 64 * 64, min_swap_budget(pr));
        SwapOptions so;
        so.generations = 2;
        so.population = 4;
        run = build_swap_run(g, plan_swaps(pr, so));
    }
};

// With timing on, the executor times each event wait's hand-off (from when
// its stream reached it and its record happened to when its stream went on):
// one time per instruction, 0 for every instruction but a wait, each finite
// and not negative, and some wait of a swapped step takes time (a stream
// thread woken by another). With timing off, nothing is timed.
TEST(ExecutorTiming, EventWaitsAreTimedAsHandOffs) {
    SwappedMlp m;
    const Graph &g = m.g;
    const SwapRun &run = m.run;
    CpuDevice cpu(m.budget);
    Executor ex(g, cpu, run.memory);
    ex.initialize(7);
    test::feed_random(ex, 0, 1);
    ex.run(run.train);
    EXPECT_TRUE(ex.handoff_times().empty());
    ex.set_node_timing(true);
    double waited = 0;
    for (int step = 0; step < 3; step++) {
        ex.run(run.train);
        const std::vector<double> &h = ex.handoff_times();
        ASSERT_EQ(h.size(), run.train.instructions.size());
        for (size_t i = 0; i < h.size(); i++) {
            EXPECT_TRUE(std::isfinite(h[i]) && h[i] >= 0) << i;
            if (run.train.instructions[i].kind != Instruction::Kind::EventWait) EXPECT_EQ(h[i], 0) << i;
            else waited += h[i];
        }
    }
    EXPECT_GT(waited, 0);
}

// The gaps (Executor::gap_times) are the rest of each stream's timeline: on
// one stream, a gap runs from its previous timed instruction's end to its own
// start, so each stream's gaps, operator times, transfer times and hand-offs
// are disjoint pieces of the step and add up to no more than it. A gap that
// counted a previous instruction again would break that. An event record is
// not timed: its gap is 0 (it falls in the next instruction's). On the
// single stream of an unswapped step, with nothing to wait for, they cover
// most of it in at least one of five steps (a loaded machine can delay a
// step's start or end past what any instruction sees).
TEST(ExecutorTiming, GapsAndTimesAreDisjointPiecesOfEachStream) {
    SwappedMlp m;
    const Graph &g = m.g;
    const SwapRun &run = m.run;
    const Program plain = build_program(g, default_order(g));
    const MemoryPlan plain_memory = plan_memory(g, default_order(g));
    for (int swapped = 0; swapped < 2; swapped++) {
        const Program &p = swapped ? run.train : plain;
        CpuDevice cpu(swapped ? m.budget : plain_memory.arena_bytes);
        Executor ex(g, cpu, swapped ? run.memory : plain_memory);
        ex.initialize(7);
        test::feed_random(ex, 0, 1);
        ex.set_node_timing(true);
        double most_covered = 0;  // the largest share of a step the compute stream's pieces cover
        for (int step = 0; step < 5; step++) {
            const double step_s = ex.run(p).step_time_s;
            std::array<double, kNumStreams> covered{};
            for (size_t i = 0; i < p.instructions.size(); i++) {
                const Instruction &in = p.instructions[i];
                const double gap = ex.gap_times().at(i);
                EXPECT_TRUE(std::isfinite(gap) && gap >= 0) << i;
                if (in.kind == Instruction::Kind::EventRecord) {
                    EXPECT_EQ(gap, 0) << i;
                }
                double piece = gap + ex.handoff_times()[i] + ex.transfer_times()[i];
                if (in.kind == Instruction::Kind::Compute) piece += ex.node_times()[in.node];
                covered[static_cast<size_t>(in.stream)] += piece;
            }
            for (size_t s = 0; s < covered.size(); s++) EXPECT_LE(covered[s], step_s * (1 + 1e-9)) << "stream " << s;
            most_covered = std::max(most_covered, covered[static_cast<size_t>(StreamKind::Compute)] / step_s);
        }
        if (!swapped) {
            EXPECT_GT(most_covered, 0.5);
        }
    }
}

// With timing on, the executor times each collective the host communicator
// runs: one time per instruction, above 0 for a collective and 0 for the
// rest. Two data-parallel ranks as threads; rank 1 sleeps 1 s before its
// step, so rank 0 waits for it in its first collective and times it at 0.5 s
// or more. Its own work before that takes milliseconds, but under TSan on the
// 2-core CI machine it once took 0.18 s (2026-11-27, when rank 1 slept 0.2 s
// and the bar was 0.1 s), hence the wide margin.
TEST(ExecutorTiming, CollectivesAreTimed) {
    const Graph g = training_graph("mlp:layers=2,hidden=32", 8);
    PartitionOptions po;
    po.strategy = PartitionStrategy::DataParallel;
    po.executable = true;
    const Plan plan = partition(g, flat_machine(2), po);
    auto comms = make_thread_communicators(2);
    std::vector<std::vector<double>> collective(2);
    std::latch ready(2);
    std::vector<Program> programs(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; r++)
        threads.emplace_back([&, r] {
            DeviceGraph dg = lower(g, plan, r);
            const std::vector<NodeId> order = default_order(dg.graph);
            MemoryPlan mp = plan_memory(dg.graph, order);
            CpuDevice dev(mp.arena_bytes);
            Executor ex(dg.graph, dev, mp);
            ex.set_communicator(comms[r].get());
            ex.initialize(7);
            test::feed_random(ex, 0, 1);
            ex.set_node_timing(true);
            programs[r] = build_program(dg.graph, order);
            ex.run(programs[r]);      // prepared: the timed step does no set-up
            ready.arrive_and_wait();  // only rank 1's sleep separates the ranks now
            if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
            ex.run(programs[r]);
            collective[r] = ex.transfer_times();
        });
    for (auto &t : threads) t.join();
    for (int r = 0; r < 2; r++) {
        const std::vector<Instruction> &ins = programs[r].instructions;
        ASSERT_EQ(collective[r].size(), ins.size()) << "rank " << r;
        int collectives = 0;
        for (size_t i = 0; i < ins.size(); i++)
            if (ins[i].kind == Instruction::Kind::Collective) {
                EXPECT_GT(collective[r][i], 0) << "rank " << r << " instruction " << i;
                collectives++;
            } else {
                EXPECT_EQ(collective[r][i], 0) << "rank " << r << " instruction " << i;
            }
        EXPECT_GT(collectives, 0) << "rank " << r;
    }
    const auto first = [&](int r) {
        for (size_t i = 0; i < programs[r].instructions.size(); i++)
            if (programs[r].instructions[i].kind == Instruction::Kind::Collective) return collective[r][i];
        return 0.0;
    };
    EXPECT_GE(first(0), 0.5);
}

// Each rank's run of `plan` on the CPU device, the ranks as threads.
std::vector<TrainRun> train_ranks(const Graph &g, const Plan &plan, int steps) {
    const int ranks = plan.devices;
    auto comms = make_thread_communicators(ranks);
    std::vector<TrainRun> runs(ranks);
    std::vector<std::string> errors(ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; r++)
        threads.emplace_back([&, r] {
            try {
                DeviceGraph dg = lower(g, plan, r);
                std::vector<NodeId> order = default_order(dg.graph);
                MemoryPlan mp = plan_memory(dg.graph, order);
                CpuDevice dev(mp.arena_bytes);
                Executor ex(dg.graph, dev, mp);
                ex.set_communicator(comms[r].get());
                runs[r] = train(ex, build_program(dg.graph, order), steps, r);
            } catch (const std::exception &e) {
                errors[r] = e.what();
            }
        });
    for (auto &t : threads) t.join();
    for (int r = 0; r < ranks; r++) EXPECT_EQ(errors[r], "") << "rank " << r;
    return runs;
}

float max_relative_difference(const std::vector<std::byte> &a, const std::vector<std::byte> &b) {
    EXPECT_EQ(a.size(), b.size());
    std::vector<float> x(a.size() / 4), y(b.size() / 4);
    std::memcpy(x.data(), a.data(), x.size() * 4);
    std::memcpy(y.data(), b.data(), std::min(y.size(), x.size()) * 4);
    float worst = 0;
    for (size_t i = 0; i < std::min(x.size(), y.size()); i++)
        worst = std::max(worst, std::abs(x[i] - y[i]) / std::max(1e-3f, std::abs(x[i])));
    return worst;
}

// A weight's gradient computed whole and held as partial sums (a lowering the
// search reaches where an inner level cannot split the gradient's producer;
// forced here): the members at coordinate 0 of the level keep it and the
// others zero theirs, so the update's one all-reduce sums it once. Compared
// with the plain data-parallel plan, whose gradients come out of their
// matmuls as partial sums: the same training to float rounding.
TEST(PartialSums, WholeGradientsAreKeptOnOneMember) {
    Model m = build_model("lstm:layers=1,hidden=16,seq=3,vocab=20", 8);
    make_training_graph(m.graph, m.loss, OptimizerConfig{});
    const Graph &g = m.graph;
    PartitionOptions plain;
    plain.strategy = PartitionStrategy::DataParallel;
    plain.executable = true;
    PartitionOptions forced = plain;
    forced.force = {{"lstm1.t*", "replicate"}};
    // The search's choice, but every weight group held as partial sums (its
    // domain under data parallelism: replicated, partial).
    forced.solver = [](const CutProblem &p) {
        CutSolution s = solve_dp(p);
        for (size_t v = 0; v < p.domain.size(); v++)
            if (p.domain[v] == 2) s.choice[v] = 1;
        s.cost = evaluate(p, s.choice);
        return s;
    };
    const Plan a = partition(g, flat_machine(2), plain), b = partition(g, flat_machine(2), forced);
    const TensorId dw = *g.find_tensor("lstm1.t0.matmul.dw");
    ASSERT_EQ(b.tensors[dw].layout[0], Layout::partial());
    ASSERT_EQ(b.ops[g.tensor(dw).producer].strategy[0], "replicate");
    auto zeroed = [&](int rank) {
        int count = 0;
        // Named: a range-for over lower(...).graph.nodes() read the nodes of a
        // lowered graph destroyed before the loop (ASan: stack-use-after-scope).
        const auto lowered = lower(g, b, rank);
        for (const Node &n : lowered.graph.nodes()) count += n.call.name.ends_with("#partial_addend");
        return count;
    };
    EXPECT_EQ(zeroed(0), 0);
    EXPECT_GT(zeroed(1), 0);
    const std::vector<TrainRun> want = train_ranks(g, a, 3), got = train_ranks(g, b, 3);
    for (int r = 0; r < 2; r++) {
        ASSERT_EQ(want[r].values.size(), got[r].values.size());
        for (size_t k = 0; k < want[r].values.size(); k++)
            EXPECT_LT(max_relative_difference(want[r].values[k], got[r].values[k]), 1e-5f)
                << "rank " << r << " value " << k;
    }
}

}  // namespace
}  // namespace tessera
