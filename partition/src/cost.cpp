#include "cost.h"

#include <algorithm>

#include "tessera/error.h"
#include "tessera/graph/precision.h"

namespace tessera::part {

namespace {

int64_t slice_bytes(const TensorType &t, int dim) {
    int64_t e = t.shape[dim];
    return e == 0 ? 0 : t.bytes() / e;
}

// Rows of `need` that part p of the variable's k parts reads.
std::pair<int64_t, int64_t> needed_rows(const InputNeed &need, int64_t var_extent, int64_t extent, int k, int p) {
    const int64_t lo = block_lo(var_extent, k, p);
    return rows_read(need, lo, lo + block_size(var_extent, k, p), extent);
}

const char *reduce_word(const std::string &r) {
    return r == "sum" ? "partial sum" : r == "max" ? "partial max" : "partial min";
}

// Whether the operator's kernel, run on the blocks a strategy gives it,
// computes that block of the result (up to the scaling lowering adds for the
// loss's batch mean: Lowerer::mean_rescale). Kernels that index with a
// global coordinate do not: dropout's mask is drawn per element index; embedding_grad scatters
// into rows by token id.
bool runs_on_blocks(const OpCall &call, const NodeOption &o) {
    switch (call.kind) {
    case OpKind::Dropout: return false;
    case OpKind::EmbeddingGrad: return !(o.outputs[0].form == OutForm::Split && o.outputs[0].dim == 0);
    default: return true;
    }
}

// Every split input is read without a halo or an offset: part p of the
// variable reads rows [scale lo, scale hi) of the input, divided by `div`
// (a reshape's merged rows). (Lowering moves those rows where they are not
// the input's own block, as with an uneven split.)
bool aligned(const NodeOption &o) {
    for (const InputNeed &n : o.inputs)
        if (n.split && (n.lo_off != 0 || n.hi_off != n.scale - 1)) return false;
    return true;
}

// The operator, given part p's blocks, makes exactly the blocks of its outputs
// the strategy says (a reshape whose input stays whole does not, for one).
bool part_shapes_agree(const OpCall &call, const NodeOption &o, const std::vector<TensorType> &in,
                       const std::vector<TensorType> &out, int k, int p) {
    std::vector<TensorType> local_in = in, local_out = out;
    for (size_t i = 0; i < in.size(); i++) {
        const InputNeed &n = o.inputs[i];
        if (!n.split) continue;
        auto [lo, hi] = needed_rows(n, o.var_extent, in[i].shape[n.dim], k, p);
        local_in[i].shape[n.dim] = std::max<int64_t>(hi - lo + 1, 0);
    }
    for (size_t j = 0; j < out.size(); j++)
        if (o.outputs[j].form == OutForm::Split)
            local_out[j].shape[o.outputs[j].dim] = block_size(out[j].shape[o.outputs[j].dim], k, p);
    try {
        return infer_types(local_call(call, local_out[0].shape), local_in) == local_out;
    } catch (const Error &) {
        return false;
    }
}

// Both block sizes of an uneven split (the first part is a longest, the last a shortest).
bool block_shapes_agree(const OpCall &call, const NodeOption &o, const std::vector<TensorType> &in,
                        const std::vector<TensorType> &out, int k) {
    return part_shapes_agree(call, o, in, out, k, 0) && part_shapes_agree(call, o, in, out, k, k - 1);
}

}  // namespace

std::pair<int64_t, int64_t> rows_wanted(const InputNeed &need, int64_t lo, int64_t hi) {
    auto floor_div = [](int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); };
    return {floor_div(need.scale * lo + need.lo_off, need.div),
            floor_div(need.scale * (hi - 1) + need.hi_off, need.div) + 1};
}

std::pair<int64_t, int64_t> rows_read(const InputNeed &need, int64_t lo, int64_t hi, int64_t extent) {
    auto [want_lo, want_hi] = rows_wanted(need, lo, hi);
    return {std::max<int64_t>(want_lo, 0), std::min<int64_t>(want_hi, extent) - 1};
}

InputNeed evaluate(const tessera::InputNeed &n, const SymEnv &env) {
    if (n.kind != NeedKind::Split) return {};
    const int64_t div = n.divisor.eval(env);
    TESSERA_INTERNAL_ASSERT(div >= 1, "a strategy's divisor ", n.divisor.str(), " is ", div);
    return {true, n.dim, n.scale.eval(env), n.lo_offset.eval(env), n.hi_offset.eval(env), false, div};
}

