// Dispatch from the generic operator interface to each family's shape rules.
#include "tessera/lang/op.h"

#include <algorithm>

#include "family.h"
#include "tessera/lang/staged.h"

namespace tessera {

namespace {

// Mixed precision: the families' rules are written for f32. An operator whose
// floating inputs hold bf16 (or f16) is inferred as if they held f32, and its
// f32 outputs then take that storage type (op.h, input_stays_f32 and
// output_stays_f32 for the exceptions).

// The one storage type of the call's f32, bf16 and f16 inputs; tessera::Error
// when they differ.
DType storage_type(const OpCall &call, const std::vector<TensorType> &in) {
    int first = -1;
    for (int i = 0; i < static_cast<int>(in.size()); i++) {
        const DType t = in[i].dtype;
        if (t == DType::I32 || t == DType::F64 || input_stays_f32(call.kind, i)) continue;
        if (first < 0) first = i;
        TESSERA_CHECK(t == in[first].dtype, call.who(), ": input ", i, " is ", type_str(in[i]), " but input ", first,
                      " is ", type_str(in[first]), "; an operator's floating inputs share one storage type "
                      "(cast one of them)");
    }
    return first < 0 ? DType::F32 : in[first].dtype;
}

std::vector<TensorType> infer_stored(const OpCall &call, const std::vector<TensorType> &inputs) {
    const lang::FamilyFns &family = lang::family_of(call.kind);
    if (!has_storage_forms(call.kind)) return family.infer(call, inputs);
    const DType store = storage_type(call, inputs);
    if (store == DType::F32) return family.infer(call, inputs);
    std::vector<TensorType> as_f32 = inputs;
    for (TensorType &t : as_f32)
        if (is_half(t.dtype)) t.dtype = DType::F32;
    std::vector<TensorType> out = family.infer(call, as_f32);
    const std::vector<int64_t> kept = call.attrs.get_ints(call.who(), kF32OutputsAttr, {});
    for (int64_t k : kept)
        TESSERA_CHECK(k >= 0 && k < static_cast<int64_t>(out.size()) && out[k].dtype == DType::F32, call.who(), ": ",
                      kF32OutputsAttr, " names output ", k, ", which is not one of its ", out.size(), " float outputs");
    for (size_t i = 0; i < out.size(); i++) {
        const bool keep = std::find(kept.begin(), kept.end(), static_cast<int64_t>(i)) != kept.end();
        if (out[i].dtype == DType::F32 && !keep && !output_stays_f32(call.kind, static_cast<int>(i)))
            out[i].dtype = store;
    }
    return out;
}

}  // namespace

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
    return infer_stored(call, inputs);
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
