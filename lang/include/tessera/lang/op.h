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
