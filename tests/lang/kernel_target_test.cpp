// The CPU kernels are compiled for several Halide targets, the fastest first
// and a portable baseline last (TESSERA_HALIDE_TARGET), and a process runs the
// first one its CPU has the features of (lang/tools/kernelc.cpp,
// tessera/lang/cpu_runtime.h). Halide's hook
// halide_set_custom_can_use_target_features() stands in for another CPU here:
// one that refuses every feature beyond SSE4.1 makes the kernels run the
// baseline, as they would on a GPU host without AVX-512 or AVX2, and their
// results must agree with the fast target's to float tolerance.
#include <atomic>
#include <cstring>

#include <HalideRuntime.h>

#include "tessera/lang/cpu_runtime.h"
#include "test_util.h"

namespace tessera::test {
namespace {

// The x86 features Halide's runtime detects beyond SSE4.1.
const int kBeyondSse41[] = {halide_target_feature_avx,
                            halide_target_feature_avx2,
                            halide_target_feature_fma,
                            halide_target_feature_fma4,
                            halide_target_feature_f16c,
                            halide_target_feature_avx512,
                            halide_target_feature_avx512_knl,
                            halide_target_feature_avx512_skylake,
                            halide_target_feature_avx512_cannonlake,
                            halide_target_feature_avx512_sapphirerapids};

std::atomic<int> hook_calls{0}, hook_refusals{0};

int sse41_cpu(int count, const uint64_t *features) {
    hook_calls++;
    for (int f : kBeyondSse41)
        if (f / 64 < count && (features[f / 64] >> (f % 64)) & 1) {
            hook_refusals++;
            return 0;
        }
    return 1;
}

int featureless_cpu(int, const uint64_t *) {
    hook_calls++;
    hook_refusals++;
    return 0;
}

// Installs a hook and chooses the kernels' target again; the destructor puts
// Halide's own hook back and chooses again.
class CpuWithHook {
public:
    explicit CpuWithHook(halide_can_use_target_features_t hook)
        : previous_(halide_set_custom_can_use_target_features(hook)) {
        hook_calls = 0;
        hook_refusals = 0;
        choose_halide_kernel_target();
    }
    ~CpuWithHook() {
        halide_set_custom_can_use_target_features(previous_);
        choose_halide_kernel_target();
    }

private:
    halide_can_use_target_features_t previous_;
};

// Runs the Halide GEMM and convolution kernels rather than OpenBLAS.
class HalideGemm {
public:
    HalideGemm() : previous_(gemm_backend()) { set_gemm_backend(GemmBackend::Halide); }
    ~HalideGemm() { set_gemm_backend(previous_); }

private:
    GemmBackend previous_;
};

struct Case {
    OpCall call;
    std::vector<HostTensor> inputs;
    double rtol = 1e-4, atol = 1e-5;
};

HostTensor positive(Shape s, uint32_t seed) { return random_tensor(std::move(s), seed, 1e-3f, 1.0f); }

void add(std::vector<Case> &v, OpKind k, Attrs a, std::vector<HostTensor> in, double atol = 1e-5) {
    v.push_back({OpCall{k, op_name(k), std::move(a)}, std::move(in), 1e-4, atol});
}

// Every family, with extents that leave vector tails and reductions long
// enough for their order to differ between vector widths.
std::vector<Case> cases() {
    std::vector<Case> v;
    add(v, OpKind::Matmul, {}, {random_tensor({37, 65}, 1), random_tensor({65, 29}, 2)});
    add(v, OpKind::BatchMatmul, {{"transpose_b", int64_t{1}}}, {random_tensor({3, 9, 17}, 3), random_tensor({3, 11, 17}, 4)});
    for (OpKind k : {OpKind::Gelu, OpKind::Tanh, OpKind::Sigmoid, OpKind::Erf}) add(v, k, {}, {random_tensor({1001}, 5, -4, 4)});
    add(v, OpKind::GeluGrad, {}, {random_tensor({1001}, 6), random_tensor({1001}, 7, -4, 4)});
    add(v, OpKind::BiasAdd, {}, {random_tensor({8, 33}, 8), random_tensor({33}, 9)});
    add(v, OpKind::BiasAddGrad, {}, {random_tensor({300, 19}, 10)});
    add(v, OpKind::Softmax, {}, {random_tensor({9, 257}, 11, -4, 4)});
    add(v, OpKind::LogSoftmaxGrad, {}, {random_tensor({5, 100}, 12), random_tensor({5, 100}, 13)});
    add(v, OpKind::SoftmaxXent, {}, {random_tensor({16, 10}, 14, -3, 3), random_ints({16}, 15, 0, 9)});
    add(v, OpKind::LayerNorm, {}, {random_tensor({5, 301}, 16), random_tensor({301}, 17), random_tensor({301}, 18)});
    add(v, OpKind::LayerNormGrad, {}, {random_tensor({5, 37}, 19), random_tensor({5, 37}, 20), random_tensor({37}, 21)},
        1e-4);
    add(v, OpKind::BatchNorm, {}, {random_tensor({3, 4, 5, 7}, 22), random_tensor({4}, 23), random_tensor({4}, 24)});
    add(v, OpKind::BatchNormGrad, {}, {random_tensor({3, 4, 5, 7}, 25), random_tensor({3, 4, 5, 7}, 26),
                                       random_tensor({4}, 27)}, 1e-4);
    Attrs win{{"stride_h", int64_t{1}}, {"stride_w", int64_t{2}}, {"pad_h", int64_t{1}}, {"pad_w", int64_t{1}}};
    add(v, OpKind::Conv2d, win, {random_tensor({2, 3, 9, 11}, 28), random_tensor({4, 3, 3, 3}, 29)});
    add(v, OpKind::Conv2dGradWeight, Attrs(win).set("kernel_h", int64_t{3}).set("kernel_w", int64_t{3}),
        {random_tensor({2, 4, 9, 6}, 30), random_tensor({2, 3, 9, 11}, 31)});
    add(v, OpKind::Conv2dGradInput, Attrs(win).set("in_h", int64_t{9}).set("in_w", int64_t{11}),
        {random_tensor({2, 4, 9, 6}, 32), random_tensor({4, 3, 3, 3}, 33)});
    Attrs pool{{"kernel_h", int64_t{3}}, {"kernel_w", int64_t{3}}, {"stride_h", int64_t{2}}, {"stride_w", int64_t{2}},
               {"pad_h", int64_t{1}}, {"pad_w", int64_t{1}}};
    add(v, OpKind::MaxPool2d, pool, {random_tensor({2, 3, 9, 9}, 34)});
    add(v, OpKind::AvgPool2dGrad, Attrs(pool).set("in_h", int64_t{9}).set("in_w", int64_t{9}),
        {random_tensor({2, 3, 5, 5}, 35)});
    add(v, OpKind::GlobalAvgPool, {}, {random_tensor({2, 5, 13, 13}, 36)});
    add(v, OpKind::Permute, {{"perm", std::vector<int64_t>{0, 2, 3, 1}}}, {random_tensor({2, 3, 4, 5}, 37)});
    add(v, OpKind::ReduceSum, {{"axis", int64_t{0}}}, {random_tensor({200, 7}, 38)});
    add(v, OpKind::Embedding, {}, {random_tensor({11, 7}, 39), random_ints({3, 4}, 40, 0, 10)});
    add(v, OpKind::EmbeddingGrad, {{"vocab", int64_t{11}}}, {random_tensor({9, 13, 5}, 41), random_ints({9, 13}, 42, 0, 10)});
    add(v, OpKind::Dropout, {{"rate", 0.3}, {"seed", int64_t{7}}}, {random_tensor({1000}, 43)}, 0);
    add(v, OpKind::SgdMomentum, {{"lr", 0.03}, {"momentum", 0.5}, {"weight_decay", 0.01}},
        {random_tensor({7, 11}, 44), random_tensor({7, 11}, 45), random_tensor({7, 11}, 46)});
    add(v, OpKind::Adam, {{"lr", 0.01}, {"eps", 1e-6}},
        {random_tensor({7, 11}, 47), random_tensor({7, 11}, 48), random_tensor({7, 11}, 49), positive({7, 11}, 50),
         random_ints({}, 51, 3, 3)});
    return v;
}

std::vector<std::vector<HostTensor>> run_all(std::vector<Case> &cs) {
    std::vector<std::vector<HostTensor>> outs;
    for (Case &c : cs) outs.push_back(run(c.call, c.inputs));
    return outs;
}

bool same_bits(const HostTensor &a, const HostTensor &b) {
    if (a.type.dtype != DType::F32) return a.i == b.i && a.d == b.d;
    return std::memcmp(a.f.data(), b.f.data(), a.f.size() * sizeof(float)) == 0;
}

// The baseline is a target the SSE4.1-only hook accepts: x86-64 with no
// feature from kBeyondSse41 (their names all start with avx, fma or f16c).
bool baseline_is_sse41(const std::string &t) {
    return t.rfind("x86-64-", 0) == 0 && t.find("-avx") == std::string::npos &&
           t.find("-fma") == std::string::npos && t.find("-f16c") == std::string::npos;
}

TEST(KernelTarget, BaselineAgreesWithTheFastTarget) {
    const std::vector<std::string> targets = halide_kernel_targets();
    ASSERT_FALSE(targets.empty());
    if (targets.size() < 2 || !baseline_is_sse41(targets.back()))
        GTEST_SKIP() << "the kernels were compiled for " << targets.size() << " target(s), the last "
                     << targets.back() << ": no x86-64 SSE4.1 baseline to fall back on (TESSERA_HALIDE_TARGET)";
    HalideGemm halide_gemm;
    std::vector<Case> cs = cases();
    const std::string fast = halide_kernel_target();
    std::vector<std::vector<HostTensor>> want = run_all(cs);
    std::vector<std::vector<HostTensor>> got;
    {
        CpuWithHook cpu(sse41_cpu);
        // Every target before the baseline was asked about and refused; then
        // the choice is made and no kernel asks again.
        EXPECT_EQ(halide_kernel_target(), targets.back());
        EXPECT_EQ(hook_calls.load(), static_cast<int>(targets.size()));
        EXPECT_EQ(hook_refusals.load(), static_cast<int>(targets.size()) - 1);
        got = run_all(cs);
        EXPECT_EQ(hook_calls.load(), static_cast<int>(targets.size()));
    }
    EXPECT_EQ(halide_kernel_target(), fast);
    int differ = 0;
    for (size_t k = 0; k < cs.size(); k++) {
        SCOPED_TRACE(cs[k].call.who() + " on " + targets.back() + " against " + fast);
        ASSERT_EQ(got[k].size(), want[k].size());
        for (size_t o = 0; o < want[k].size(); o++) {
            if (!same_bits(got[k][o], want[k][o])) differ++;
            if (want[k][o].type.dtype == DType::F32) {
                expect_near(got[k][o].f, to_double(want[k][o].f), cs[k].atol, cs[k].rtol);
            } else {
                EXPECT_TRUE(same_bits(got[k][o], want[k][o]));
            }
        }
    }
    // Other vector widths sum in other orders: some results differ in their
    // last bits, a sign that other code ran.
    if (fast != targets.back()) {
        EXPECT_GT(differ, 0) << "every output is bit for bit the fast target's";
    }
}

TEST(KernelTarget, ACpuWithoutTheBaselineIsAnError) {
    const std::vector<std::string> targets = halide_kernel_targets();
    CpuWithHook cpu(featureless_cpu);
    EXPECT_EQ(hook_calls.load(), static_cast<int>(targets.size()));
    EXPECT_NE(halide_kernel_target().find("none of"), std::string::npos) << halide_kernel_target();
    std::vector<HostTensor> in = {random_tensor({3, 5}, 1)};
    expect_error([&] { run({OpKind::Relu, "r", {}}, in); }, "this CPU has the features of none of them");
    expect_error([&] { run({OpKind::Relu, "r", {}}, in); }, targets.back());
}

}  // namespace
}  // namespace tessera::test
