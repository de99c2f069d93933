#include "cost.h"

#include <algorithm>

#include "tessera/error.h"

namespace tessera::part {

namespace {

int64_t slice_bytes(const TensorType &t, int dim) {
    int64_t e = t.shape[dim];
    return e == 0 ? 0 : t.bytes() / e;
}

// Rows of `need` that part p of k reads, clamped to [0, extent).
std::pair<int64_t, int64_t> needed_rows(const InputNeed &need, int64_t var_extent, int64_t extent, int k, int p) {
    int64_t part = var_extent / k;
    int64_t lo = need.scale * (p * part) + need.lo_off;
    int64_t hi = need.scale * ((p + 1) * part - 1) + need.hi_off;
    return {std::max<int64_t>(lo, 0), std::min<int64_t>(hi, extent - 1)};
}

// The extent the split variable has in this strategy: the output dimension it
// splits, else the input dimension it indexes one-to-one.
int64_t variable_extent(const Strategy &s, const std::vector<InputNeed> &needs, const std::vector<TensorType> &in,
                        const std::vector<TensorType> &out) {
    for (size_t j = 0; j < s.outputs.size(); j++)
        if (s.outputs[j].kind == OutKind::Split) return out[j].shape[s.outputs[j].dim];
    for (size_t i = 0; i < needs.size(); i++)
        if (needs[i].split && needs[i].scale == 1 && needs[i].lo_off == 0 && needs[i].hi_off == 0)
            return in[i].shape[needs[i].dim];
    for (size_t i = 0; i < needs.size(); i++)
        if (needs[i].split) return in[i].shape[needs[i].dim];
    return 0;
}

const char *reduce_word(const std::string &r) {
    return r == "sum" ? "partial sum" : r == "max" ? "partial max" : "partial min";
}

// Whether the operator's kernel, run on the blocks a strategy gives it,
// computes that block of the result (up to the scaling lowering adds for a
// batch mean). Kernels that index with a global coordinate do not: dropout's
// mask is drawn per element index; embedding_grad scatters into rows by token
// id; global average pooling's gradient takes the whole extents as attributes.
bool runs_on_blocks(const OpCall &call, const NodeOption &o) {
    switch (call.kind) {
    case OpKind::Dropout: return false;
    case OpKind::EmbeddingGrad: return !(o.outputs[0].form == OutForm::Split && o.outputs[0].dim == 0);
    case OpKind::GlobalAvgPool: return o.outputs[0].form != OutForm::Partial;
    case OpKind::GlobalAvgPoolGrad: return !(o.outputs[0].form == OutForm::Split && o.outputs[0].dim >= 2);
    default: return true;
    }
}

// Every split input is read as exactly its own block: part p of the
// variable's k parts reads part p of the input's k parts.
bool aligned(const NodeOption &o, const std::vector<TensorType> &in) {
    for (size_t i = 0; i < o.inputs.size(); i++) {
        const InputNeed &n = o.inputs[i];
        if (!n.split) continue;
        if (n.lo_off != 0 || n.hi_off != n.scale - 1 || n.scale * o.var_extent != in[i].shape[n.dim]) return false;
    }
    return true;
}

// The operator, given its blocks, makes exactly the blocks of its outputs the
// strategy says (a reshape whose input stays whole does not, for one).
bool block_shapes_agree(const OpCall &call, const NodeOption &o, const std::vector<TensorType> &in,
                        const std::vector<TensorType> &out, int k) {
    std::vector<TensorType> local_in = in, local_out = out;
    for (size_t i = 0; i < in.size(); i++)
        if (o.inputs[i].split) local_in[i].shape[o.inputs[i].dim] /= k;
    for (size_t j = 0; j < out.size(); j++)
        if (o.outputs[j].form == OutForm::Split) local_out[j].shape[o.outputs[j].dim] /= k;
    try {
        return infer_types(local_call(call, local_out[0].shape), local_in) == local_out;
    } catch (const Error &) {
        return false;
    }
}

}  // namespace

OpCall local_call(const OpCall &call, const Shape &out0) {
    OpCall c = call;
    if (c.kind == OpKind::Reshape) c.attrs.set("shape", out0);
    if (c.kind == OpKind::Broadcast) {
        int64_t axis = c.attrs.get_int(c.who(), "axis");
        if (axis < 0) axis += static_cast<int64_t>(out0.size());
        if (axis >= 0 && axis < static_cast<int64_t>(out0.size())) c.attrs.set("extent", out0[axis]);
    }
    return c;
}

std::vector<NodeOption> node_options(const OpCall &call, const OpStrategies *strategies,
                                     const std::vector<TensorType> &in, const std::vector<TensorType> &out,
                                     int k, bool executable, bool staged) {
    std::vector<NodeOption> options;
    if (strategies) {
        SymEnv env = symbol_env(call, in);
        for (size_t si = 0; si < strategies->strategies.size(); si++) {
            const Strategy &s = strategies->strategies[si];
            NodeOption o;
            o.strategy = static_cast<int>(si);
            for (const tessera::InputNeed &n : s.inputs) {
                InputNeed need;
                if (n.kind == NeedKind::Split) {
                    need = {true, n.dim, n.scale.eval(env), n.lo_offset.eval(env), n.hi_offset.eval(env)};
                }
                o.inputs.push_back(need);
            }
            bool partial = false;
            std::string reduce;
            for (const OutputResult &r : s.outputs) {
                if (r.kind == OutKind::Split) o.outputs.push_back({OutForm::Split, r.dim});
                else if (r.kind == OutKind::Partial) {
                    o.outputs.push_back({OutForm::Partial, -1});
                    partial = true;
                    reduce = r.reduce;
                } else o.outputs.push_back({OutForm::Replicated, -1});
            }
            o.var_extent = variable_extent(s, o.inputs, in, out);
            if (o.var_extent < k || o.var_extent % k != 0) continue;
            // Partial max/min outputs would need a max-reduce collective whose
            // bytes match a sum's; only sums are lowered for now.
            if (partial && reduce != "sum") continue;
            // Split inputs read one-to-one must divide as well.
            bool ok = true;
            for (size_t i = 0; i < o.inputs.size(); i++) {
                const InputNeed &n = o.inputs[i];
                if (n.split && n.scale == 1 && n.lo_off == 0 && n.hi_off == 0 && in[i].shape[n.dim] % k != 0) ok = false;
            }
            for (size_t j = 0; j < o.outputs.size(); j++)
                if (o.outputs[j].form == OutForm::Split && out[j].shape[o.outputs[j].dim] % k != 0) ok = false;
            if (!ok) continue;
            if (executable && ((!staged && !s.reductions.empty()) || !aligned(o, in) || !runs_on_blocks(call, o) ||
                               !block_shapes_agree(call, o, in, out, k)))
                continue;
            for (const StageReduction &r : s.reductions) {
                int64_t elements = r.elements.eval(env);
                o.stage_bytes += all_reduce_bytes(k, elements * 4);
                o.stages.push_back(r.stage);
            }
            o.label = "split " + s.var;
            if (partial) o.label += std::string(" (") + reduce_word(reduce) + ")";
            else if (!s.reductions.empty()) o.label += " (all-reduce inside)";
            options.push_back(std::move(o));
        }
    }
    // Every device computing the whole operator is always possible. It moves no
    // bytes only when every input is already replicated, which the search allows
    // for weights alone, so it is how data parallelism updates its replicas.
    {
        NodeOption o;
        o.label = "replicate";
        o.inputs.assign(in.size(), InputNeed{});
        o.outputs.assign(out.size(), OutputForm{});
        options.push_back(std::move(o));
    }
    return options;
}

Conversion input_conversion(const Layout &held, const InputNeed &need, const TensorType &t, int64_t var_extent,
                            int k) {
    if (!held.is_split()) return {CommKind::AllGather, 0};  // every device has it all: slice locally
    if (!need.split) return {CommKind::AllGather, all_gather_bytes(k, t.bytes())};
    const int64_t extent = t.shape[need.dim];
    if (held.dim != need.dim) {
        // Each device needs its rows in full along held.dim and holds 1/k of them.
        int64_t rows = 0;
        for (int p = 0; p < k; p++) {
            auto [lo, hi] = needed_rows(need, var_extent, extent, k, p);
            rows += std::max<int64_t>(hi - lo + 1, 0);
        }
        int64_t needed = rows * slice_bytes(t, need.dim);
        return {CommKind::AllToAll, (k - 1) * (needed / k)};
    }
    // Same dimension: only the rows outside each device's own block move.
    const int64_t block = extent / k;
    int64_t rows = 0;
    for (int p = 0; p < k; p++) {
        auto [lo, hi] = needed_rows(need, var_extent, extent, k, p);
        if (hi < lo) continue;
        int64_t own_lo = p * block, own_hi = (p + 1) * block - 1;
        int64_t inside = std::max<int64_t>(0, std::min(hi, own_hi) - std::max(lo, own_lo) + 1);
        rows += (hi - lo + 1) - inside;
    }
    return {CommKind::Halo, rows * slice_bytes(t, need.dim)};
}

Conversion output_conversion(const OutputForm &form, const Layout &want, const TensorType &t, int k) {
    switch (form.form) {
    case OutForm::Replicated: return {CommKind::AllGather, 0};
    case OutForm::Partial:
        return want.is_split() ? Conversion{CommKind::ReduceScatter, reduce_scatter_bytes(k, t.bytes())}
                               : Conversion{CommKind::AllReduce, all_reduce_bytes(k, t.bytes())};
    case OutForm::Split:
        if (!want.is_split()) return {CommKind::AllGather, all_gather_bytes(k, t.bytes())};
        if (want.dim == form.dim) return {CommKind::AllToAll, 0};
        return {CommKind::AllToAll, all_to_all_bytes(k, t.bytes())};
    }
    TESSERA_INTERNAL_ASSERT(false, "bad output form");
}

TensorType input_after(const TensorType &t, const InputNeed &need, int64_t var_extent, int k) {
    if (!need.split) return t;
    TensorType r = t;
    int64_t longest = 0;
    for (int p = 0; p < k; p++) {
        auto [lo, hi] = needed_rows(need, var_extent, t.shape[need.dim], k, p);
        longest = std::max(longest, hi - lo + 1);
    }
    r.shape[need.dim] = longest;
    return r;
}

TensorType output_after(const TensorType &t, const OutputForm &form, int k) {
    if (form.form != OutForm::Split) return t;
    TensorType r = t;
    r.shape[form.dim] /= k;
    return r;
}

}  // namespace tessera::part
