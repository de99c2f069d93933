// The CUDA device on a real GPU (label gpu): every GPU kernel against the CPU
// kernel, the streams and events, the copies, the errors, and training on the
// device against training on the CPU. Every test skips when no GPU is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "gpu_cases/cases.h"
#include "tessera/error.h"
#include "tessera/exec/cpu_device.h"
#include "tessera/exec/cuda_device.h"
#include "tessera/exec/executor.h"
#include "tessera/exec/profile.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"
#include "tessera/swap/swap_plan.h"
#include "tessera/swap/swap_program.h"
#include "test_graphs.h"

namespace tessera::test {
namespace {

#define REQUIRE_GPU()                                                                      \
    do {                                                                                   \
        if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU: " << cuda_unavailable_reason(); \
    } while (0)

int64_t align(int64_t b) { return (b + 255) / 256 * 256; }

TEST(CudaDevice, EveryKernelMatchesTheCpuKernel) {
    REQUIRE_GPU();
    auto dev = make_cuda_device(0, int64_t{256} << 20);
    int checked = 0;
    for (const GpuCase &c : all_gpu_cases()) {
        SCOPED_TRACE(c.label);
        std::vector<std::vector<std::byte>> host_in;
        std::vector<TensorRef> cpu_in, gpu_in, cpu_out, gpu_out;
        int64_t off = 0;
        for (size_t i = 0; i < c.inputs.size(); i++) {
            const TensorType &t = c.inputs[i];
            std::vector<float> f;
            std::vector<int32_t> n;
            case_input(c, static_cast<int>(i), 1234, f, n);
            std::vector<std::byte> bytes(static_cast<size_t>(t.bytes()));
            if (!bytes.empty()) std::memcpy(bytes.data(), t.dtype == DType::F32 ? (void *)f.data() : (void *)n.data(), bytes.size());
            host_in.push_back(std::move(bytes));
            cpu_in.push_back({host_in.back().data(), t});
            gpu_in.push_back({dev->arena() + off, t});
            if (t.bytes() > 0) dev->copy_to_device(gpu_in.back().data, host_in.back().data(), host_in.back().size());
            off += align(t.bytes());
        }
        std::vector<TensorType> types = infer_types(c.call, c.inputs);
        std::vector<std::vector<std::byte>> want, got;
        for (const TensorType &t : types) {
            want.emplace_back(static_cast<size_t>(t.bytes()));
            got.emplace_back(static_cast<size_t>(t.bytes()));
            cpu_out.push_back({want.back().data(), t});
            gpu_out.push_back({dev->arena() + off, t});
            off += align(t.bytes());
        }
        ASSERT_LE(off, dev->arena_bytes());
        run_op(c.call, cpu_in, cpu_out);
        dev->launch_op(StreamKind::Compute, c.call, gpu_in, gpu_out);
        dev->synchronize();
        for (size_t o = 0; o < types.size(); o++) {
            if (types[o].bytes() > 0) dev->copy_to_host(got[o].data(), gpu_out[o].data, got[o].size());
            if (types[o].dtype == DType::I32) {
                EXPECT_TRUE(want[o] == got[o]) << "output " << o;
                continue;
            }
            const auto *w = reinterpret_cast<const float *>(want[o].data());
            const auto *g = reinterpret_cast<const float *>(got[o].data());
            int bad = 0;
            for (int64_t e = 0; e < types[o].elements() && bad < 5; e++)
                if (!(std::fabs(double(g[e]) - w[e]) <= c.atol + c.rtol * std::fabs(double(w[e])))) {
                    ADD_FAILURE() << "output " << o << " element " << e << ": gpu " << g[e] << ", cpu " << w[e];
                    bad++;
                }
        }
        checked++;
    }
    std::printf("%d GPU kernel cases checked on %s\n", checked, cuda_device_info(0).name.c_str());
}

TEST(CudaDevice, StreamsOrderWorkThroughEventsAndCopiesRoundTrip) {
    REQUIRE_GPU();
    auto dev = make_cuda_device(0, int64_t{64} << 20);
    const size_t n = 1 << 20;
    PinnedBuffer a = dev->allocate_host(n * 4), b = dev->allocate_host(n * 4);
    auto *src = reinterpret_cast<float *>(a.data());
    for (size_t i = 0; i < n; i++) src[i] = static_cast<float>(i % 1000) - 500.0f;
    std::byte *x = dev->arena(), *y = dev->arena() + n * 4;
    TensorType t{DType::F32, {static_cast<int64_t>(n)}};
    // swap-in brings x in; compute waits for it, applies relu into y; swap-out waits for compute.
    auto in_done = dev->create_event(), relu_done = dev->create_event();
    dev->copy_async(StreamKind::SwapIn, x, a.data(), n * 4, CopyDirection::HostToDevice);
    dev->stream(StreamKind::SwapIn).record(*in_done);
    dev->stream(StreamKind::Compute).wait(*in_done);
    OpCall relu{OpKind::Relu, "relu", {}};
    std::vector<TensorRef> ins{{x, t}}, outs{{y, t}};
    dev->launch_op(StreamKind::Compute, relu, ins, outs);
    dev->stream(StreamKind::Compute).record(*relu_done);
    dev->stream(StreamKind::SwapOut).wait(*relu_done);
    dev->copy_async(StreamKind::SwapOut, b.data(), y, n * 4, CopyDirection::DeviceToHost);
    dev->synchronize();
    EXPECT_TRUE(relu_done->query());
    const auto *got = reinterpret_cast<const float *>(b.data());
    for (size_t i = 0; i < n; i += 997) ASSERT_EQ(got[i], std::max(src[i], 0.0f)) << i;
}

TEST(CudaDevice, HostWorkErrorsAreReportedWithTheirStream) {
    REQUIRE_GPU();
    auto dev = make_cuda_device(0, 1 << 20);
    bool later_ran = false;
    dev->stream(StreamKind::Comm).enqueue([] { fail("peer went away"); });
    dev->stream(StreamKind::Comm).enqueue([&] { later_ran = true; });
    try {
        dev->synchronize();
        FAIL() << "no error";
    } catch (const Error &e) {
        EXPECT_STREQ(e.what(), "on the comm stream: peer went away");
    }
    EXPECT_FALSE(later_ran);
    dev->synchronize();  // usable again
}

TEST(CudaDevice, AnArenaLargerThanTheGpuIsAClearError) {
    REQUIRE_GPU();
    CudaDeviceInfo info = cuda_device_info(0);
    try {
        make_cuda_device(0, info.total_bytes + (int64_t{1} << 30));
        FAIL() << "no error";
    } catch (const Error &e) {
        std::string m = e.what();
        EXPECT_NE(m.find("cannot allocate the cuda:0 arena"), std::string::npos) << m;
        EXPECT_NE(m.find(info.name), std::string::npos) << m;
        EXPECT_NE(m.find("use a smaller --device-mem"), std::string::npos) << m;
    }
    // Copies outside the arena are refused before they reach CUDA.
    auto dev = make_cuda_device(0, 1 << 20);
    std::vector<std::byte> host(64);
    EXPECT_THROW(dev->copy_to_device(dev->arena() + (1 << 20), host.data(), 64), Error);
}

// ---- training on the device against training on the CPU ----

Graph training_graph(const std::string &spec, int64_t batch) {
    Model m = build_model(spec, batch);
    OptimizerConfig cfg;
    cfg.kind = OptimizerConfig::Kind::Adam;
    cfg.lr = 0.001;
    make_training_graph(m.graph, m.loss, cfg);
    return std::move(m.graph);
}

std::vector<float> losses(Executor &ex, const Program &p, int steps) {
    std::vector<float> out;
    ex.initialize(3);
    for (int s = 0; s < steps; s++) {
        feed_random(ex, s, 1000 + s);
        ex.run(p);
        out.push_back(ex.read_vector<float>(ex.graph().output("loss"))[0]);
    }
    return out;
}

TEST(CudaDevice, EveryModelTrainsLikeOnTheCpu) {
    REQUIRE_GPU();
    for (const char *spec : {"mlp:hidden=64", "cnn:channels=4,hidden=16", "lstm:hidden=32,seq=4,vocab=50",
                             "transformer:layers=1,d_model=32,heads=2,seq=8,vocab=50",
                             "wresnet:depth=10,base=4,image=16"}) {
        SCOPED_TRACE(spec);
        Graph g = training_graph(spec, 8);
        std::vector<NodeId> order = default_order(g);
        MemoryPlan plan = plan_memory(g, order);
        Program p = build_program(g, order);
        CpuDevice cpu(plan.arena_bytes);
        auto gpu = make_cuda_device(0, plan.arena_bytes);
        Executor a(g, cpu, plan), b(g, *gpu, plan);
        std::vector<float> want = losses(a, p, 5), got = losses(b, p, 5);
        for (size_t s = 0; s < want.size(); s++)
            EXPECT_NEAR(got[s], want[s], 1e-4 * std::max(1.0f, std::fabs(want[s]))) << "step " << s;
    }
}

TEST(CudaDevice, SwappedTrainingIsBitIdenticalToUnswappedOnTheGpu) {
    REQUIRE_GPU();
    Graph g = training_graph("mlp:layers=20,hidden=64", 16);
    std::vector<NodeId> order = default_order(g);
    MemoryPlan full = plan_memory(g, order);
    auto dev_full = make_cuda_device(0, full.arena_bytes);
    Executor ref(g, *dev_full, full);
    std::vector<float> want = losses(ref, build_program(g, order), 4);
    SwapProblem pr;
    pr.graph = &g;
    pr.order = order;
    pr.node_time_s = profile_nodes(g, order, *dev_full);
    pr.h2d_bytes_per_s = measure_copy_bandwidth(*dev_full, CopyDirection::HostToDevice, 1 << 20);
    pr.d2h_bytes_per_s = measure_copy_bandwidth(*dev_full, CopyDirection::DeviceToHost, 1 << 20);
    pr.budget = full.arena_bytes;
    pr.budget = std::max((full.arena_bytes / 4 + 255) / 256 * 256, min_swap_budget(pr));
    SwapPlan plan = plan_swaps(pr, SwapOptions{});
    SwapRun run = build_swap_run(g, plan);
    auto dev = make_cuda_device(0, pr.budget);
    Executor ex(g, *dev, run.memory);
    std::vector<float> got = losses(ex, run.train, 4);
    EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace tessera::test
