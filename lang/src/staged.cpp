#include "tessera/lang/staged.h"

#include "family.h"
#include "tessera/lang/strategy.h"

namespace tessera {

namespace {

constexpr const char *kPhase = "phase";

std::string whole_key(size_t i) { return "whole_in" + std::to_string(i); }
std::string origin_key(size_t i) { return "origin_in" + std::to_string(i); }

TensorType rows_of(const TensorType &x) {
    return TensorType{DType::F32, {lang::extent_product(x.shape, 0, static_cast<int>(x.shape.size()) - 1)}};
}

}  // namespace

bool is_staged(const OpCall &call) { return call.attrs.has(kPhase); }

int staged_phase(const OpCall &call) { return static_cast<int>(call.attrs.get_int(call.who(), kPhase)); }

Shape staged_whole(const OpCall &call, size_t input) { return call.attrs.get_ints(call.who(), whole_key(input)); }

Shape staged_origin(const OpCall &call, size_t input) { return call.attrs.get_ints(call.who(), origin_key(input)); }

OpCall unstaged_call(const OpCall &call) {
    OpCall c = call;
    Attrs plain;
    for (const auto &[k, v] : call.attrs.values())
        if (k != kPhase && k.rfind("whole_in", 0) != 0 && k.rfind("origin_in", 0) != 0) plain.set(k, v);
    c.attrs = plain;
    return c;
}

std::vector<std::string> op_stages(const OpCall &call, const std::vector<TensorType> &inputs) {
    const OpStrategies *s = strategies_for(call, inputs);
    return s ? s->stages : std::vector<std::string>{};
}

TensorType stage_type(const OpCall &call, const std::vector<TensorType> &in) {
    switch (call.kind) {
    case OpKind::Softmax:
    case OpKind::LogSoftmax:
    case OpKind::SoftmaxGrad:
    case OpKind::LogSoftmaxGrad:
    case OpKind::LayerNorm:
    case OpKind::LayerNormGrad: return rows_of(in[0]);
    case OpKind::SoftmaxXent:
    case OpKind::SoftmaxXentGrad: return TensorType{DType::F32, {in[0].shape[0]}};
    case OpKind::BatchNorm:
    case OpKind::BatchNormGrad:
    case OpKind::BatchNormStats: return TensorType{DType::F64, {in[0].shape[1]}};
    case OpKind::GlobalAvgPool: return TensorType{DType::F32, {in[0].shape[0], in[0].shape[1]}};
    default: break;
    }
    TESSERA_INTERNAL_ASSERT(false, call.who(), " has no staged form");
}

OpCall staged_call(const OpCall &call, int phase, const std::vector<Shape> &whole, const std::vector<Shape> &origin) {
    OpCall c = unstaged_call(call);
    c.attrs.set(kPhase, int64_t{phase});
    for (size_t i = 0; i < whole.size(); i++) {
        c.attrs.set(whole_key(i), std::vector<int64_t>(whole[i].begin(), whole[i].end()));
        c.attrs.set(origin_key(i), std::vector<int64_t>(origin[i].begin(), origin[i].end()));
    }
    return c;
}

std::vector<TensorType> infer_staged(const OpCall &call, const std::vector<TensorType> &inputs) {
    const OpCall plain = unstaged_call(call);
    const int phase = staged_phase(call);
    const int own_inputs = op_info(call.kind).max_inputs;  // staged operators take a fixed number
    TESSERA_CHECK(phase >= 0 && inputs.size() == static_cast<size_t>(own_inputs + phase), call.who(), ": phase ",
                  phase, " takes the operator's ", own_inputs, " inputs and ", phase, " stage inputs, got ",
                  inputs.size(), " inputs");
    std::vector<TensorType> own(inputs.begin(), inputs.end() - phase);
    std::vector<TensorType> out = infer_types(plain, own);
    const int m = static_cast<int>(op_stages(plain, own).size());
    TESSERA_CHECK(phase <= m, call.who(), ": phase ", phase, " of an operator with ", m, " stages");
    const TensorType st = stage_type(plain, own);
    for (size_t j = own.size(); j < inputs.size(); j++)
        TESSERA_CHECK(inputs[j] == st, call.who(), ": stage input ", j - own.size(), " must be ", type_str(st),
                      ", got ", type_str(inputs[j]));
    for (size_t i = 0; i < own.size(); i++) {
        TESSERA_CHECK(call.attrs.has(whole_key(i)) && call.attrs.has(origin_key(i)), call.who(),
                      ": a staged call needs attributes '", whole_key(i), "' and '", origin_key(i), "'");
        const Shape whole = staged_whole(call, i), origin = staged_origin(call, i);
        TESSERA_CHECK(whole.size() == own[i].shape.size() && origin.size() == whole.size(), call.who(), ": '",
                      whole_key(i), "' and '", origin_key(i), "' must have one entry per dimension of input ", i);
        for (size_t d = 0; d < whole.size(); d++)
            TESSERA_CHECK(origin[d] >= 0 && origin[d] + own[i].shape[d] <= whole[d], call.who(), ": input ", i,
                          " ", shape_str(own[i].shape), " at ", shape_str(origin), " lies outside its whole shape ",
                          shape_str(whole));
    }
    if (phase < m) return {st};
    return out;
}

}  // namespace tessera
