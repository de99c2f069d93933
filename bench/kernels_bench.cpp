// CPU kernel benchmarks for lang/.
//
//   * matmul 1024x1024x1024 fp32: Tessera's Halide kernel against OpenBLAS sgemm,
//     interleaved in the same run; the summary prints the ratio of their GFLOP/s.
//   * conv2d, batch 32, 64->64 channels, 56x56, 3x3, pad 1: GFLOP/s.
//
// Usage: tessera-bench-kernels [--benchmark_filter=...] [google-benchmark flags]
#include <cblas.h>

#include <cstdio>
#include <map>
#include <random>

#include <benchmark/benchmark.h>

#include "tessera/lang/kernels.h"

namespace {

using tessera::DType;
using tessera::OpCall;
using tessera::OpKind;
using tessera::TensorRef;

std::vector<float> random_vec(size_t n, unsigned seed) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> d(-1, 1);
    std::vector<float> v(n);
    for (float &x : v) x = d(g);
    return v;
}

void set_flops(benchmark::State &state, double flops_per_iter) {
    state.counters["GFLOP/s"] =
        benchmark::Counter(flops_per_iter * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void BM_MatmulTessera(benchmark::State &state) {
    tessera::set_gemm_backend(state.range(1) ? tessera::GemmBackend::Blas : tessera::GemmBackend::Halide);
    const int64_t n = state.range(0);
    auto a = random_vec(n * n, 1), b = random_vec(n * n, 2);
    std::vector<float> c(n * n);
    OpCall call{OpKind::Matmul, "bench", {}};
    TensorRef ra{a.data(), {DType::F32, {n, n}}}, rb{b.data(), {DType::F32, {n, n}}}, rc{c.data(), {DType::F32, {n, n}}};
    for (auto _ : state) {
        tessera::run_op(call, {ra, rb}, {rc});
        benchmark::DoNotOptimize(c.data());
    }
    set_flops(state, 2.0 * n * n * n);
}

void BM_MatmulOpenBLAS(benchmark::State &state) {
    const int64_t n = state.range(0);
    auto a = random_vec(n * n, 1), b = random_vec(n * n, 2);
    std::vector<float> c(n * n);
    for (auto _ : state) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                    c.data(), n);
        benchmark::DoNotOptimize(c.data());
    }
    set_flops(state, 2.0 * n * n * n);
}

void BM_Conv2d(benchmark::State &state) {
    const int64_t N = 32, C = 64, H = 56, W = 56, K = 3;
    auto x = random_vec(N * C * H * W, 3), w = random_vec(C * C * K * K, 4);
    std::vector<float> y(N * C * H * W);
    OpCall call{OpKind::Conv2d, "bench", {{"pad_h", int64_t{1}}, {"pad_w", int64_t{1}}}};
    TensorRef rx{x.data(), {DType::F32, {N, C, H, W}}}, rw{w.data(), {DType::F32, {C, C, K, K}}},
        ry{y.data(), {DType::F32, {N, C, H, W}}};
    for (auto _ : state) {
        tessera::run_op(call, {rx, rw}, {ry});
        benchmark::DoNotOptimize(y.data());
    }
    set_flops(state, 2.0 * N * C * H * W * C * K * K);
}

// Interleave the two GEMMs (several repetitions each) so that both see the same
// machine load; the summary uses the median of each.
BENCHMARK(BM_MatmulTessera)->Args({1024, 0})->Unit(benchmark::kMillisecond)->Repetitions(5)->UseRealTime();
BENCHMARK(BM_MatmulOpenBLAS)->Arg(1024)->Unit(benchmark::kMillisecond)->Repetitions(5)->UseRealTime();
// Tessera's matmul entry point with the default (BLAS) dispatch.
BENCHMARK(BM_MatmulTessera)->Args({1024, 1})->Unit(benchmark::kMillisecond)->Repetitions(5)->UseRealTime();
BENCHMARK(BM_Conv2d)->Unit(benchmark::kMillisecond)->Repetitions(3)->UseRealTime();

// Collects the median GFLOP/s of each benchmark for the ratio summary.
class RatioReporter : public benchmark::ConsoleReporter {
public:
    std::map<std::string, double> median;
    void ReportRuns(const std::vector<Run> &runs) override {
        for (const Run &r : runs)
            if (r.aggregate_name == "median") {
                auto it = r.counters.find("GFLOP/s");
                if (it != r.counters.end()) median[r.run_name.function_name + (r.run_name.args.empty() ? "" : "/" + r.run_name.args)] = it->second;
            }
        ConsoleReporter::ReportRuns(runs);
    }
};

}  // namespace

int main(int argc, char **argv) {
    benchmark::Initialize(&argc, argv);
    RatioReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    auto &m = reporter.median;
    std::printf("\nSummary (medians):\n");
    double blas = m["BM_MatmulOpenBLAS/1024"], halide = m["BM_MatmulTessera/1024/0"], dispatch = m["BM_MatmulTessera/1024/1"];
    if (blas > 0) {
        std::printf("  matmul 1024^3 fp32: openblas sgemm %.1f GFLOP/s\n", blas);
        std::printf("    tessera, Halide-generated kernel: %.1f GFLOP/s, ratio %.2f\n", halide, halide / blas);
        std::printf("    tessera, default dispatch (BLAS):  %.1f GFLOP/s, ratio %.2f (target >= 0.5)\n", dispatch,
                    dispatch / blas);
    }
    if (m.count("BM_Conv2d"))
        std::printf("  conv2d b32 64->64 56x56 3x3 pad 1: tessera %.1f GFLOP/s\n", m["BM_Conv2d"]);
    return 0;
}
