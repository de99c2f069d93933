// The executor's paths for a device like CUDA's, run on the CPU: a device
// whose arena the host cannot address (collectives stage through pinned host
// buffers) and whose stream host work is expensive (the counters are replayed
// on the host after the step). StagedCpuDevice is a CPU device that says both,
// so CI runs those paths without a GPU; each run is compared bit for bit with
// the plain CPU device.
#include <gtest/gtest.h>

#include <algorithm>
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

namespace tessera {
namespace {

class StagedCpuDevice final : public Device {
public:
    explicit StagedCpuDevice(int64_t arena) : cpu_(arena) {}
    std::string name() const override { return "staged-cpu"; }
    int64_t arena_bytes() const override { return cpu_.arena_bytes(); }
    std::byte *arena() override { return cpu_.arena(); }
    bool host_can_address_arena() const override { return false; }
    bool cheap_stream_host_work() const override { return false; }
    Stream &stream(StreamKind kind) override { return cpu_.stream(kind); }
    std::unique_ptr<Event> create_event() override { return cpu_.create_event(); }
    void *native_stream(StreamKind kind) override { return &cpu_.stream(kind); }

protected:
    void do_copy_to_device(void *dst, const void *src, size_t bytes) override {
        cpu_.copy_to_device(dst, src, bytes);
    }
    void do_copy_to_host(void *dst, const void *src, size_t bytes) override { cpu_.copy_to_host(dst, src, bytes); }

private:
    CpuDevice cpu_;
};

// Stands in for NCCL: all-reduces issued onto the stream that native_stream()
// gave (here the CPU device's Stream), run there by a host communicator.
class OnStreamCommunicator final : public Communicator {
public:
    explicit OnStreamCommunicator(Communicator &inner) : Communicator(inner.rank(), inner.size()), inner_(inner) {}
    const char *backend() const override { return "on-stream"; }
    bool enqueue_all_reduce(float *data, size_t count, const Group &g, void *stream) override {
        issued++;
        static_cast<Stream *>(stream)->enqueue([this, data, count, g] { inner_.all_reduce(data, count, g); });
        return true;
    }
    int issued = 0;

protected:
    void exchange(const void *, size_t, int, void *, size_t, int, CommOp, const Group &) override {
        fail("the on-stream communicator only all-reduces");
    }

private:
    Communicator &inner_;
};

Graph training_graph(const std::string &spec, int64_t batch) {
    Model m = build_model(spec, batch);
    OptimizerConfig cfg;
    cfg.kind = OptimizerConfig::Kind::Adam;
    cfg.lr = 0.01;
    make_training_graph(m.graph, m.loss, cfg);
    return std::move(m.graph);
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
// communicator, all-reduces instead run on device memory, issued onto the comm
// stream. Each is bit-identical to the plain CPU device.
enum class Comm { Cpu, Staged, StagedWithDeviceComm };

void check_partitioned(PartitionStrategy strategy, bool expect_all_reduce) {
    Graph g = training_graph("mlp:hidden=64", 8);
    PartitionOptions po;
    po.strategy = strategy;
    po.executable = true;
    Plan plan = partition(g, flat_machine(2), po);
    std::map<Comm, std::vector<TrainRun>> runs;
    std::vector<int64_t> planned(2);
    std::vector<int> issued(2);
    for (Comm mode : {Comm::Cpu, Comm::Staged, Comm::StagedWithDeviceComm}) {
        auto comms = make_thread_communicators(2);
        std::vector<std::thread> threads;
        std::vector<std::string> errors(2);
        runs[mode].resize(2);
        for (int r = 0; r < 2; r++)
            threads.emplace_back([&, r] {
                try {
                    DeviceGraph dg = lower(g, plan, r);
                    planned[r] = dg.comm_bytes;
                    std::vector<NodeId> order = default_order(dg.graph);
                    MemoryPlan mp = plan_memory(dg.graph, order);
                    std::unique_ptr<Device> dev;
                    if (mode == Comm::Cpu) dev = std::make_unique<CpuDevice>(mp.arena_bytes);
                    else dev = std::make_unique<StagedCpuDevice>(mp.arena_bytes);
                    OnStreamCommunicator on_stream(*comms[r]);
                    Executor ex(dg.graph, *dev, mp);
                    ex.set_communicator(comms[r].get());
                    if (mode == Comm::StagedWithDeviceComm) ex.set_device_communicator(&on_stream);
                    runs[mode][r] = train(ex, build_program(dg.graph, order), 3, r);
                    if (mode == Comm::StagedWithDeviceComm) issued[r] = on_stream.issued;
                } catch (const std::exception &e) {
                    errors[r] = e.what();
                }
            });
        for (auto &t : threads) t.join();
        for (int r = 0; r < 2; r++) ASSERT_EQ(errors[r], "") << "rank " << r;
    }
    for (int r = 0; r < 2; r++) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_GT(planned[r], 0);
        if (expect_all_reduce) {
            EXPECT_GT(issued[r], 0);
        }
        const std::vector<TrainRun> &want = runs[Comm::Cpu];
        for (Comm mode : {Comm::Staged, Comm::StagedWithDeviceComm}) {
            const std::vector<TrainRun> &got = runs[mode];
            ASSERT_EQ(want[r].values.size(), got[r].values.size());
            for (size_t k = 0; k < want[r].values.size(); k++)
                EXPECT_TRUE(want[r].values[k] == got[r].values[k]) << "mode " << int(mode) << " value " << k;
            for (size_t s = 0; s < got[r].stats.size(); s++) {
                EXPECT_EQ(got[r].stats[s].comm_bytes, planned[r]) << "mode " << int(mode) << " step " << s;
                EXPECT_EQ(got[r].stats[s].arena_high_water, want[r].stats[s].arena_high_water) << "step " << s;
            }
        }
    }
}

TEST(StagedDevice, TofuPartitionedTrainingStagesCollectivesThroughHostMemory) {
    check_partitioned(PartitionStrategy::Tofu, false);
}

TEST(StagedDevice, DataParallelAllReducesRunOnDeviceMemoryThroughTheDeviceCommunicator) {
    check_partitioned(PartitionStrategy::DataParallel, true);
}

}  // namespace
}  // namespace tessera