// The extent the split variable has in this strategy: the output dimension it
// splits, else the input dimension it indexes one-to-one.
int64_t variable_extent(const Strategy &s, const std::vector<InputNeed> &needs, const std::vector<TensorType> &in,
                        const std::vector<TensorType> &out) {
    for (size_t j = 0; j < s.outputs.size(); j++)
        if (s.outputs[j].kind == OutKind::Split) return out[j].shape[s.outputs[j].dim];
    for (size_t i = 0; i < needs.size(); i++)
        if (needs[i].split && needs[i].scale == 1 && needs[i].div == 1 && needs[i].lo_off == 0 &&
            needs[i].hi_off == 0)
            return in[i].shape[needs[i].dim];
    for (size_t i = 0; i < needs.size(); i++)
        if (needs[i].split) return in[i].shape[needs[i].dim];
    return 0;
}

int halo_input(const OpCall &call) {
    switch (call.kind) {
    case OpKind::Conv2d:
    case OpKind::AvgPool2d:
    case OpKind::MaxPool2d: return 0;      // x
    case OpKind::Conv2dGradWeight: return 1;  // (dy, x)
    default: return -1;
    }
}

bool halo_lowerable(const OpCall &call, const std::vector<InputNeed> &needs) {
    bool any = false;
    for (size_t i = 0; i < needs.size(); i++) {
        const InputNeed &n = needs[i];
        if (!n.split || (n.lo_off == 0 && n.hi_off == n.scale - 1)) continue;
        if (static_cast<int>(i) != halo_input(call) || (n.dim != 2 && n.dim != 3)) return false;
        any = true;
    }
    return any;
}

bool whole_then_block(const NodeOption &o) {
    bool split_out = false;
    for (const InputNeed &n : o.inputs)
        if (n.split) return false;
    for (const OutputForm &f : o.outputs) {
        if (f.form == OutForm::Partial) return false;
        split_out = split_out || f.form == OutForm::Split;
    }
    return split_out;
}

bool offset_lowerable(const OpCall &call, const std::vector<InputNeed> &needs) {
    if (call.kind != OpKind::Slice && call.kind != OpKind::SliceGrad) return false;
    return needs.size() == 1 && needs[0].split && needs[0].scale == 1 && needs[0].lo_off == needs[0].hi_off;
}

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
            for (const tessera::InputNeed &n : s.inputs) o.inputs.push_back(evaluate(n, env));
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
            // Uneven splits are fine (blocks of ceil and floor size); every part must get one.
            if (o.var_extent < k) continue;
            // Partial max/min outputs would need a max-reduce collective whose
            // bytes match a sum's; only sums are lowered for now.
            if (partial && reduce != "sum") continue;
            bool ok = true;
            for (size_t j = 0; j < o.outputs.size(); j++)
                if (o.outputs[j].form == OutForm::Split && out[j].shape[o.outputs[j].dim] < k) ok = false;
            if (!ok) continue;
            // Halos, offsets and whole-then-block have lowerings of their own
            // (lower.cpp), whose blocks agree by construction.
            const bool own_lowering = halo_lowerable(call, o.inputs) || offset_lowerable(call, o.inputs) ||
                                      whole_then_block(o);
            if (executable && ((!staged && !s.reductions.empty()) || !(aligned(o) || own_lowering) ||
                               !runs_on_blocks(call, o) || !(own_lowering || block_shapes_agree(call, o, in, out, k))))
                continue;
            for (const StageReduction &r : s.reductions) {
                int64_t elements = r.elements.eval(env);
                o.stage_bytes += all_reduce_bytes(k, elements * r.element_bytes);
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
    if (call.kind == OpKind::Add && in.size() == 2 && in[0] == out[0] && in[1] == out[0]) {
        NodeOption o;
        o.label = kAddPartialSumsLabel;
        o.strategy = kAddPartialSums;
        o.inputs.assign(2, InputNeed{.partial = true});
        o.outputs.assign(1, OutputForm{OutForm::Partial, -1});
        options.push_back(std::move(o));
    }
    return options;
}

namespace {

// Bytes a k-way all-to-all receives in all when part p holds block p of
// dimension `held` (all of the others) and needs rows[p] rows of dimension
// `need`, in full along `held`: all of them but the part it holds itself.
int64_t all_to_all_received(const TensorType &t, int held, int need, const std::vector<int64_t> &rows, int k) {
    const int64_t extent_held = t.shape[held], extent_need = t.shape[need];
    if (extent_held == 0 || extent_need == 0) return 0;
    const int64_t inner = t.bytes() / (extent_held * extent_need);  // bytes per (held, need) element pair
    int64_t received = 0;
    for (int p = 0; p < k; p++) received += rows[p] * (extent_held - block_size(extent_held, k, p)) * inner;
    return received;
}

}  // namespace

