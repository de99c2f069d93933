#include "tessera/partition/lower.h"
#include "tessera/partition/partition.h"

#include <algorithm>
#include <limits>
#include <map>

#include "lowerer.h"
#include "tessera/lang/staged.h"

namespace tessera {

using namespace lowering;

namespace lowering {


std::vector<const Strategy *> Lowerer::choices(NodeId n) const {
    const Node &node = g_.node(n);
    std::vector<TensorType> in;
    for (TensorId t : node.inputs) in.push_back(g_.tensor(t).type);
    const OpStrategies *table = strategies_for(node.call, in, plan_.local_batch_norm);
    std::vector<const Strategy *> out;
    const OpPlan &op = plan_.ops[n];
    TESSERA_CHECK(op.strategy.size() == cuts_.size(), "lowering: operator '", op.node, "' has ",
                  op.strategy.size(), " strategies for ", cuts_.size(), " cuts");
    const SymEnv env = symbol_env(node.call, in);
    for (size_t l = 0; l < cuts_.size(); l++) {
        const std::string &label = op.strategy[l];
        if (label == "replicate" || label == part::kAddPartialSumsLabel) {
            out.push_back(nullptr);
            continue;
        }
        std::string var = var_of_label(label);
        const Strategy *found = nullptr;
        if (table)
            for (const Strategy &s : table->strategies)
                if (s.var == var) found = &s;
        TESSERA_CHECK(found, "lowering: ", node.call.who(), " has no strategy '", label, "'");
        std::vector<part::InputNeed> needs;
        for (const tessera::InputNeed &need : found->inputs) needs.push_back(part::evaluate(need, env));
        for (size_t i = 0; i < needs.size(); i++) {
            const part::InputNeed &need = needs[i];
            if (!need.split || (need.lo_off == 0 && need.hi_off == need.scale - 1)) continue;
            TESSERA_CHECK(part::halo_lowerable(node.call, needs) || part::offset_lowerable(node.call, needs),
                          "lowering: ", node.call.who(), " at level ", l + 1, " uses '", label, "', whose input ", i,
                          " needs a halo or an offset that lowering cannot run (only convolutions, their weight "
                          "gradient, the poolings and slices can); plan with "
                          "PartitionOptions::executable (tessera-plan --executable)");
        }
        TESSERA_CHECK(node.call.kind != OpKind::Dropout, "lowering: ", node.call.who(), " at level ", l + 1,
                      " uses '", label, "', but dropout draws its mask per element index of the whole tensor, so a "
                      "block would draw another mask; plan with PartitionOptions::executable "
                      "(tessera-plan --executable)");
        for (const OutputResult &r : found->outputs)
            TESSERA_CHECK(r.kind != OutKind::Partial || r.reduce == "sum", "lowering: ", node.call.who(),
                          " makes partial ", r.reduce, " values, which lowering cannot combine");
        out.push_back(found);
    }
    return out;
}

// The accessors below return the shared part's values, or compute them into
// a scratch member that the next call of the same accessor overwrites: a
// caller keeps a reference only until it asks again.
const std::vector<const Strategy *> &Lowerer::choices_of(NodeId n) {
    if (shared_) return shared_->choices[n];
    choice_scratch_ = choices(n);
    return choice_scratch_;
}

const InputBlocks &Lowerer::blocks_of(NodeId n, const std::vector<const Strategy *> &choice) {
    if (shared_) return shared_->blocks[n];
    blocks_scratch_ = input_blocks(n, choice);
    return blocks_scratch_;
}

const std::vector<int64_t> &Lowerer::stage_counts_of(NodeId n, const std::vector<std::vector<Box>> &in_boxes) {
    if (shared_) return shared_->stage_counts[n];
    counts_scratch_ = stage_counts(n, in_boxes);
    return counts_scratch_;
}

const std::vector<Box> &Lowerer::held_all(TensorId t) {
    if (shared_) return shared_->held[t];
    held_scratch_ = held_boxes(t);
    return held_scratch_;
}

std::vector<int64_t> Lowerer::stage_counts(NodeId n, const std::vector<std::vector<Box>> &in_boxes) const {
    const Node &node = g_.node(n);
    std::vector<TensorType> whole_in;
    for (TensorId t : node.inputs) whole_in.push_back(g_.tensor(t).type);
    std::vector<int64_t> counts(n_);
    for (int r = 0; r < n_; r++) {
        std::vector<TensorType> local = whole_in;
        for (size_t i = 0; i < local.size(); i++) local[i].shape = in_boxes[i][r].extents();
        counts[r] = stage_type(node.call, local).elements();
    }
    return counts;
}

std::vector<Box> Lowerer::held_boxes(TensorId t) const {
    std::vector<Box> boxes(n_);
    for (int r = 0; r < n_; r++) boxes[r] = held(t, r);
    return boxes;
}

// Per input of node n, per rank: the block the rank's strategies read. Each
// level whose strategy splits a variable cuts that variable's range (nested
// cuts of one variable cut its block again); a split input reads the rows its
// variable's block maps to (rows_read: scaled, clamped to the input). Where
// the variable is an input's own dimension one-to-one this is the input's own
// block; where it is scaled (a strided window) on an uneven split it is not,
// and step 1 of lower_node moves the difference.
InputBlocks Lowerer::input_blocks(NodeId n, const std::vector<const Strategy *> &choice) const {
    const Node &node = g_.node(n);
    std::vector<TensorType> in, out;
    for (TensorId t : node.inputs) in.push_back(g_.tensor(t).type);
    for (TensorId t : node.outputs) out.push_back(g_.tensor(t).type);
    const SymEnv env = symbol_env(node.call, in);
    std::vector<std::vector<part::InputNeed>> needs(cuts_.size());
    std::vector<int64_t> extent(cuts_.size(), 0);
    for (size_t l = 0; l < cuts_.size(); l++) {
        if (!choice[l]) continue;
        for (const tessera::InputNeed &need : choice[l]->inputs) needs[l].push_back(part::evaluate(need, env));
        extent[l] = part::variable_extent(*choice[l], needs[l], in, out);
    }
    InputBlocks blocks{std::vector<std::vector<Box>>(in.size(), std::vector<Box>(n_)), {}};
    blocks.want = blocks.block;
    for (int r = 0; r < n_; r++) {
        std::map<std::string, std::pair<int64_t, int64_t>> range;  // per variable: [lo, hi)
        for (size_t i = 0; i < in.size(); i++) blocks.block[i][r] = blocks.want[i][r] = Box::whole(in[i].shape);
        for (size_t l = 0; l < cuts_.size(); l++) {
            if (!choice[l]) continue;
            auto &var = range.try_emplace(choice[l]->var, 0, extent[l]).first->second;
            const int64_t len = var.second - var.first;
            const int k = cuts_[l], c = coords_[r][l];
            TESSERA_CHECK(len >= k, "lowering: ", node.call.who(), " splits '", choice[l]->var, "' of extent ", len,
                          " into ", k, " parts at level ", l + 1);
            var.first += block_lo(len, k, c);
            var.second = var.first + block_size(len, k, c);
            for (size_t i = 0; i < in.size(); i++) {
                const part::InputNeed &need = needs[l][i];
                if (!need.split) continue;
                const int d = need.dim;
                // The rows before clamping (a later level's variable block
                // lies inside an earlier one's, so its rows replace them).
                const auto [lo, hi] = part::rows_wanted(need, var.first, var.second);
                blocks.want[i][r].lo[d] = lo;
                blocks.want[i][r].hi[d] = hi;
                Box &b = blocks.block[i][r];
                b.lo[d] = std::max({b.lo[d], lo, int64_t{0}});
                b.hi[d] = std::max(b.lo[d], std::min(b.hi[d], hi));
            }
        }
    }
    return blocks;
}

// Per level: whether node n adds partial sums as they are held (cost.h's kAddPartialSums).
std::vector<bool> Lowerer::adds_partial_sums(NodeId n) const {
    std::vector<bool> out;
    for (const std::string &label : plan_.ops[n].strategy) out.push_back(label == part::kAddPartialSumsLabel);
    return out;
}

// What turns the loss's mean over this rank's block of the batch into its
// share of the mean over the whole batch (1 when the batch is not split):
// softmax_xent and its gradient divide by the local batch. (Global average
// pooling over split space is staged, and its kernels divide by the whole
// extents themselves.) `in`: this rank's block of the first input. The loss
// (f32) is rescaled after softmax_xent; the gradient's seed before
// softmax_xent_grad, so that a 16-bit gradient block is made at its true
// magnitude (rescaled after, it would hold N times the values, and fp16 would
// overflow N times sooner).
double Lowerer::mean_rescale(const Node &node, const Box &in) const {
    if (node.call.kind != OpKind::SoftmaxXent && node.call.kind != OpKind::SoftmaxXentGrad) return 1.0;
    return static_cast<double>(in.hi[0] - in.lo[0]) / static_cast<double>(g_.tensor(node.inputs[0]).type.shape[0]);
}

TensorId Lowerer::rescaled_seed(TensorId seed, double alpha, const Node &node) {
    OpCall scale{OpKind::Scale, node.call.name + "#whole_batch_seed", {}};
    scale.attrs.set("alpha", alpha);
    TensorId out = dg_.graph.add_node(scale, {seed}, TensorRole::Gradient)[0];
    dg_.graph.set_node_flags(dg_.graph.num_nodes() - 1, node.backward, node.optimizer);
    dg_.source.push_back(kNoTensor);  // holds no training-graph tensor
    dg_.box.push_back(Box::whole(dg_.graph.tensor(out).type.shape));
    return out;
}

// Adds `call` to this rank's graph. Its outputs hold the blocks `boxes` of
// `node`'s outputs; with no boxes they are stages of a staged operator, which
// hold no training-graph tensor.
std::vector<TensorId> Lowerer::add_op(const OpCall &call, const std::vector<TensorId> &in, const Node &node,
                                      const std::vector<Box> &boxes) {
    TensorRole role = boxes.empty() || node.outputs.empty() ? TensorRole::Activation : g_.tensor(node.outputs[0]).role;
    std::vector<TensorId> outs = dg_.graph.add_node(call, in, role);
    dg_.graph.set_node_flags(dg_.graph.num_nodes() - 1, node.backward, node.optimizer);
    for (size_t j = 0; j < outs.size(); j++) {
        const Shape &made = dg_.graph.tensor(outs[j]).type.shape;
        if (boxes.empty()) {
            dg_.source.push_back(kNoTensor);
            dg_.box.push_back(Box::whole(made));
            continue;
        }
        TESSERA_CHECK(made == boxes[j].extents(), "lowering: ", node.call.who(), " on rank ", rank_, " makes ",
                      shape_str(made), " from its blocks, but the plan's block of output ", j, " is ",
                      shape_str(boxes[j].extents()));
        dg_.source.push_back(node.outputs[j]);
        dg_.box.push_back(boxes[j]);
    }
    return outs;
}

// Step 2 of lower_node for an operator without stages: its kernel on this
// rank's blocks. A window that reads a halo (part::halo_lowerable) runs with
// its own padding off along each split dimension: the halo holds the
// neighbours' rows, and where the rows it wants run past the tensor's true
// border they are padding added here (zeros: slice_grad places the block
// inside a zero tensor; for max pooling, the lowest float), so the padding
// is applied at the true borders only.
std::vector<TensorId> Lowerer::add_block_op(const Node &node, const std::vector<const Strategy *> &choice,
                                            const std::vector<int64_t> &wide, std::vector<TensorId> local_in,
                                            const InputBlocks &blocks, const std::vector<Box> &out_box) {
    const std::vector<Box> made = made_blocks(node, choice, out_box);
    OpCall call = part::local_call(node.call, made[0].extents());
    if (!wide.empty()) call.attrs.set(kF32OutputsAttr, wide);
    if (node.call.kind == OpKind::Slice || node.call.kind == OpKind::SliceGrad)
        return add_local_slice(node, call, local_in[0], blocks.block[0][rank_], out_box[0]);
    const int h = part::halo_input(node.call);
    for (int d = 2; h >= 0 && d <= 3; d++) {
        const Box &block = blocks.block[h][rank_], &want = blocks.want[h][rank_];
        if (want.lo[d] == 0 && want.hi[d] == g_.tensor(node.inputs[h]).type.shape[d]) continue;  // not split on d
        call.attrs.set(d == 2 ? "pad_h" : "pad_w", int64_t{0});
        const int64_t before = block.lo[d] - want.lo[d], after = want.hi[d] - block.hi[d];
        if (before == 0 && after == 0) continue;
        const std::string name = node.call.name + "#pad_" + (d == 2 ? "h" : "w");
        if (node.call.kind == OpKind::MaxPool2d) {
            local_in[h] = add_lowest_rows(local_in[h], block, d, before, after, node, name);
            continue;
        }
        OpCall pad{OpKind::SliceGrad, name, {}};
        pad.attrs.set("axis", int64_t{d});
        pad.attrs.set("start", before);
        pad.attrs.set("extent", want.hi[d] - want.lo[d]);
        local_in[h] = add_op(pad, {local_in[h]}, node, {})[0];
    }
    return keep_blocks(node, add_op(call, local_in, node, made), made, out_box);
}

// The blocks the operator makes on this rank: the planned ones, except along
// a dimension that a level splits while reading every input whole
// (part::whole_then_block: an input gradient along the input's height), where
// the kernel makes the whole extent and keep_blocks slices the block out.
std::vector<Box> Lowerer::made_blocks(const Node &node, const std::vector<const Strategy *> &choice,
                                      const std::vector<Box> &out_box) const {
    std::vector<Box> made = out_box;
    for (const Strategy *s : choice) {
        if (!s || std::any_of(s->inputs.begin(), s->inputs.end(),
                              [](const tessera::InputNeed &n) { return n.kind == NeedKind::Split; }))
            continue;
        for (size_t j = 0; j < s->outputs.size(); j++) {
            if (s->outputs[j].kind != OutKind::Split) continue;
            const int d = s->outputs[j].dim;
            made[j].lo[d] = 0;
            made[j].hi[d] = g_.tensor(node.outputs[j]).type.shape[d];
        }
    }
    return made;
}

// Each output `outs[j]`, which holds the block made[j], cut down to this
// rank's planned block out_box[j], one dimension at a time.
std::vector<TensorId> Lowerer::keep_blocks(const Node &node, std::vector<TensorId> outs, const std::vector<Box> &made,
                                           const std::vector<Box> &out_box) {
    for (size_t j = 0; j < outs.size(); j++) {
        Box have = made[j];
        for (int d = 0; d < have.rank(); d++) {
            if (have.lo[d] == out_box[j].lo[d] && have.hi[d] == out_box[j].hi[d]) continue;
            OpCall slice{OpKind::Slice, node.call.name + "#block" + std::to_string(j) + "_" + std::to_string(d), {}};
            slice.attrs.set("axis", int64_t{d});
            slice.attrs.set("start", out_box[j].lo[d] - have.lo[d]);
            slice.attrs.set("end", out_box[j].hi[d] - have.lo[d]);
            have.lo[d] = out_box[j].lo[d];
            have.hi[d] = out_box[j].hi[d];
            outs[j] = add_op(slice, {outs[j]}, node, {have})[0];
            dg_.source.back() = node.outputs[j];  // add_op names output 0's tensor
        }
    }
    return outs;
}

// A slice (or its gradient) on this rank's blocks, its offset made local: the
// block `in_block` of the input holds the rows the output block `out` takes
// (a slice) or the rows that land in it (a gradient; none when the block lies
// outside the slice, and the output is then zeros).
std::vector<TensorId> Lowerer::add_local_slice(const Node &node, OpCall call, TensorId in, const Box &in_block,
                                               const Box &out) {
    const int64_t rank = static_cast<int64_t>(out.rank());
    int64_t axis = call.attrs.get_int(node.call.who(), "axis");
    if (axis < 0) axis += rank;
    const int a = static_cast<int>(axis);
    const TensorType &whole_out = g_.tensor(node.outputs[0]).type;
    if (out.lo[a] == 0 && out.hi[a] == whole_out.shape[a]) return add_op(call, {in}, node, {out});  // not split on a
    if (node.call.kind == OpKind::Slice) {
        call.attrs.set("start", int64_t{0});
        call.attrs.set("end", in_block.hi[a] - in_block.lo[a]);
    } else if (in_block.empty()) {
        TensorId zeros = dg_.graph.add_constant(node.call.name + "#zeros", TensorType{whole_out.dtype, out.extents()},
                                                Init::zeros());
        dg_.source.push_back(node.outputs[0]);
        dg_.box.push_back(out);
        return {zeros};
    } else {
        const int64_t start = call.attrs.get_int(node.call.who(), "start");
        call.attrs.set("start", in_block.lo[a] + start - out.lo[a]);
        call.attrs.set("extent", out.hi[a] - out.lo[a]);
    }
    return add_op(call, {in}, node, {out});
}

// Max pooling's padding never wins a window: rows of the lowest float before
// and after `in` (this rank's block `block`) along `d`, concatenated.
TensorId Lowerer::add_lowest_rows(TensorId in, const Box &block, int d, int64_t before, int64_t after,
                                  const Node &node, const std::string &name) {
    std::vector<TensorId> parts;
    auto rows = [&](int64_t count, const char *side) {
        Shape s = block.extents();
        s[d] = count;
        parts.push_back(dg_.graph.add_constant(name + side, TensorType{DType::F32, s},
                                               Init::constant(std::numeric_limits<float>::lowest())));
        dg_.source.push_back(kNoTensor);
        dg_.box.push_back(Box::whole(s));
    };
    if (before > 0) rows(before, "_before");
    parts.push_back(in);
    if (after > 0) rows(after, "_after");
    OpCall cat{OpKind::Concat, name, {}};
    cat.attrs.set("axis", int64_t{d});
    return add_op(cat, parts, node, {})[0];
}

// One stage of a staged operator, combined over the ranks that differ on
// `levels` (those whose strategies split the stage's reduction): a ring
// all-reduce, a sum or a max. `counts[r]`: the stage's elements on rank r.
TensorId Lowerer::add_stage_reduction(TensorId stage, DType dtype, const std::vector<bool> &levels,
                                      const std::string &reduce, const std::vector<int64_t> &counts,
                                      const std::string &why) {
    int64_t mine = 0;
    // Every rank's bytes for the count-only pass; a build needs its own.
    for (int r = build_ ? rank_ : 0; r < (build_ ? rank_ + 1 : n_); r++) {
        const std::vector<int64_t> &grp = groups_.members(r, levels);
        const int i = groups_.position(r, levels);
        int64_t sent = all_reduce_sent(counts[r], static_cast<int>(grp.size()), i) *
                       static_cast<int64_t>(dtype_size(dtype));
        bytes_[r] += sent;
        if (r == rank_) mine = sent;
    }
    if (!build_) return kNoTensor;
    CommAttrs a;
    a.kind = CommNodeKind::AllReduce;
    const std::vector<int64_t> &grp = groups_.members(rank_, levels);
    a.ranks.assign(grp.begin(), grp.end());
    a.bytes = mine;
    a.reduce = reduce;
    const Box whole = Box::whole(dg_.graph.tensor(stage).type.shape);
    return add_comm(why, a, stage, dtype, whole, kNoTensor, TensorRole::Activation);
}

// An operator whose strategy splits a reduction inside it, run as its staged
// kernels (tessera/lang/staged.h) with each crossing stage combined between them.
std::vector<TensorId> Lowerer::add_staged(NodeId n, const std::vector<const Strategy *> &choice,
                                          const std::vector<TensorId> &local_in,
                                          const std::vector<std::vector<Box>> &in_boxes,
                                          const std::vector<Box> &out_box) {
    const Node &node = g_.node(n);
    std::vector<TensorType> whole_in;
    for (TensorId t : node.inputs) whole_in.push_back(g_.tensor(t).type);
    const std::vector<std::string> stages = op_stages(node.call, whole_in);
    const std::vector<int64_t> &counts = stage_counts_of(n, in_boxes);
    const DType stage_dtype = stage_type(node.call, whole_in).dtype;
    std::vector<Shape> whole, origin;
    for (size_t i = 0; i < node.inputs.size(); i++) {
        whole.push_back(whole_in[i].shape);
        origin.push_back(in_boxes[i][std::max(rank_, 0)].lo);
    }
    const OpCall base = part::local_call(node.call, out_box[0].extents());
    std::vector<TensorId> have = local_in;
    for (size_t p = 0; p < stages.size(); p++) {
        std::vector<bool> levels(cuts_.size(), false);
        std::string reduce;
        for (size_t l = 0; l < cuts_.size(); l++)
            for (const StageReduction &r : choice[l] ? choice[l]->reductions : std::vector<StageReduction>{})
                if (r.stage == stages[p]) {
                    levels[l] = true;
                    reduce = r.reduce;
                }
        TensorId t = kNoTensor;
        if (build_) {
            OpCall step = staged_call(base, static_cast<int>(p), whole, origin);
            step.name += "#" + stages[p];
            t = add_op(step, have, node, {})[0];
        }
        if (!reduce.empty())
            t = add_stage_reduction(t, stage_dtype, levels, reduce, counts, node.call.name + "." + stages[p]);
        have.push_back(t);
    }
    if (!build_) return std::vector<TensorId>(node.outputs.size(), kNoTensor);
    return add_op(staged_call(base, static_cast<int>(stages.size()), whole, origin), have, node, out_box);
}

void Lowerer::lower_node(NodeId n) {
    const Node &node = g_.node(n);
    const std::vector<const Strategy *> &choice = choices_of(n);
    const size_t levels = cuts_.size();
    const std::string who = node.call.who();

    // What the strategy makes, per level.
    const std::vector<bool> adds_partials = adds_partial_sums(n);
    std::vector<State> out_state(node.outputs.size(), State(levels));
    for (size_t l = 0; l < levels; l++) {
        const Strategy *s = choice[l];
        if (adds_partials[l]) out_state[0][l] = Form{Form::Partial, -1};
        if (!s) continue;
        for (size_t j = 0; j < node.outputs.size(); j++) {
            const OutputResult &r = s->outputs[j];
            if (r.kind == OutKind::Split) out_state[j][l] = Form{Form::Split, r.dim};
            else if (r.kind == OutKind::Partial) out_state[j][l] = Form{Form::Partial, -1};
        }
    }

    // 1. Inputs into the blocks the strategy reads.
    std::vector<TensorId> local_in;
    std::vector<Box> in_box;
    const InputBlocks &blocks = blocks_of(n, choice);
    const std::vector<std::vector<Box>> &in_boxes = blocks.block;  // [input][rank]
    for (size_t i = 0; i < node.inputs.size(); i++) {
        TensorId t = node.inputs[i];
        const TensorInfo &info = g_.tensor(t);
        const std::vector<Box> &target = in_boxes[i];
        TensorId src = build_ ? dg_.local[t] : kNoTensor;
        const TensorRole role = info.role == TensorRole::Gradient ? TensorRole::Gradient : TensorRole::Activation;
        const int held_is_target = shared_ ? shared_->reads_held[n][i] : -1;
        TensorId got = is_fed(info) ? add_fed_block(t, target[std::max(rank_, 0)])
                                    : read_input(src, t, adds_partials, target, role, info.name + ">" + node.call.name,
                                                 held_is_target);
        local_in.push_back(got);
        in_box.push_back(target[std::max(rank_, 0)]);
    }

    // 2. The operator on its blocks.
    std::vector<TensorId> raw(node.outputs.size(), kNoTensor);
    std::vector<Box> out_box(node.outputs.size());
    for (size_t j = 0; j < node.outputs.size(); j++)
        out_box[j] = box_in(g_.tensor(node.outputs[j]).type.shape, out_state[j], cuts_, coords_[std::max(rank_, 0)],
                            who + " output " + std::to_string(j));
    bool staged = false;
    for (const Strategy *s : choice) staged = staged || (s && !s->reductions.empty());
    const std::vector<int64_t> wide = summed_wide(node, out_state, staged);
    const double alpha = build_ ? mean_rescale(node, in_box[0]) : 1.0;
    const bool seed_rescaled = alpha != 1.0 && node.call.kind == OpKind::SoftmaxXentGrad;
    if (seed_rescaled) local_in[2] = rescaled_seed(local_in[2], alpha, node);
    if (staged) raw = add_staged(n, choice, local_in, in_boxes, out_box);
    if (build_) {
        if (!staged) raw = add_block_op(node, choice, wide, local_in, blocks, out_box);
        if (alpha != 1.0 && !seed_rescaled)
            raw[0] = add_scale(raw[0], alpha, node, "#whole_batch", node.outputs[0], out_box[0]);
    }

    // 3. Outputs into the tensors' layouts.
    for (size_t j = 0; j < node.outputs.size(); j++) {
        TensorId t = node.outputs[j];
        const TensorInfo &info = g_.tensor(t);
        const size_t elem = dtype_size(info.type.dtype);
        const std::vector<Box> &target = held_all(t);
        State st = out_state[j];
        std::vector<bool> held_partial(levels);
        for (size_t l = 0; l < levels; l++) held_partial[l] = held_state_[t][l].kind == Form::Partial;
        TensorId cur = keep_on_one_member(raw[j], st, held_partial, node, t, out_box[j]);
        const bool is_wide = std::count(wide.begin(), wide.end(), static_cast<int64_t>(j)) > 0;
        cur = reduce_partials(cur, st, held_partial, target, t, info.role, info.name, is_wide);
        if (is_wide && build_) cur = add_narrowing(cur, node, t);
        if (!st.empty()) cur = add_redistribute(cur, st, target, elem, t, info.role, info.name + ">layout", 1);
        if (build_) dg_.local[t] = cur;
    }
}

DeviceGraph Lowerer::run(int rank) {
    rank_ = rank;
    build_ = rank >= 0;
    bytes_.assign(n_, 0);
    dg_ = DeviceGraph{};
    dg_.rank = std::max(rank, 0);
    dg_.devices = n_;
    dg_.cuts = cuts_;
    dg_.local.assign(g_.num_tensors(), kNoTensor);
    for (TensorId t = 0; t < g_.num_tensors(); t++) {
        dg_.shapes.push_back(g_.tensor(t).type.shape);
        dg_.layouts.push_back(plan_.tensors[t].layout);
    }
    comm_counter_ = 0;
    fed_blocks_.clear();
    if (build_) {
        // Graph inputs: this rank's block, under the same name.
        for (TensorId t = 0; t < g_.num_tensors(); t++) {
            const TensorInfo &info = g_.tensor(t);
            if (info.producer != kNoNode) continue;
            Box b = held(t, rank);
            TensorType type{info.type.dtype, b.extents()};
            TensorId id = dg_.graph.add_input(info.name, type, info.role, info.init, "lowering");
            dg_.source.push_back(t);
            dg_.box.push_back(b);
            dg_.local[t] = id;
        }
    }
    for (NodeId n = 0; n < g_.num_nodes(); n++) lower_node(n);
    if (build_) {
        for (TensorId t = 0; t < g_.num_tensors(); t++) {
            TensorId p = g_.tensor(t).updates;
            if (p != kNoTensor) dg_.graph.set_updates(dg_.local[t], dg_.local[p]);
        }
        for (const auto &[key, t] : g_.outputs()) dg_.graph.set_output(key, dg_.local[t]);
        dg_.comm_bytes = bytes_[rank];
    }
    return std::move(dg_);
}

}  // namespace lowering

namespace {

bool prefetches(const Plan &plan) { return plan.strategy == partition_strategy_name(PartitionStrategy::Fsdp); }

}  // namespace

PlanLowering::PlanLowering(const Graph &g, const Plan &plan) : g_(g), plan_(plan), shared_(new Shared) {
    Lowerer l(g, plan);
    for (NodeId n = 0; n < g.num_nodes(); n++) {
        const std::vector<const Strategy *> choice = l.choices(n);
        shared_->blocks.push_back(l.input_blocks(n, choice));
        bool staged = false;
        for (const Strategy *s : choice) staged = staged || (s && !s->reductions.empty());
        shared_->stage_counts.push_back(staged ? l.stage_counts(n, shared_->blocks.back().block)
                                               : std::vector<int64_t>{});
        shared_->choices.push_back(choice);
    }
    for (TensorId t = 0; t < g.num_tensors(); t++) shared_->held.push_back(l.held_boxes(t));
    for (NodeId n = 0; n < g.num_nodes(); n++) {
        std::vector<char> same;
        for (size_t i = 0; i < g.node(n).inputs.size(); i++)
            same.push_back(shared_->held[g.node(n).inputs[i]] == shared_->blocks[n].block[i]);
        shared_->reads_held.push_back(std::move(same));
    }
    if (plan.bucket_bytes > 0)
        shared_->buckets = decide_buckets(Lowerer(g, plan, shared_.get()).run(0).graph, plan.bucket_bytes);
}

PlanLowering::~PlanLowering() = default;

DeviceGraph PlanLowering::rank(int r) const {
    TESSERA_CHECK(r >= 0 && r < plan_.devices, "lowering: rank ", r, " is outside the plan's ", plan_.devices,
                  " devices");
    DeviceGraph dg = Lowerer(g_, plan_, shared_.get()).run(r);
    fuse_collectives(dg, shared_->buckets);
    if (prefetches(plan_)) prefetch_weight_gathers(dg);
    return dg;
}

DeviceGraph lower(const Graph &g, const Plan &plan, int rank) {
    TESSERA_CHECK(rank >= 0 && rank < plan.devices, "lowering: rank ", rank, " is outside the plan's ",
                  plan.devices, " devices");
    DeviceGraph dg = Lowerer(g, plan).run(rank);
    if (plan.bucket_bytes > 0) {
        // Every rank fuses the buckets rank 0's graph gives.
        const BucketPlan buckets = rank == 0 ? decide_buckets(dg.graph, plan.bucket_bytes)
                                             : decide_buckets(Lowerer(g, plan).run(0).graph, plan.bucket_bytes);
        fuse_collectives(dg, buckets);
    }
    if (prefetches(plan)) prefetch_weight_gathers(dg);
    return dg;
}

std::vector<int64_t> lowered_comm_bytes(const Graph &g, const Plan &plan) {
    Lowerer l(g, plan);
    l.run(-1);
    return l.bytes();
}

}  // namespace tessera
