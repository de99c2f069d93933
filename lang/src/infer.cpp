// Dispatch from the generic operator interface to each family's shape rules.
#include "tessera/lang/op.h"

#include "family.h"

namespace tessera {

std::vector<TensorType> infer_types(const OpCall &call, const std::vector<TensorType> &inputs) {
    const OpInfo &info = op_info(call.kind);
    int n = static_cast<int>(inputs.size());
    if (info.min_inputs == info.max_inputs)
        TESSERA_CHECK(n == info.min_inputs, call.who(), ": expects ", info.min_inputs, " inputs, got ", n);
    else
        TESSERA_CHECK(n >= info.min_inputs && n <= info.max_inputs, call.who(), ": expects ",
                      info.min_inputs, " to ", info.max_inputs, " inputs, got ", n);
    for (int i = 0; i < n; i++)
        for (int64_t d : inputs[i].shape)
            TESSERA_CHECK(d >= 1, call.who(), ": input ", i, " has shape ", shape_str(inputs[i].shape),
                          "; every extent must be at least 1");
    std::string family = info.family;
#define TESSERA_FAMILY(f) \
    if (family == #f) return lang::infer_##f(call, inputs);
    TESSERA_FAMILY(matmul)
    TESSERA_FAMILY(elementwise)
    TESSERA_FAMILY(softmax)
    TESSERA_FAMILY(norm)
    TESSERA_FAMILY(conv)
    TESSERA_FAMILY(layout)
    TESSERA_FAMILY(misc)
    TESSERA_FAMILY(optim)
#undef TESSERA_FAMILY
    TESSERA_INTERNAL_ASSERT(false, "no family '", family, "'");
}

OpCall with_defaults(const OpCall &call) {
    OpCall c = call;
    std::string family = op_info(call.kind).family;
#define TESSERA_FAMILY(f) \
    if (family == #f) lang::fill_defaults_##f(c);
    TESSERA_FAMILY(matmul)
    TESSERA_FAMILY(elementwise)
    TESSERA_FAMILY(softmax)
    TESSERA_FAMILY(norm)
    TESSERA_FAMILY(conv)
    TESSERA_FAMILY(layout)
    TESSERA_FAMILY(misc)
    TESSERA_FAMILY(optim)
#undef TESSERA_FAMILY
    return c;
}

}  // namespace tessera