namespace {

// Reading partial sums as `need`: a reduce-scatter when part p reads exactly
// block p of the dimension (lowering's add_reduction scatters then), else an
// all-reduce.
Conversion reduce_for(const InputNeed &need, const TensorType &t, int64_t var_extent, int k) {
    if (need.partial) return {CommKind::AllReduce, 0};
    if (!need.split) return {CommKind::AllReduce, all_reduce_bytes(k, t.bytes())};
    const int64_t extent = t.shape[need.dim];
    for (int p = 0; p < k; p++) {
        auto [lo, hi] = needed_rows(need, var_extent, extent, k, p);
        if (lo != block_lo(extent, k, p) || hi - lo + 1 != block_size(extent, k, p))
            return {CommKind::AllReduce, all_reduce_bytes(k, t.bytes())};
    }
    return {CommKind::ReduceScatter, reduce_scatter_bytes(k, t.bytes())};
}

}  // namespace

Conversion input_conversion(const Layout &held, const InputNeed &need, const TensorType &t, int64_t var_extent,
                            int k) {
    if (held.is_partial()) return reduce_for(need, t, var_extent, k);
    if (need.partial) return {CommKind::AllReduce, kInfeasibleBytes};
    if (!held.is_split()) return {CommKind::AllGather, 0};  // every device has it all: slice locally
    if (!need.split) return {CommKind::AllGather, all_gather_bytes(k, t.bytes())};
    const int64_t extent = t.shape[need.dim];
    std::vector<int64_t> rows(k);
    for (int p = 0; p < k; p++) {
        auto [lo, hi] = needed_rows(need, var_extent, extent, k, p);
        rows[p] = std::max<int64_t>(hi - lo + 1, 0);
    }
    if (held.dim != need.dim) return {CommKind::AllToAll, all_to_all_received(t, held.dim, need.dim, rows, k)};
    // Same dimension: only the rows outside each device's own block move.
    int64_t outside = 0;
    for (int p = 0; p < k; p++) {
        auto [lo, hi] = needed_rows(need, var_extent, extent, k, p);
        if (hi < lo) continue;
        const int64_t own_lo = block_lo(extent, k, p), own_hi = own_lo + block_size(extent, k, p) - 1;
        outside += rows[p] - std::max<int64_t>(0, std::min(hi, own_hi) - std::max(lo, own_lo) + 1);
    }
    return {CommKind::Halo, outside * slice_bytes(t, need.dim)};
}

TensorType partial_sum_type(const Graph &g, TensorId t, const TensorType &local, bool staged) {
    const OpKind kind = g.node(g.tensor(t).producer).call.kind;
    if (staged || !is_half(local.dtype) || !has_storage_forms(kind) || gradient_reduced_low(g, t)) return local;
    return TensorType{DType::F32, local.shape};
}

Conversion output_conversion(const OutputForm &form, const Layout &want, const TensorType &t, int k) {
    // Whole values become partial sums where one member keeps them and the
    // others zero theirs (lowering scales them by 0).
    if (want.is_partial())
        return form.form == OutForm::Split ? Conversion{CommKind::AllReduce, kInfeasibleBytes}
                                           : Conversion{CommKind::AllReduce, 0};
    switch (form.form) {
    case OutForm::Replicated: return {CommKind::AllGather, 0};
    case OutForm::Partial:
        return want.is_split() ? Conversion{CommKind::ReduceScatter, reduce_scatter_bytes(k, t.bytes())}
                               : Conversion{CommKind::AllReduce, all_reduce_bytes(k, t.bytes())};
    case OutForm::Split: {
        if (!want.is_split()) return {CommKind::AllGather, all_gather_bytes(k, t.bytes())};
        if (want.dim == form.dim) return {CommKind::AllToAll, 0};
        std::vector<int64_t> rows(k);
        for (int p = 0; p < k; p++) rows[p] = block_size(t.shape[want.dim], k, p);
        return {CommKind::AllToAll, all_to_all_received(t, form.dim, want.dim, rows, k)};
    }
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
    r.shape[form.dim] = block_size(t.shape[form.dim], k, 0);  // the longest block
    return r;
}

}  // namespace tessera::part
