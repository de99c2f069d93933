// The operator vocabulary: names, arity and generic validation.
#include "test_util.h"

namespace tessera::test {
namespace {

TEST(Ops, NamesRoundTrip) {
    for (const OpInfo &o : all_ops()) EXPECT_EQ(op_from_name(o.name), o.kind);
}

TEST(Ops, UnknownNameListsValidOnes) {
    expect_error([] { op_from_name("convolution"); }, "unknown operator 'convolution'; valid operators are: matmul");
}

TEST(Ops, WrongInputCount) {
    expect_error([] { infer_types({OpKind::Relu, "act", {}}, {{DType::F32, {2}}, {DType::F32, {2}}}); },
                 "relu 'act': expects 1 inputs, got 2");
}

TEST(Ops, ZeroExtentRejected) {
    expect_error([] { infer_types({OpKind::Relu, "act", {}}, {{DType::F32, {2, 0}}}); },
                 "relu 'act': input 0 has shape [2, 0]; every extent must be at least 1");
}

TEST(Ops, OutputTypeChecked) {
    HostTensor x({2, 3}), y({3, 2});
    expect_error([&] { run_op({OpKind::Relu, "act", {}}, {x.ref()}, {y.ref()}); },
                 "relu 'act': output 0 must be f32[2, 3], got f32[3, 2]");
}

TEST(Ops, AttributeTypeChecked) {
    expect_error([] { infer_types({OpKind::Matmul, "fc", {{"transpose_a", 1.5}}}, {{DType::F32, {2, 2}}, {DType::F32, {2, 2}}}); },
                 "attribute 'transpose_a' must be an integer, got 1.5");
}

}  // namespace
}  // namespace tessera::test

namespace tessera::test {
namespace {

// Kernels that vectorise must not assume 64-byte alignment: the executor's arena
// places tensors at any float offset. (Halide 14 emits aligned masked loads for
// vectorised updates of outputs; descriptions must not rely on that pattern.)
TEST(Ops, KernelsAcceptUnalignedBuffers) {
    set_gemm_backend(GemmBackend::Halide);
    std::vector<std::pair<OpCall, std::vector<HostTensor>>> cases;
    cases.push_back({{OpKind::Matmul, "", {}}, {random_tensor({37, 29}, 1), random_tensor({29, 41}, 2)}});
    cases.push_back({{OpKind::ReduceSum, "", {{"axis", int64_t(-1)}}}, {random_tensor({13, 67}, 3)}});
    cases.push_back({{OpKind::ReduceSum, "", {{"axis", int64_t(0)}}}, {random_tensor({13, 67}, 4)}});
    cases.push_back({{OpKind::BiasAddGrad, "", {{"axis", int64_t(1)}}}, {random_tensor({5, 19, 7}, 5)}});
    cases.push_back({{OpKind::Conv2d, "", {{"pad_h", int64_t(1)}, {"pad_w", int64_t(1)}}},
                     {random_tensor({2, 5, 9, 11}, 6), random_tensor({7, 5, 3, 3}, 7)}});
    cases.push_back({{OpKind::Relu, "", {}}, {random_tensor({1031}, 8)}});
    cases.push_back({{OpKind::EmbeddingGrad, "", {{"vocab", int64_t(11)}}},
                     {random_tensor({6, 33}, 9), random_ints({6}, 10, 0, 10)}});
    cases.push_back({{OpKind::Adam, "", {{"lr", 0.01}}},
                     {random_tensor({77}, 11), random_tensor({77}, 12), random_tensor({77}, 13),
                      random_tensor({77}, 14, 0.0f, 1.0f), random_ints({}, 15, 3, 3)}});
    for (auto &[call, inputs] : cases) expect_same_unaligned(call, inputs);
    set_gemm_backend(GemmBackend::Blas);
}

}  // namespace
}  // namespace tessera::test
