// GPU kernel cases for the elementwise family. The point-wise kernels see every
// tensor flat, so rank only matters through the element count: one element and
// an odd count (not a multiple of 4, 8 or 32) cover them. The bias operators
// depend on the [outer, C, inner] split, so they run at every axis of ranks 1,
// 2 and 4 (size-1 dimensions included), with negative and defaulted axes.
#include <string>

#include "cases.h"
#include "tessera/types.h"

namespace tessera::test {

namespace {

using Fill = std::function<void(int, std::vector<float> &, std::vector<int32_t> &)>;

TensorType f32(Shape s) { return {DType::F32, std::move(s)}; }

GpuCase make(std::string label, OpCall call, std::vector<TensorType> inputs, Fill fill = {}, double rtol = 1e-5) {
    return {std::move(label), std::move(call), std::move(inputs), std::move(fill), rtol, 1e-5};
}

// Inputs spread over [-3, 3), wider than the default [-1, 1), so that gelu, tanh
// and sigmoid run in their curved and saturating parts too.
void wide(int input, std::vector<float> &f, std::vector<int32_t> &) {
    for (size_t k = 0; k < f.size(); k++)
        f[k] = -3.0f + 6.0f * static_cast<float>((k * 7919 + 131 * input + 13) % 1000) / 1000.0f;
}

}  // namespace

std::vector<GpuCase> gpu_cases_elementwise() {
    std::vector<GpuCase> cases;
    const OpKind pointwise[] = {OpKind::Relu,     OpKind::Gelu,     OpKind::Tanh,        OpKind::Sigmoid,
                                OpKind::Add,      OpKind::Sub,      OpKind::Mul,         OpKind::ReluGrad,
                                OpKind::GeluGrad, OpKind::TanhGrad, OpKind::SigmoidGrad, OpKind::Erf,
                                OpKind::ErfGrad};
    for (const Shape &s : {Shape{1}, Shape{2, 3, 5, 7}}) {
        for (OpKind k : pointwise) {
            std::vector<TensorType> in(op_info(k).min_inputs, f32(s));
            cases.push_back(make(std::string(op_name(k)) + " " + shape_str(s), {k, "ew", {}}, in, wide));
        }
        cases.push_back(make("scale " + shape_str(s), {OpKind::Scale, "ew", {{"alpha", -2.5}}}, {f32(s)}));
    }
    // An alpha that float rounds: the kernel must take it as float, like the CPU.
    cases.push_back(make("scale alpha 0.1", {OpKind::Scale, "ew", {{"alpha", 0.1}}}, {f32({1031})}));

    for (const Shape &s : {Shape{9}, Shape{5, 3}, Shape{2, 3, 1, 5}}) {
        int rank = static_cast<int>(s.size());
        for (int axis = -rank; axis < rank; axis++) {
            // Each axis once, half of them named from the end.
            int a = axis < 0 ? axis + rank : axis;
            if ((axis < 0) != (a % 2 == 1)) continue;
            std::string tag = shape_str(s) + " axis " + std::to_string(axis);
            Attrs at{{"axis", int64_t{axis}}};
            cases.push_back(make("bias_add " + tag, {OpKind::BiasAdd, "b", at}, {f32(s), f32({s[a]})}));
            cases.push_back(make("bias_add_grad " + tag, {OpKind::BiasAddGrad, "b", at}, {f32(s)}));
        }
    }
    cases.push_back(make("bias_add default axis", {OpKind::BiasAdd, "b", {}}, {f32({4, 7}), f32({7})}));
    cases.push_back(make("bias_add_grad default axis", {OpKind::BiasAddGrad, "b", {}}, {f32({4, 7})}));
    // Sums over hundreds of elements, in the CPU kernel's order: a dense layer's
    // bias over a batch, and a convolution's over N, H and W.
    cases.push_back(make("bias_add_grad [517, 33]", {OpKind::BiasAddGrad, "b", {}}, {f32({517, 33})}, {}, 1e-4));
    // 3000 rows: a lane for every 32 rows (93 lanes, not 32), each several rows.
    cases.push_back(make("bias_add_grad [3000, 5]", {OpKind::BiasAddGrad, "b", {}}, {f32({3000, 5})}, {}, 1e-4));
    Attrs nchw{{"axis", int64_t{1}}};
    cases.push_back(make("bias_add_grad [3, 19, 11, 13] axis 1", {OpKind::BiasAddGrad, "b", nchw},
                         {f32({3, 19, 11, 13})}, {}, 1e-4));
    cases.push_back(
        make("bias_add [3, 19, 11, 13] axis 1", {OpKind::BiasAdd, "b", nchw}, {f32({3, 19, 11, 13}), f32({19})}));
    return cases;
}

}  // namespace tessera::test
