// tessera-bench-gpu-copy: host-device bandwidth of the CUDA device's swap
// streams while swapping, against a plain pinned cudaMemcpyAsync on the same
// GPU, side by side in one run (the bar: at least 80%).
//
//   plain      one copy at a time on a swap stream, nothing else running: the
//              device's copy_async is cudaMemcpyAsync between pinned host
//              memory and the arena, so this is the plain reference.
//   swapping   swap-in and swap-out copies at the same time, each on its own
//              stream, while the compute stream runs GEMMs: what a swapped
//              training step asks of the link.
//
// Usage: tessera-bench-gpu-copy [--mib 256] [--repeats 5]
// Exits 1 with the reason when there is no GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessera/error.h"
#include "tessera/exec/cuda_device.h"
#include "tessera/exec/profile.h"

namespace {

using namespace tessera;
using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int run(int argc, char **argv) {
    int64_t mib = 256;
    int repeats = 5;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--mib" && i + 1 < argc) mib = std::stoll(argv[++i]);
        else if (a == "--repeats" && i + 1 < argc) repeats = std::stoi(argv[++i]);
        else fail("unknown argument '", a, "'; usage: tessera-bench-gpu-copy [--mib 256] [--repeats 5]");
    }
    TESSERA_CHECK(mib >= 1 && repeats >= 1, "--mib and --repeats must be positive");
    if (cuda_device_count() == 0) {
        std::fprintf(stderr, "tessera-bench-gpu-copy: no GPU: %s\n", cuda_unavailable_reason().c_str());
        return 1;
    }
    const int64_t bytes = mib << 20;
    const int64_t gemm_n = 4096, gemm_bytes = gemm_n * gemm_n * 4;
    // Arena: an in-region and an out-region for the copies, then three GEMM operands.
    auto dev = make_cuda_device(0, 2 * bytes + 3 * gemm_bytes);
    std::printf("device %s (%s)\n", dev->name().c_str(), cuda_device_info(0).name.c_str());

    const double plain_in = measure_copy_bandwidth(*dev, CopyDirection::HostToDevice, bytes);
    const double plain_out = measure_copy_bandwidth(*dev, CopyDirection::DeviceToHost, bytes);

    PinnedBuffer host_in = dev->allocate_host(static_cast<size_t>(bytes));
    PinnedBuffer host_out = dev->allocate_host(static_cast<size_t>(bytes));
    std::memset(host_in.data(), 0, static_cast<size_t>(bytes));
    std::memset(host_out.data(), 0, static_cast<size_t>(bytes));
    std::byte *dev_in = dev->arena(), *dev_out = dev->arena() + bytes;
    std::byte *a = dev->arena() + 2 * bytes, *b = a + gemm_bytes, *c = b + gemm_bytes;
    std::vector<float> ones(static_cast<size_t>(gemm_n * gemm_n), 1e-3f);
    dev->copy_to_device(a, ones.data(), static_cast<size_t>(gemm_bytes));
    dev->copy_to_device(b, ones.data(), static_cast<size_t>(gemm_bytes));
    TensorType t{DType::F32, {gemm_n, gemm_n}};
    OpCall mm{OpKind::Matmul, "bench.matmul", {}};
    std::vector<TensorRef> ins{{a, t}, {b, t}}, outs{{c, t}};

    double best_in = 0, best_out = 0;
    int gemms = 0;
    for (int r = 0; r <= repeats; r++) {  // round 0 warms up
        // Keep compute busy for longer than the copies take.
        for (int k = 0; k < 64; k++) dev->launch_op(StreamKind::Compute, mm, ins, outs);
        auto t0 = Clock::now();
        dev->copy_async(StreamKind::SwapIn, dev_in, host_in.data(), static_cast<size_t>(bytes),
                        CopyDirection::HostToDevice);
        dev->copy_async(StreamKind::SwapOut, host_out.data(), dev_out, static_cast<size_t>(bytes),
                        CopyDirection::DeviceToHost);
        // Each direction's time is until its own stream drains.
        dev->stream(StreamKind::SwapIn).synchronize();
        double t_in = seconds(t0);
        dev->stream(StreamKind::SwapOut).synchronize();
        double t_out = seconds(t0);
        const bool compute_still_busy = ![&] {
            auto e = dev->create_event();
            dev->stream(StreamKind::Compute).record(*e);
            return e->query();
        }();
        dev->synchronize();
        if (r == 0) continue;
        if (!compute_still_busy) std::printf("note: round %d: compute finished before the copies\n", r);
        gemms += 64;
        best_in = std::max(best_in, static_cast<double>(bytes) / t_in);
        best_out = std::max(best_out, static_cast<double>(bytes) / t_out);
    }
    std::printf("\n| direction | plain pinned cudaMemcpyAsync | while swapping (both ways + GEMMs) | ratio |\n");
    std::printf("|---|---|---|---|\n");
    std::printf("| host to device | %.2f GB/s | %.2f GB/s | %.2f |\n", plain_in / 1e9, best_in / 1e9,
                best_in / plain_in);
    std::printf("| device to host | %.2f GB/s | %.2f GB/s | %.2f |\n", plain_out / 1e9, best_out / 1e9,
                best_out / plain_out);
    std::printf("\n%lld MiB per copy, best of %d rounds, %d GEMMs of %lld^2 on the compute stream\n",
                static_cast<long long>(mib), repeats, gemms, static_cast<long long>(gemm_n));
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    try {
        return run(argc, argv);
    } catch (const tessera::Error &e) {
        std::fprintf(stderr, "tessera-bench-gpu-copy: error: %s\n", e.what());
        return 1;
    }
}
