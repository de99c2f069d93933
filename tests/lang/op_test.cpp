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
