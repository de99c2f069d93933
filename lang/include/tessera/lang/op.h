// The operator vocabulary shared by every layer of Tessera: the list of operators,
// their attributes, and shape inference with attribute validation.
//
// This header is light (no Halide). The meaning of each operator is its Halide
// description in lang/defs/; shapes here follow that meaning, and the kernel tests
// check both against plain loops.
#pragma once

#include <string>
#include <vector>

#include "tessera/attrs.h"
#include "tessera/types.h"

namespace tessera {

enum class OpKind : uint8_t {
#define TESSERA_OP(id, name, family, min_in, max_in, outs) id,
#include "tessera/lang/ops.def"
#undef TESSERA_OP
};

struct OpInfo {
    OpKind kind;
    const char *name;
    const char *family;
    int min_inputs, max_inputs, outputs;
};

const OpInfo &op_info(OpKind k);
const std::vector<OpInfo> &all_ops();
inline const char *op_name(OpKind k) { return op_info(k).name; }
// Throws tessera::Error listing the valid names when `name` is unknown.
OpKind op_from_name(const std::string &name);

// Whether the output of `k` may be written over its input `input` (same
// offset, same size): true for the element-wise operators, whose kernels
// compute each output element from the inputs' elements at its own index and
// read those before they write it (the CPU schedules guard vector tails with
// an if, never recomputing elements; the GPU kernels take one element per
// thread). bias_add only over x, not the bias. The swap planner uses it to
// let such an output take the slot of an input read for the last time, and
// the verifier to accept that write.
bool op_may_overwrite_input(OpKind k, int input);

// Storage types (docs/lowering.md, "Storage types"). An operator whose
// floating inputs are bf16 (or f16) reads and writes that type and computes in
// f32, except for these inputs and outputs, which are f32 whatever the others
// hold: softmax_xent's loss and the loss gradient softmax_xent_grad reads, and
// batch norm's running statistics. Cast and the optimizer updates have no
// 16-bit forms: has_storage_forms() is false for them.
bool input_stays_f32(OpKind k, int input);
bool output_stays_f32(OpKind k, int output);
bool has_storage_forms(OpKind k);
// The attribute (a list of output indices) that keeps those outputs of a call
// with 16-bit inputs in f32: its f32 result is stored as it is instead of
// rounded (a weight's gradient, accumulated and reduced in f32; graph/precision.h).
inline constexpr const char *kF32OutputsAttr = "f32_outputs";

// One use of an operator: what, the node's name (for errors), and its attributes.
struct OpCall {
    OpKind kind;
    std::string name;
    Attrs attrs;

    // "conv2d 'block3.conv1'", or "conv2d" for an unnamed call.
    std::string who() const;
    bool operator==(const OpCall &) const = default;
};

// Output types from input types and attributes. Validates every attribute and
// throws tessera::Error naming the operator, the input and what was expected.
std::vector<TensorType> infer_types(const OpCall &call, const std::vector<TensorType> &inputs);

// The call with every optional attribute set to its default value.
OpCall with_defaults(const OpCall &call);

// Gelu uses the tanh approximation; these constants are part of its meaning.
inline constexpr double kGeluC = 0.7978845608028654;  // sqrt(2/pi)
inline constexpr double kGeluA = 0.044715;

}  // namespace tessera
