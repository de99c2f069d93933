// The CUDA device on a real GPU (label gpu): every GPU kernel against the CPU
// kernel, the streams and events, the copies, cuBLAS's workspace, the errors,
// and training on the device against training on the CPU. Every test opens
// with TESSERA_REQUIRE_GPU() (require_gpu.h): it skips without a GPU or a
// driver, and fails where CUDA is installed but cannot be used.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "gpu_cases/cases.h"
#include "require_gpu.h"
#include "tessera/comm/watchdog.h"
#include "tessera/error.h"
#include "tessera/exec/cpu_device.h"
#include "tessera/exec/cuda_device.h"
#include "tessera/exec/executor.h"
#include "tessera/exec/profile.h"
#include "tessera/graph/optimizer.h"
#include "tessera/lang/staged.h"
#include "tessera/models/zoo.h"
#include "tessera/swap/swap_plan.h"
#include "tessera/swap/swap_program.h"
#include "test_graphs.h"
#include "zoo_training_graph.h"

namespace tessera::test {
namespace {

int64_t align(int64_t b) { return (b + 255) / 256 * 256; }

// Runs every case on `dev` and on the CPU kernel; the number of cases checked.
int check_cases(Device &dev, const std::vector<GpuCase> &cases) {
    int checked = 0;
    for (const GpuCase &c : cases) {
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
            gpu_in.push_back({dev.arena() + off, t});
            if (t.bytes() > 0) dev.copy_to_device(gpu_in.back().data, host_in.back().data(), host_in.back().size());
            off += align(t.bytes());
        }
        std::vector<TensorType> types = infer_types(c.call, c.inputs);
        std::vector<std::vector<std::byte>> want, got;
        for (const TensorType &t : types) {
            want.emplace_back(static_cast<size_t>(t.bytes()));
            got.emplace_back(static_cast<size_t>(t.bytes()));
            cpu_out.push_back({want.back().data(), t});
            gpu_out.push_back({dev.arena() + off, t});
            off += align(t.bytes());
        }
        EXPECT_LE(off, dev.arena_bytes());
        if (off > dev.arena_bytes()) continue;
        run_op(c.call, cpu_in, cpu_out);
        dev.launch_op(StreamKind::Compute, c.call, gpu_in, gpu_out);
        dev.synchronize();
        for (size_t o = 0; o < types.size(); o++) {
            if (types[o].bytes() > 0) dev.copy_to_host(got[o].data(), gpu_out[o].data, got[o].size());
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
    return checked;
}

TEST(CudaDevice, EveryKernelMatchesTheCpuKernel) {
    TESSERA_REQUIRE_GPU();
    auto dev = make_cuda_device(0, int64_t{256} << 20);
    const int checked = check_cases(*dev, all_gpu_cases());
    std::printf("%d GPU kernel cases checked on %s\n", checked, cuda_device_info(0).name.c_str());
}

// Each convolution case through cuDNN (where an algorithm fits the workspace)
// and through the hand kernels, whichever auto would choose.
TEST(CudaDevice, ConvolutionsMatchTheCpuKernelThroughCudnnAndByHand) {
    TESSERA_REQUIRE_GPU();
    const std::vector<std::string> paths =
        cudnn_version().empty() ? std::vector<std::string>{"hand"} : std::vector<std::string>{"cudnn", "hand"};
    for (const std::string &path : paths) {
        SCOPED_TRACE("TESSERA_CONV=" + path);
        ::setenv("TESSERA_CONV", path.c_str(), 1);
        auto dev = make_cuda_device(0, int64_t{256} << 20);
        ::unsetenv("TESSERA_CONV");
        const int checked = check_cases(*dev, gpu_cases_conv());
        EXPECT_GT(checked, 0);
        std::printf("%d conv cases checked with TESSERA_CONV=%s (cuDNN %s)\n", checked, path.c_str(),
                    cudnn_version().c_str());
    }
}

// One block of each staged operator, as a partition cuts it: the block's
// input types, and each input's whole shape and the block's origin in it.
struct StagedCase {
    OpCall call;
    std::vector<TensorType> block;  // the operator's inputs on this device
    std::vector<Shape> whole, origin;
};

std::vector<StagedCase> staged_cases() {
    const TensorType c3{DType::F32, {3}}, d10{DType::F32, {10}};
    auto op = [](OpKind k) { return with_defaults(OpCall{k, op_name(k), {}}); };
    return {
        {op(OpKind::BatchNorm), {{DType::F32, {5, 3, 6, 7}}, c3, c3}, {{16, 3, 6, 7}, {3}, {3}}, {{11, 0, 0, 0}, {0}, {0}}},
        {op(OpKind::BatchNormGrad), {{DType::F32, {5, 3, 6, 7}}, {DType::F32, {5, 3, 6, 7}}, c3},
         {{16, 3, 6, 7}, {16, 3, 6, 7}, {3}}, {{11, 0, 0, 0}, {11, 0, 0, 0}, {0}}},
        {op(OpKind::BatchNormStats), {{DType::F32, {9, 3}}, c3, c3}, {{20, 3}, {3}, {3}}, {{4, 0}, {0}, {0}}},
        {op(OpKind::LayerNorm), {{DType::F32, {4, 10}}, d10, d10}, {{4, 25}, {25}, {25}}, {{0, 15}, {15}, {15}}},
        {op(OpKind::LayerNormGrad), {{DType::F32, {4, 10}}, {DType::F32, {4, 10}}, d10}, {{4, 25}, {4, 25}, {25}},
         {{0, 15}, {0, 15}, {15}}},
        {op(OpKind::Softmax), {{DType::F32, {6, 50}}}, {{6, 130}}, {{0, 80}}},
        {op(OpKind::LogSoftmax), {{DType::F32, {6, 50}}}, {{6, 130}}, {{0, 80}}},
        {op(OpKind::SoftmaxGrad), {{DType::F32, {6, 50}}, {DType::F32, {6, 50}}}, {{6, 130}, {6, 130}}, {{0, 80}, {0, 80}}},
        {op(OpKind::LogSoftmaxGrad), {{DType::F32, {6, 50}}, {DType::F32, {6, 50}}}, {{6, 130}, {6, 130}},
         {{0, 80}, {0, 80}}},
        {op(OpKind::SoftmaxXent), {{DType::F32, {6, 50}}, {DType::I32, {6}}}, {{6, 130}, {6}}, {{0, 80}, {0}}},
        {op(OpKind::SoftmaxXentGrad), {{DType::F32, {6, 50}}, {DType::I32, {6}}, {DType::F32, {}}},
         {{6, 130}, {6}, {}}, {{0, 80}, {0}, {}}},
        {op(OpKind::GlobalAvgPool), {{DType::F32, {2, 3, 5, 8}}}, {{2, 3, 12, 8}}, {{0, 0, 7, 0}}},
    };
}

// The block's data: labels in and out of this block of classes (and out of
// range), log-probabilities for log_softmax_grad's y.
std::vector<std::vector<std::byte>> staged_inputs(const StagedCase &c, std::mt19937 &rng) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<std::vector<std::byte>> host;
    for (const TensorType &t : c.block) {
        host.emplace_back(static_cast<size_t>(t.bytes()));
        if (t.dtype == DType::I32) {
            const int32_t labels[] = {3, 85, 129, 80, -2, 500};
            std::memcpy(host.back().data(), labels, host.back().size());
            continue;
        }
        auto *f = reinterpret_cast<float *>(host.back().data());
        for (int64_t e = 0; e < t.elements(); e++)
            f[e] = c.call.kind == OpKind::LogSoftmaxGrad && host.size() == 2 ? -3.0f + uniform(rng) : uniform(rng);
    }
    return host;
}

// Every phase of every staged operator (exec/src/gpu/ops_staged.h) on the
// device against the CPU's staged kernel, on one block of each operator's
// inputs (uneven: the whole shapes and origins put it inside a larger
// tensor), each phase given the CPU's earlier stages. The host test
// (gpu_staged_host_test) checks the same kernel bodies phase by phase and
// over combined blocks; this covers their launch and the device's math.
TEST(CudaDevice, EveryStagedPhaseMatchesTheCpuKernel) {
    TESSERA_REQUIRE_GPU();
    auto dev = make_cuda_device(0, int64_t{64} << 20);
    std::mt19937 rng(17);
    int checked = 0;
    for (const StagedCase &c : staged_cases()) {
        SCOPED_TRACE(c.call.name);
        std::vector<std::vector<std::byte>> host = staged_inputs(c, rng);
        std::vector<TensorType> types = c.block;
        const int stages = static_cast<int>(op_stages(c.call, c.block).size());
        ASSERT_GT(stages, 0);
        for (int p = 0; p <= stages; p++) {
            SCOPED_TRACE("phase " + std::to_string(p));
            const OpCall call = staged_call(c.call, p, c.whole, c.origin);
            const std::vector<TensorType> out_types = infer_types(call, types);
            std::vector<TensorRef> cpu_in, gpu_in, cpu_out, gpu_out;
            int64_t off = 0;
            for (size_t i = 0; i < types.size(); i++) {
                cpu_in.push_back({host[i].data(), types[i]});
                gpu_in.push_back({dev->arena() + off, types[i]});
                if (!host[i].empty()) dev->copy_to_device(gpu_in.back().data, host[i].data(), host[i].size());
                off += align(types[i].bytes());
            }
            std::vector<std::vector<std::byte>> want, got;
            for (const TensorType &t : out_types) {
                want.emplace_back(static_cast<size_t>(t.bytes()));
                got.emplace_back(static_cast<size_t>(t.bytes()));
                cpu_out.push_back({want.back().data(), t});
                gpu_out.push_back({dev->arena() + off, t});
                off += align(t.bytes());
            }
            ASSERT_LE(off, dev->arena_bytes());
            run_op(call, cpu_in, cpu_out);
            dev->launch_op(StreamKind::Compute, call, gpu_in, gpu_out);
            dev->synchronize();
            for (size_t o = 0; o < out_types.size(); o++) {
                if (!got[o].empty()) dev->copy_to_host(got[o].data(), gpu_out[o].data, got[o].size());
                const bool f64 = out_types[o].dtype == DType::F64;
                int bad = 0;
                for (int64_t e = 0; e < out_types[o].elements() && bad < 5; e++) {
                    const double w = f64 ? reinterpret_cast<const double *>(want[o].data())[e]
                                         : reinterpret_cast<const float *>(want[o].data())[e];
                    const double g = f64 ? reinterpret_cast<const double *>(got[o].data())[e]
                                         : reinterpret_cast<const float *>(got[o].data())[e];
                    if (!(std::fabs(g - w) <= 1e-5 + 1e-5 * std::fabs(w))) {
                        ADD_FAILURE() << "output " << o << " element " << e << ": gpu " << g << ", cpu " << w;
                        bad++;
                    }
                }
                checked++;
            }
            if (p < stages) {  // the CPU's stage, given to both sides in the next phase
                host.push_back(want[0]);
                types.push_back(out_types[0]);
            }
        }
    }
    std::printf("%d staged phase outputs checked on %s\n", checked, cuda_device_info(0).name.c_str());
}

TEST(CudaDevice, StreamsOrderWorkThroughEventsAndCopiesRoundTrip) {
    TESSERA_REQUIRE_GPU();
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
    TESSERA_REQUIRE_GPU();
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
    TESSERA_REQUIRE_GPU();
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

// Blocking copies from pageable memory are complete when they return: a
// kernel issued right after on the compute stream reads the new bytes. (A
// plain cudaMemcpy runs on the legacy stream, which the non-blocking compute
// stream does not wait for, and may return before its DMA has finished.)
TEST(CudaDevice, BlockingCopiesAreCompleteWhenTheyReturn) {
    TESSERA_REQUIRE_GPU();
    const int64_t n = int64_t{16} << 20;  // 64 MiB: long enough for a DMA to lag
    auto dev = make_cuda_device(0, 2 * n * 4);
    TensorType t{DType::F32, {n}};
    std::byte *x = dev->arena(), *y = dev->arena() + n * 4;
    OpCall relu{OpKind::Relu, "relu", {}};
    std::vector<TensorRef> ins{{x, t}}, outs{{y, t}};
    std::vector<float> host(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    for (int round = 0; round < 4; round++) {
        const float sign = round % 2 == 0 ? 1.0f : -1.0f;  // every round changes every output
        for (size_t i = 0; i < host.size(); i++) host[i] = sign * static_cast<float>(i % 1000 + 1 + round);
        dev->copy_to_device(x, host.data(), host.size() * 4);
        dev->launch_op(StreamKind::Compute, relu, ins, outs);  // at once, no synchronize between
        dev->synchronize();
        dev->copy_to_host(got.data(), y, got.size() * 4);
        size_t wrong = 0;
        for (size_t i = 0; i < host.size(); i++) wrong += got[i] != std::max(host[i], 0.0f);
        ASSERT_EQ(wrong, 0u) << "round " << round;
    }
}

// cuBLAS works in the arena's slice on every stream: a change of stream
// (cublasSetStream resets cuBLAS's workspace to its own pool, which
// allocates) is followed by cublasSetWorkspace, so GEMMs on another stream
// allocate no device memory.
TEST(CudaDevice, CublasAllocatesNothingOutsideTheArena) {
    TESSERA_REQUIRE_GPU();
    const int64_t m = 64, n = 64, k = int64_t{1} << 15, batch = 4;  // a long reduction: split-K wants a workspace
    TensorType a{DType::F32, {m, k}}, b{DType::F32, {k, n}}, c{DType::F32, {m, n}};
    TensorType ba{DType::F32, {batch, m, k}}, bb{DType::F32, {batch, k, n}}, bc{DType::F32, {batch, m, n}};
    const int64_t bytes = align(ba.bytes()) + align(bb.bytes()) + align(bc.bytes());
    auto dev = make_cuda_device(0, bytes);
    std::vector<float> ones(static_cast<size_t>(batch * k * std::max(m, n)), 1.0f / 1024);
    std::byte *pa = dev->arena(), *pb = pa + align(ba.bytes()), *pc = pb + align(bb.bytes());
    dev->copy_to_device(pa, ones.data(), static_cast<size_t>(ba.bytes()));
    dev->copy_to_device(pb, ones.data(), static_cast<size_t>(bb.bytes()));
    OpCall mm{OpKind::Matmul, "mm", {}}, bmm{OpKind::BatchMatmul, "bmm", {}};
    const std::vector<TensorRef> mm_in{{pa, a}, {pb, b}}, mm_out{{pc, c}}, bmm_in{{pa, ba}, {pb, bb}},
        bmm_out{{pc, bc}};
    auto gemms = [&](StreamKind s) {
        dev->launch_op(s, mm, mm_in, mm_out);
        dev->launch_op(s, bmm, bmm_in, bmm_out);
    };
    gemms(StreamKind::Compute);  // loads the kernels, which takes device memory of its own
    dev->synchronize();
    const int64_t free_before = cuda_device_info(0).free_bytes;
    for (StreamKind s : {StreamKind::SwapIn, StreamKind::Compute, StreamKind::SwapOut, StreamKind::Comm}) gemms(s);
    dev->synchronize();
    const int64_t free_after = cuda_device_info(0).free_bytes;
    // cuBLAS's own pool takes 4 MiB or more per stream; allocations come in 2 MiB pages.
    EXPECT_LT(free_before - free_after, int64_t{4} << 20)
        << "free memory went from " << free_before << " to " << free_after << " bytes";
    std::vector<float> got(static_cast<size_t>(m * n));
    dev->copy_to_host(got.data(), pc, got.size() * 4);
    EXPECT_FLOAT_EQ(got[0], static_cast<float>(k) / (1024.0f * 1024.0f));
}

// An error a library reports against a stream after issuing onto it (the NCCL
// all-reduce's watchdog, comm/watchdog.h) is rethrown by the stream's
// synchronize, naming the stream, as an error of host work is; once.
TEST(CudaDevice, ErrorsReportedAgainstAStreamAreRethrownWhenItIsSynchronized) {
    TESSERA_REQUIRE_GPU();
    auto dev = make_cuda_device(0, 1 << 20);
    const std::string timeout = "rank 1: all_reduce over ranks [0,1] timed out after 2 s waiting for the other members";
    report_stream_error(dev->native_stream(StreamKind::Comm), timeout);
    try {
        dev->synchronize();
        FAIL() << "no error";
    } catch (const Error &e) {
        EXPECT_EQ(std::string(e.what()), "on the comm stream: " + timeout);
    }
    dev->synchronize();
}

// Every device is described; each description is read on a thread of its own
// (cuda_device_info leaves the device it read free memory on current, never
// switching back: switching back made a context on device 0 for every rank).
TEST(CudaDevice, EveryDeviceIsDescribed) {
    TESSERA_REQUIRE_GPU();
    for (int i = cuda_device_count() - 1; i >= 0; i--) {
        std::thread([i] {
            const CudaDeviceInfo info = cuda_device_info(i);
            EXPECT_EQ(info.index, i);
            EXPECT_FALSE(info.name.empty());
            EXPECT_GE(info.major, 5);
            EXPECT_GT(info.free_bytes, 0);
            EXPECT_LE(info.free_bytes, info.total_bytes);
        }).join();
    }
}

// ---- training on the device against training on the CPU ----

Graph training_graph(const std::string &spec, int64_t batch) {
    return zoo_training_graph(spec, batch, optimizer_config(OptimizerConfig::Kind::Adam, 0.001));
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
    TESSERA_REQUIRE_GPU();
    for (const char *spec : {"mlp:hidden=64", "cnn:channels=4,hidden=16", "lstm:hidden=32,seq=4,vocab=50",
                             "transformer:layers=1,d_model=32,heads=2,seq=8,vocab=50",
                             "wresnet:depth=18,base=4,image=16"}) {
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
    TESSERA_REQUIRE_GPU();
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
