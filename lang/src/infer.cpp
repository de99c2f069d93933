// Dispatch from the generic operator interface to each family's shape rules.
#include "tessera/lang/op.h"

#include "family.h"
#include "tessera/lang/staged.h"

namespace tessera {

std::vector<TensorType> infer_types(const OpCall &call, const std::vector<TensorType> &inputs) {
    if (is_staged(call)) return infer_staged(call, inputs);
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
    return lang::family_of(call.kind).infer(call, inputs);
}

OpCall with_defaults(const OpCall &call) {
    OpCall c = call;
    lang::family_of(call.kind).fill_defaults(c);
    return c;
}

namespace lang {

const FamilyFns &family_of(OpKind k) {
#define TESSERA_FAMILY_ENTRY(f) FamilyFns{#f, infer_##f, structural_##f, fill_defaults_##f, run_##f},
    static const std::vector<FamilyFns> families = {TESSERA_FOR_EACH_FAMILY(TESSERA_FAMILY_ENTRY)};
#undef TESSERA_FAMILY_ENTRY
    const std::string name = op_info(k).family;
    for (const FamilyFns &f : families)
        if (name == f.name) return f;
    TESSERA_INTERNAL_ASSERT(false, "operator ", op_name(k), " has no family '", name, "'");
}

}  // namespace lang

}  // namespace tessera
