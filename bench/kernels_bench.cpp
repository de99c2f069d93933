// CPU kernel benchmarks for lang/.
//
//   * matmul 1024x1024x1024 fp32: Tessera's Halide kernel against OpenBLAS sgemm,
//     interleaved in the same run; the summary prints the ratio of their GFLOP/s.
//   * conv2d, batch 32, 64->64 channels, 56x56, 3x3, pad 1, default dispatch (BLAS):
//     GFLOP/s.
//   * the layers of the zoo's `cnn` at batch 128 (Fashion-MNIST): conv2d and its
//     gradients at both convolutions under both GEMM backends, batch norm, max
//     pooling and their gradients; ms per call and GFLOP/s for the convolutions.
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
    tessera::set_gemm_backend(tessera::GemmBackend::Blas);  // the default dispatch
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

// One operator call on random inputs; outputs are allocated from infer_types.
// `flops` = 0 reports time only.
void run_layer(benchmark::State &state, const OpCall &call, const std::vector<tessera::Shape> &inputs,
               double flops) {
    std::vector<std::vector<float>> in, out;
    std::vector<TensorRef> rin, rout;
    std::vector<tessera::TensorType> types;
    for (size_t i = 0; i < inputs.size(); i++) {
        tessera::TensorType t{DType::F32, inputs[i]};
        in.push_back(random_vec(t.elements(), 10 + unsigned(i)));
        types.push_back(t);
    }
    for (size_t i = 0; i < inputs.size(); i++) rin.push_back({in[i].data(), types[i]});
    auto out_types = tessera::infer_types(call, types);
    for (const tessera::TensorType &t : out_types) out.emplace_back(t.elements());
    for (size_t i = 0; i < out.size(); i++) rout.push_back({out[i].data(), out_types[i]});
    for (auto _ : state) {
        tessera::run_op(call, rin, rout);
        benchmark::DoNotOptimize(out[0].data());
    }
    if (flops > 0) set_flops(state, flops);
}

// The cnn's convolutions: conv1 1->32 on 28x28, conv2 32->64 on 14x14, 3x3, pad 1,
// batch 128. range(0) picks the layer, range(1) the backend (0 Halide, 1 BLAS).
struct CnnConv {
    int64_t n, ci, h, w, co;
};
CnnConv cnn_conv(int64_t layer) { return layer == 1 ? CnnConv{128, 1, 28, 28, 32} : CnnConv{128, 32, 14, 14, 64}; }
double conv_flops(const CnnConv &g) { return 2.0 * g.n * g.co * g.h * g.w * g.ci * 9; }
tessera::Attrs pad1() { return {{"pad_h", int64_t{1}}, {"pad_w", int64_t{1}}}; }
void set_backend(benchmark::State &state) {
    tessera::set_gemm_backend(state.range(1) ? tessera::GemmBackend::Blas : tessera::GemmBackend::Halide);
}

void BM_CnnConvForward(benchmark::State &state) {
    set_backend(state);
    CnnConv g = cnn_conv(state.range(0));
    run_layer(state, {OpKind::Conv2d, "conv", pad1()}, {{g.n, g.ci, g.h, g.w}, {g.co, g.ci, 3, 3}}, conv_flops(g));
}

void BM_CnnConvGradInput(benchmark::State &state) {
    set_backend(state);
    CnnConv g = cnn_conv(state.range(0));
    tessera::Attrs a = pad1();
    a.set("in_h", g.h).set("in_w", g.w);
    run_layer(state, {OpKind::Conv2dGradInput, "conv", a}, {{g.n, g.co, g.h, g.w}, {g.co, g.ci, 3, 3}},
              conv_flops(g));
}

void BM_CnnConvGradWeight(benchmark::State &state) {
    set_backend(state);
    CnnConv g = cnn_conv(state.range(0));
    tessera::Attrs a = pad1();
    a.set("kernel_h", int64_t{3}).set("kernel_w", int64_t{3});
    run_layer(state, {OpKind::Conv2dGradWeight, "conv", a}, {{g.n, g.co, g.h, g.w}, {g.n, g.ci, g.h, g.w}},
              conv_flops(g));
}

// Activations of the cnn's two blocks: range(0) picks [128, 32, 28, 28] (1) or
// [128, 64, 14, 14] (2).
tessera::Shape cnn_act(int64_t layer) {
    return layer == 1 ? tessera::Shape{128, 32, 28, 28} : tessera::Shape{128, 64, 14, 14};
}

void BM_CnnBatchNorm(benchmark::State &state) {
    tessera::Shape s = cnn_act(state.range(0));
    run_layer(state, {OpKind::BatchNorm, "bn", {}}, {s, {s[1]}, {s[1]}}, 0);
}

// The running statistics' update (batch_norm_stats), a second pass over the
// forward's input each training step: its cost against BM_CnnBatchNorm's.
void BM_CnnBatchNormStats(benchmark::State &state) {
    tessera::Shape s = cnn_act(state.range(0));
    run_layer(state, {OpKind::BatchNormStats, "bn.running_stats", {}}, {s, {s[1]}, {s[1]}}, 0);
}

void BM_CnnBatchNormGrad(benchmark::State &state) {
    tessera::Shape s = cnn_act(state.range(0));
    run_layer(state, {OpKind::BatchNormGrad, "bn", {}}, {s, s, {s[1]}}, 0);
}

tessera::Attrs pool2() { return {{"kernel_h", int64_t{2}}, {"kernel_w", int64_t{2}}}; }

void BM_CnnMaxPool(benchmark::State &state) {
    run_layer(state, {OpKind::MaxPool2d, "pool", pool2()}, {cnn_act(state.range(0))}, 0);
}

void BM_CnnMaxPoolGrad(benchmark::State &state) {
    tessera::Shape s = cnn_act(state.range(0)), y = {s[0], s[1], s[2] / 2, s[3] / 2};
    run_layer(state, {OpKind::MaxPool2dGrad, "pool", pool2()}, {y, s}, 0);
}

// Interleave the two GEMMs (several repetitions each) so that both see the same
// machine load; the summary uses the median of each.
BENCHMARK(BM_MatmulTessera)->Args({1024, 0})->Unit(benchmark::kMillisecond)->Repetitions(5)->UseRealTime();
BENCHMARK(BM_MatmulOpenBLAS)->Arg(1024)->Unit(benchmark::kMillisecond)->Repetitions(5)->UseRealTime();
// Tessera's matmul entry point with the default (BLAS) dispatch.
BENCHMARK(BM_MatmulTessera)->Args({1024, 1})->Unit(benchmark::kMillisecond)->Repetitions(5)->UseRealTime();
BENCHMARK(BM_Conv2d)->Unit(benchmark::kMillisecond)->Repetitions(3)->UseRealTime();
// The cnn's layers: {layer, backend} for convolutions, {layer} for the rest.
BENCHMARK(BM_CnnConvForward)->ArgsProduct({{1, 2}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CnnConvGradInput)->ArgsProduct({{2}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CnnConvGradWeight)->ArgsProduct({{1, 2}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CnnBatchNorm)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CnnBatchNormStats)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CnnBatchNormGrad)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CnnMaxPool)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CnnMaxPoolGrad)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

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
