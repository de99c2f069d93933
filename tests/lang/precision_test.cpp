// Reduced precision in lang/: cast's CPU kernels against base/half.h's software
// conversions (every 16-bit pattern widened; rounding, overflow, NaN and
// subnormals narrowed), the storage-type rule of shape inference, each
// operator's bf16 and f16 storage forms against its f32 kernel, and the error
// a device without a 16-bit path gives.
#include <bit>
#include <cstring>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tessera/half.h"
#include "tessera/lang/strategy.h"
#include "test_util.h"

namespace tessera::test {
namespace {

OpCall cast_to(DType to) { return {OpKind::Cast, "c", {{"to", std::string(dtype_name(to))}}}; }

uint16_t narrow(DType t, float f) { return t == DType::BF16 ? bf16_from_float(f) : f16_from_float(f); }
float widen(DType t, uint16_t h) { return t == DType::BF16 ? float_from_bf16(h) : float_from_f16(h); }

// f32 values that test the narrowing: random magnitudes over the whole range,
// ties between two 16-bit neighbours, overflow, subnormals, zeros, inf, NaN.
std::vector<float> narrowing_inputs(DType t) {
    std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, 1e6f, -1e6f, 3.0e38f,
                            std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            5.96e-8f, 2.98e-8f, 1e-10f, 6.1e-5f, 1e-40f};
    std::mt19937 g(7);
    std::uniform_int_distribution<uint32_t> bits;
    for (int k = 0; k < 20000; k++) v.push_back(std::bit_cast<float>(bits(g)));
    // Exactly half-way between h and h + 1 (and a hair either side).
    for (uint16_t h : {uint16_t{0x3c00}, uint16_t{0x3c01}, uint16_t{0x0001}, uint16_t{0x7bfe}, uint16_t{0x4049}}) {
        const float lo = widen(t, h), hi = widen(t, static_cast<uint16_t>(h + 1));
        const float mid = static_cast<float>((double(lo) + double(hi)) / 2);
        v.insert(v.end(), {mid, std::nextafter(mid, lo), std::nextafter(mid, hi), -mid});
    }
    return v;
}

// NaN payloads may differ; an f32 subnormal (below 2^-126) may flush to a
// zero of its sign, as the kernels' f32 arithmetic flushes them.
bool narrowed_alike(float x, uint16_t a, uint16_t b, DType t) {
    const float fa = widen(t, a), fb = widen(t, b);
    if (a == b || (std::isnan(fa) && std::isnan(fb))) return true;
    return std::fpclassify(x) == FP_SUBNORMAL && fa == 0.0f && std::signbit(fa) == std::signbit(x);
}

class CastKernel : public ::testing::TestWithParam<DType> {};

TEST_P(CastKernel, NarrowingRoundsAsBaseHalfDoes) {
    const DType t = GetParam();
    const std::vector<float> x = narrowing_inputs(t);
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<uint16_t> y(x.size());
    run_op(cast_to(t), {{const_cast<float *>(x.data()), {DType::F32, {n}}}}, {{y.data(), {t, {n}}}});
    int bad = 0;
    for (size_t k = 0; k < x.size(); k++)
        if (!narrowed_alike(x[k], y[k], narrow(t, x[k]), t) && bad++ < 5)
            ADD_FAILURE() << dtype_name(t) << " of " << x[k] << ": kernel 0x" << std::hex << y[k] << ", base/half.h 0x"
                          << narrow(t, x[k]);
    EXPECT_EQ(bad, 0);
}

TEST_P(CastKernel, WideningIsExactForEveryPattern) {
    const DType t = GetParam();
    std::vector<uint16_t> x(65536);
    for (size_t k = 0; k < x.size(); k++) x[k] = static_cast<uint16_t>(k);
    std::vector<float> y(x.size());
    run_op(cast_to(DType::F32), {{x.data(), {t, {65536}}}}, {{y.data(), {DType::F32, {65536}}}});
    int bad = 0;
    for (size_t k = 0; k < x.size(); k++) {
        const float want = widen(t, x[k]);
        const bool ok = std::isnan(want) ? std::isnan(y[k]) : std::bit_cast<uint32_t>(y[k]) == std::bit_cast<uint32_t>(want);
        if (!ok && bad++ < 5) ADD_FAILURE() << dtype_name(t) << " 0x" << std::hex << x[k] << ": got " << y[k] << ", want " << want;
    }
    EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Halves, CastKernel, ::testing::Values(DType::BF16, DType::F16),
                         [](const auto &info) { return std::string(dtype_name(info.param)); });

TEST(Cast, ShapesAndErrors) {
    EXPECT_EQ(infer_types(cast_to(DType::BF16), {{DType::F32, {3, 4}}})[0], (TensorType{DType::BF16, {3, 4}}));
    EXPECT_EQ(infer_types(cast_to(DType::F32), {{DType::F16, {5}}})[0], (TensorType{DType::F32, {5}}));
    expect_error([] { infer_types(cast_to(DType::F16), {{DType::BF16, {2}}}); }, "cannot cast bf16[2] to f16");
    expect_error([] { infer_types(cast_to(DType::F32), {{DType::F32, {2}}}); }, "cannot cast f32[2] to f32");
    expect_error([] { infer_types(cast_to(DType::BF16), {{DType::I32, {2}}}); }, "cannot cast i32[2] to bf16");
    OpCall bad = {OpKind::Cast, "c", {{"to", std::string("f8")}}};
    expect_error([&] { infer_types(bad, {{DType::F32, {2}}}); }, "unknown dtype 'f8'");
    // Element-wise: every dimension splits.
    EXPECT_NE(strategies_for(cast_to(DType::BF16), {{DType::F32, {8, 4}}}), nullptr);
}

// The rule every family shares: 16-bit inputs give 16-bit outputs, computed in f32.
TEST(StorageType, OutputsTakeTheInputsStorage) {
    const OpCall mm{OpKind::Matmul, "mm", {}};
    EXPECT_EQ(infer_types(mm, {{DType::BF16, {4, 3}}, {DType::BF16, {3, 5}}})[0], (TensorType{DType::BF16, {4, 5}}));
    EXPECT_EQ(infer_types(mm, {{DType::F32, {4, 3}}, {DType::F32, {3, 5}}})[0], (TensorType{DType::F32, {4, 5}}));
    expect_error([&] { infer_types(mm, {{DType::BF16, {4, 3}}, {DType::F32, {3, 5}}}); },
                 "input 1 is f32[3, 5] but input 0 is bf16[4, 3]");
    expect_error([&] { infer_types(mm, {{DType::BF16, {4, 3}}, {DType::F16, {3, 5}}}); }, "share one storage type");
    // The loss stays f32; its gradient reads the f32 loss gradient beside 16-bit logits.
    const OpCall xent{OpKind::SoftmaxXent, "loss", {}};
    EXPECT_EQ(infer_types(xent, {{DType::F16, {4, 10}}, {DType::I32, {4}}})[0].dtype, DType::F32);
    const OpCall xent_grad{OpKind::SoftmaxXentGrad, "dl", {}};
    EXPECT_EQ(infer_types(xent_grad, {{DType::BF16, {4, 10}}, {DType::I32, {4}}, {DType::F32, {}}})[0],
              (TensorType{DType::BF16, {4, 10}}));
    // Batch norm's running statistics stay f32 beside a 16-bit x.
    const OpCall stats{OpKind::BatchNormStats, "bn", {}};
    auto s = infer_types(stats, {{DType::BF16, {2, 3, 4, 4}}, {DType::F32, {3}}, {DType::F32, {3}}});
    EXPECT_EQ(s[0].dtype, DType::F32);
    EXPECT_EQ(s[1].dtype, DType::F32);
    // Optimizer updates take f32 master weights only.
    const OpCall sgd{OpKind::SgdMomentum, "u", {{"lr", 0.1}, {"momentum", 0.9}}};
    expect_error([&] { infer_types(sgd, {{DType::BF16, {3}}, {DType::BF16, {3}}, {DType::BF16, {3}}}); }, "must be f32");
}

TEST(StorageType, KernelsWithoutA16BitFormSaySo) {
    const OpCall mm{OpKind::Matmul, "mm", {}};
    std::vector<TensorRef> in{{nullptr, {DType::F16, {4, 3}}}, {nullptr, {DType::F16, {3, 5}}}};
    std::vector<TensorRef> out{{nullptr, {DType::F16, {4, 5}}}};
    expect_error([&] { check_kernel_storage(mm, in, out, "GPU", {}); },
                 "matmul 'mm': input 0 is f16[4, 3], and the GPU kernels read and write f32 only");
    expect_error([&] { check_kernel_storage(mm, in, out, "CPU", {DType::BF16}); },
                 "and the CPU kernels read and write f32 and bf16 only");
    check_kernel_storage(mm, in, out, "CPU", {DType::BF16, DType::F16});
}

// ---- storage forms: each operator's bf16 and f16 kernels against its f32 kernel ----

// The 16-bit type the storage-form tests run (StorageForm's parameter).
DType storage_half = DType::BF16;

// One operand of a storage-form check: f32 values (already bf16 values where
// the operator stores bf16) or i32 ids.
struct Operand {
    TensorType type;  // F32 or I32
    std::vector<float> f;
    std::vector<int32_t> i;
};

Operand floats(Shape s, uint32_t seed, float lo = -1, float hi = 1) {
    HostTensor h = random_tensor(std::move(s), seed, lo, hi);
    return {h.type, h.f, {}};
}

Operand ids(Shape s, uint32_t seed, int hi) {
    HostTensor h = random_ints(std::move(s), seed, 0, hi);
    return {h.type, {}, h.i};
}

// Buffers for one run: each tensor's bytes, in the dtype the run gives it.
struct Buffers {
    std::vector<std::vector<std::byte>> bytes;
    std::vector<TensorRef> refs;
    void add(const TensorType &t) {
        bytes.emplace_back(static_cast<size_t>(t.bytes()));
        refs.push_back({nullptr, t});
    }
    void fix() {
        for (size_t k = 0; k < refs.size(); k++) refs[k].data = bytes[k].data();
    }
};

// The operand as the run holds it: f32, or narrowed where it is stored.
void fill(Buffers &b, const Operand &o, bool stored) {
    TensorType t = o.type;
    if (stored && t.dtype == DType::F32) t.dtype = storage_half;
    b.add(t);
    std::byte *dst = b.bytes.back().data();
    for (size_t k = 0; k < static_cast<size_t>(t.elements()); k++) {
        if (t.dtype == DType::I32) std::memcpy(dst + 4 * k, &o.i[k], 4);
        else if (t.dtype == DType::F32) std::memcpy(dst + 4 * k, &o.f[k], 4);
        else {
            const uint16_t h = narrow(storage_half, o.f[k]);
            std::memcpy(dst + 2 * k, &h, 2);
        }
    }
}

std::vector<float> as_floats(const std::vector<std::byte> &bytes, DType t) {
    std::vector<float> v(bytes.size() / dtype_size(t));
    for (size_t k = 0; k < v.size(); k++) {
        if (t == DType::F32) std::memcpy(&v[k], bytes.data() + 4 * k, 4);
        else {
            uint16_t h;
            std::memcpy(&h, bytes.data() + 2 * k, 2);
            v[k] = widen(t, h);
        }
    }
    return v;
}

// Runs `call` on `in` in f32 and in 16-bit storage (the stored inputs rounded
// in both runs) and expects each output of the 16-bit run to be the f32
// run's, rounded once: within half a step (2^-8 relative for bf16, 2^-11 for
// f16), plus `atol` for sums whose order differs (the f32 GEMMs run in
// OpenBLAS) and for f16's subnormals (steps of 2^-24).
void expect_storage_form_matches(const OpCall &call, std::vector<Operand> in, double atol = 1e-6) {
    SCOPED_TRACE(call.who());
    for (size_t k = 0; k < in.size(); k++)
        if (!input_stays_f32(call.kind, static_cast<int>(k)))
            for (float &v : in[k].f) v = widen(storage_half, narrow(storage_half, v));
    Buffers f32_in, bf16_in, f32_out, bf16_out;
    std::vector<TensorType> f32_types, bf16_types;
    for (size_t k = 0; k < in.size(); k++) {
        fill(f32_in, in[k], false);
        fill(bf16_in, in[k], !input_stays_f32(call.kind, static_cast<int>(k)));
        f32_types.push_back(f32_in.refs.back().type);
        bf16_types.push_back(bf16_in.refs.back().type);
    }
    for (const TensorType &t : infer_types(call, f32_types)) f32_out.add(t);
    for (const TensorType &t : infer_types(call, bf16_types)) bf16_out.add(t);
    for (Buffers *b : {&f32_in, &bf16_in, &f32_out, &bf16_out}) b->fix();
    run_op(call, f32_in.refs, f32_out.refs);
    run_op(call, bf16_in.refs, bf16_out.refs);
    for (size_t o = 0; o < f32_out.refs.size(); o++) {
        const DType held = bf16_out.refs[o].type.dtype;
        EXPECT_EQ(held, output_stays_f32(call.kind, static_cast<int>(o)) ? DType::F32 : storage_half) << "output " << o;
        const std::vector<float> want = as_floats(f32_out.bytes[o], DType::F32), got = as_floats(bf16_out.bytes[o], held);
        const double rel = held == DType::BF16 ? std::ldexp(1.0, -8) : held == DType::F16 ? std::ldexp(1.0, -11) : 1e-6;
        expect_near(got, to_double(want), atol, rel, "output");
    }
}

OpCall with_attrs(OpKind k, Attrs a = {}) { return {k, "op", std::move(a)}; }

class StorageForm : public ::testing::TestWithParam<DType> {
protected:
    void SetUp() override { storage_half = GetParam(); }
};

TEST_P(StorageForm, MatrixProductsAndElementwise) {
    expect_storage_form_matches(with_attrs(OpKind::Matmul), {floats({7, 33}, 1), floats({33, 5}, 2)});
    expect_storage_form_matches(with_attrs(OpKind::Matmul, {{"transpose_b", int64_t{1}}}),
                                {floats({6, 20}, 3), floats({9, 20}, 4)});
    expect_storage_form_matches(with_attrs(OpKind::Matmul, {{"transpose_a", int64_t{1}}}),
                                {floats({64, 32}, 16), floats({64, 10}, 17)});
    expect_storage_form_matches(with_attrs(OpKind::Matmul, {{"transpose_a", int64_t{1}}, {"transpose_b", int64_t{1}}}),
                                {floats({40, 24}, 18), floats({10, 40}, 19)});
    expect_storage_form_matches(with_attrs(OpKind::BatchMatmul), {floats({3, 4, 17}, 5), floats({3, 17, 6}, 6)});
    expect_storage_form_matches(with_attrs(OpKind::BiasAdd, {{"axis", int64_t{-1}}}), {floats({5, 8}, 7), floats({8}, 8)});
    expect_storage_form_matches(with_attrs(OpKind::BiasAddGrad, {{"axis", int64_t{-1}}}), {floats({64, 8}, 9)});
    expect_storage_form_matches(with_attrs(OpKind::Add), {floats({3, 70}, 10), floats({3, 70}, 11)});
    expect_storage_form_matches(with_attrs(OpKind::Gelu), {floats({1000}, 12, -4, 4)});
    expect_storage_form_matches(with_attrs(OpKind::ReluGrad), {floats({100}, 13), floats({100}, 14)});
    expect_storage_form_matches(with_attrs(OpKind::Dropout, {{"rate", 0.25}, {"seed", int64_t{9}}}), {floats({300}, 15)});
}

TEST_P(StorageForm, SoftmaxNormsAndLoss) {
    expect_storage_form_matches(with_attrs(OpKind::Softmax), {floats({6, 40}, 20, -5, 5)});
    expect_storage_form_matches(with_attrs(OpKind::LogSoftmax), {floats({6, 40}, 21, -5, 5)});
    expect_storage_form_matches(with_attrs(OpKind::SoftmaxXent), {floats({8, 10}, 22, -3, 3), ids({8}, 23, 9)});
    expect_storage_form_matches(with_attrs(OpKind::SoftmaxXentGrad),
                                {floats({8, 10}, 24, -3, 3), ids({8}, 25, 9), floats({}, 26)});
    expect_storage_form_matches(with_defaults(with_attrs(OpKind::LayerNorm)),
                                {floats({5, 48}, 27), floats({48}, 28), floats({48}, 29)});
    expect_storage_form_matches(with_defaults(with_attrs(OpKind::LayerNormGrad)),
                                {floats({5, 48}, 30), floats({5, 48}, 31), floats({48}, 32)});
    expect_storage_form_matches(with_defaults(with_attrs(OpKind::BatchNorm)),
                                {floats({4, 3, 5, 5}, 33), floats({3}, 34), floats({3}, 35)});
    expect_storage_form_matches(with_defaults(with_attrs(OpKind::BatchNormGrad)),
                                {floats({4, 3, 5, 5}, 36), floats({4, 3, 5, 5}, 37), floats({3}, 38)}, 1e-5);
    expect_storage_form_matches(with_defaults(with_attrs(OpKind::BatchNormStats)),
                                {floats({4, 3, 5, 5}, 39), floats({3}, 40), floats({3}, 41)});
}

TEST_P(StorageForm, ConvolutionsPoolsLayoutAndEmbedding) {
    const Attrs window = {{"stride_h", int64_t{1}}, {"stride_w", int64_t{1}}, {"pad_h", int64_t{1}}, {"pad_w", int64_t{1}}};
    expect_storage_form_matches(with_attrs(OpKind::Conv2d, window), {floats({2, 3, 6, 6}, 50), floats({4, 3, 3, 3}, 51)});
    Attrs gi = window;
    gi.set("in_h", int64_t{6}).set("in_w", int64_t{6});
    expect_storage_form_matches(with_attrs(OpKind::Conv2dGradInput, gi), {floats({2, 4, 6, 6}, 52), floats({4, 3, 3, 3}, 53)});
    Attrs gw = window;
    gw.set("kernel_h", int64_t{3}).set("kernel_w", int64_t{3});
    expect_storage_form_matches(with_attrs(OpKind::Conv2dGradWeight, gw), {floats({2, 4, 6, 6}, 54), floats({2, 3, 6, 6}, 55)});
    const Attrs pool = {{"kernel_h", int64_t{2}}, {"kernel_w", int64_t{2}}, {"stride_h", int64_t{2}}, {"stride_w", int64_t{2}}};
    expect_storage_form_matches(with_defaults(with_attrs(OpKind::MaxPool2d, pool)), {floats({2, 3, 6, 6}, 56)});
    expect_storage_form_matches(with_defaults(with_attrs(OpKind::AvgPool2d, pool)), {floats({2, 3, 6, 6}, 57)});
    expect_storage_form_matches(with_attrs(OpKind::GlobalAvgPool), {floats({2, 3, 6, 6}, 58)});
    expect_storage_form_matches(with_attrs(OpKind::Permute, {{"perm", std::vector<int64_t>{0, 2, 1}}}), {floats({3, 5, 7}, 60)});
    expect_storage_form_matches(with_attrs(OpKind::Reshape, {{"shape", std::vector<int64_t>{15, 7}}}), {floats({3, 5, 7}, 61)});
    expect_storage_form_matches(with_attrs(OpKind::Concat, {{"axis", int64_t{1}}}), {floats({3, 4}, 62), floats({3, 2}, 63)});
    expect_storage_form_matches(with_attrs(OpKind::ReduceSum, {{"axis", int64_t{0}}}), {floats({9, 4}, 64)});
    expect_storage_form_matches(with_attrs(OpKind::Embedding), {floats({20, 6}, 65), ids({4, 5}, 66, 19)});
    expect_storage_form_matches(with_attrs(OpKind::EmbeddingGrad, {{"vocab", int64_t{20}}}), {floats({4, 5, 6}, 67), ids({4, 5}, 68, 19)});
}

INSTANTIATE_TEST_SUITE_P(Halves, StorageForm, ::testing::Values(DType::BF16, DType::F16),
                         [](const auto &info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace tessera::test
