#include "tessera/partition/lower.h"
#include "tessera/partition/partition.h"

#include <algorithm>
#include <limits>
#include <map>

#include "cost.h"
#include "lower_state.h"
#include "tessera/error.h"
#include "tessera/graph/comm_attrs.h"
#include "tessera/lang/staged.h"
#include "tessera/lang/strategy.h"

namespace tessera {

using namespace lowering;

namespace {

// One rank's part of a redistribution: boxes in whole-tensor coordinates.
struct Moves {
    std::vector<std::pair<int, Box>> sends, recvs;  // by peer, ascending
    std::vector<Box> local;
    int64_t bytes = 0;
};

std::string var_of_label(const std::string &label) {
    if (label.rfind("split ", 0) != 0) return "";
    std::string rest = label.substr(6);
    return rest.substr(0, rest.find(' '));
}

}  // namespace

// What every rank's lowering of one plan computes alike: each operator's
// strategies, and for each of its inputs the block every rank reads. One
// rank's lowering needs all ranks' blocks (a redistribution pairs senders and
// receivers), so lowering N ranks one by one computes these N times over.
struct PlanLowering::Shared {
    std::vector<std::vector<const Strategy *>> choices;  // per node, per level
    struct InputBlocks {
        std::vector<std::vector<Box>> block, want;  // per input, per rank
    };
    std::vector<InputBlocks> blocks;  // per node
    std::vector<std::vector<int64_t>> stage_counts;  // per node, per rank: a staged operator's reduced elements
    std::vector<std::vector<Box>> held;  // per tensor, per rank: the box its planned layout gives the rank
    // Per node, per input: whether every rank's block of the input is the one
    // it holds (no redistribution), which a rank alone would compare for all.
    std::vector<std::vector<char>> reads_held;
    BucketPlan buckets;  // decided on rank 0's graph (Plan::bucket_bytes)
};

namespace {

using InputBlocks = PlanLowering::Shared::InputBlocks;

class Lowerer {
public:
    Lowerer(const Graph &g, const Plan &plan, const PlanLowering::Shared *shared = nullptr)
        : g_(g), plan_(plan), shared_(shared) {
        for (const Cut &c : plan.cuts) cuts_.push_back(c.k);
        n_ = 1;
        for (int k : cuts_) n_ *= k;
        TESSERA_CHECK(n_ == plan.devices, "lowering: the plan's cuts multiply to ", n_, " but it has ",
                      plan.devices, " devices");
        TESSERA_CHECK(static_cast<int>(plan.ops.size()) == g.num_nodes() &&
                          static_cast<int>(plan.tensors.size()) == g.num_tensors(),
                      "lowering: the plan has ", plan.ops.size(), " operators and ", plan.tensors.size(),
                      " tensors, but the graph has ", g.num_nodes(), " and ", g.num_tensors(),
                      "; was it made for another model or batch size?");
        for (NodeId n = 0; n < g.num_nodes(); n++)
            TESSERA_CHECK(plan.ops[n].node == g.node(n).call.name, "lowering: the plan's operator ", n, " is '",
                          plan.ops[n].node, "' but the graph's is '", g.node(n).call.name,
                          "'; was it made for another model?");
        for (TensorId t = 0; t < g.num_tensors(); t++) {
            TESSERA_CHECK(plan.tensors[t].tensor == g.tensor(t).name && plan.tensors[t].shape == g.tensor(t).type.shape,
                          "lowering: the plan's tensor ", t, " is '", plan.tensors[t].tensor, "' ",
                          shape_str(plan.tensors[t].shape), " but the graph's is '", g.tensor(t).name, "' ",
                          shape_str(g.tensor(t).type.shape), "; was it made for another model or batch size?");
            TESSERA_CHECK(plan.tensors[t].layout.size() == cuts_.size(), "lowering: tensor '", g.tensor(t).name,
                          "' has ", plan.tensors[t].layout.size(), " layouts for ", cuts_.size(), " cuts");
        }
        for (int r = 0; r < n_; r++) coords_.push_back(rank_coords(cuts_, r));
        for (TensorId t = 0; t < g.num_tensors(); t++) {
            bool partial = false;
            for (const Layout &l : plan.tensors[t].layout) partial = partial || l.is_partial();
            TESSERA_CHECK(!partial || g.tensor(t).role == TensorRole::Gradient, "lowering: the plan holds tensor '",
                          g.tensor(t).name, "' (", role_name(g.tensor(t).role),
                          ") as partial sums, which only a gradient may be");
            held_state_.push_back(state_of(plan.tensors[t].layout));
            held_what_.push_back("tensor '" + g.tensor(t).name + "'");
        }
    }

    // Builds rank `rank`'s graph; with rank < 0 only counts every rank's bytes.
    DeviceGraph run(int rank);
    std::vector<int64_t> bytes() const { return bytes_; }

private:
    Box held(TensorId t, int r) const {
        return box_in(g_.tensor(t).type.shape, held_state_[t], cuts_, coords_[r], held_what_[t]);
    }

    // The node's strategy per level, and per input, per rank: the block its
    // strategies read (`block`), and the same before clamping to the tensor
    // (`want`: rows a window's padding covers lie outside it). From the shared
    // part when there is one.
    const std::vector<const Strategy *> &choices_of(NodeId n);
    const InputBlocks &blocks_of(NodeId n, const std::vector<const Strategy *> &choice);
    const std::vector<int64_t> &stage_counts_of(NodeId n, const std::vector<std::vector<Box>> &in_boxes);
    const std::vector<Box> &held_all(TensorId t);

public:
    std::vector<const Strategy *> choices(NodeId n) const;
    InputBlocks input_blocks(NodeId n, const std::vector<const Strategy *> &choice) const;
    // Per rank, the elements of a staged operator's reduced stage on the
    // blocks `in_boxes` (per input, per rank).
    std::vector<int64_t> stage_counts(NodeId n, const std::vector<std::vector<Box>> &in_boxes) const;
    std::vector<Box> held_boxes(TensorId t) const;

private:
    TensorId add_lowest_rows(TensorId in, const Box &block, int d, int64_t before, int64_t after, const Node &node,
                             const std::string &name);
    std::vector<Box> made_blocks(const Node &node, const std::vector<const Strategy *> &choice,
                                 const std::vector<Box> &out_box) const;
    std::vector<TensorId> keep_blocks(const Node &node, std::vector<TensorId> outs, const std::vector<Box> &made,
                                      const std::vector<Box> &out_box);
    std::vector<TensorId> add_local_slice(const Node &node, OpCall call, TensorId in, const Box &in_block,
                                          const Box &out);
    std::vector<TensorId> add_block_op(const Node &node, const std::vector<const Strategy *> &choice,
                                       const std::vector<int64_t> &wide,
                                       std::vector<TensorId> local_in, const InputBlocks &blocks,
                                       const std::vector<Box> &out_box);
    std::vector<Moves> redistribute(const std::vector<Box> &have, const State &from, const std::vector<Box> &target,
                                    size_t elem) const;
    Moves redistribute_for(int rank, const std::vector<Box> &have, const State &from, const std::vector<Box> &target,
                           size_t elem) const;
    bool holds_for(const State &from, int src, int dst) const;
    TensorId add_fed_block(TensorId whole, const Box &box);
    // `held_is_target`: whether the boxes of the tensor's own layout are
    // `target` (1 or 0), or -1 when not known; it decides only where `from`
    // cuts as the layout does.
    TensorId add_redistribute(TensorId src, const State &from, const std::vector<Box> &target, size_t elem,
                              TensorId whole, TensorRole role, const std::string &why, int held_is_target = -1);
    TensorId add_reduction(TensorId src, const Shape &shape, State &st, const std::vector<Box> &target,
                           DType dtype, TensorId whole, TensorRole role, const std::string &why);
    TensorId reduce_partials(TensorId src, State &st, const std::vector<bool> &keep, const std::vector<Box> &target,
                             TensorId whole, TensorRole role, const std::string &why, bool wide = false);
    std::vector<int64_t> summed_wide(const Node &node, const std::vector<State> &out_state, bool staged) const;
    TensorId add_narrowing(TensorId in, const Node &node, TensorId source);
    TensorId read_input(TensorId src, TensorId t, const std::vector<bool> &keep, const std::vector<Box> &target,
                        TensorRole role, const std::string &why, int held_is_target = -1);
    std::vector<bool> adds_partial_sums(NodeId n) const;
    TensorId keep_on_one_member(TensorId cur, State &st, const std::vector<bool> &held_partial, const Node &node,
                                TensorId t, const Box &box);
    TensorId add_scale(TensorId in, double alpha, const Node &node, const std::string &suffix, TensorId source,
                       const Box &box);
    TensorId add_comm(const std::string &why, const CommAttrs &attrs, TensorId in, DType dtype, const Box &out_box,
                      TensorId source, TensorRole role);
    double mean_rescale(const Node &node, const Box &in) const;
    std::vector<TensorId> add_op(const OpCall &call, const std::vector<TensorId> &in, const Node &node,
                                 const std::vector<Box> &boxes);
    std::vector<TensorId> add_staged(NodeId n, const std::vector<const Strategy *> &choice,
                                     const std::vector<TensorId> &local_in,
                                     const std::vector<std::vector<Box>> &in_boxes,
                                     const std::vector<Box> &out_box);
    TensorId add_stage_reduction(TensorId stage, DType dtype, const std::vector<bool> &levels, const std::string &reduce,
                                 const std::vector<int64_t> &counts, const std::string &why);
    void lower_node(NodeId n);

    const Graph &g_;
    const Plan &plan_;
    const PlanLowering::Shared *shared_ = nullptr;
    // What the *_of accessors return without a shared part.
    std::vector<const Strategy *> choice_scratch_;
    InputBlocks blocks_scratch_;
    std::vector<int64_t> counts_scratch_;
    std::vector<Box> held_scratch_;
    std::vector<int> cuts_;
    int n_ = 1;
    std::vector<std::vector<int>> coords_;
    // Per tensor of the plan: its layout as a State, and how errors name it.
    std::vector<State> held_state_;
    std::vector<std::string> held_what_;
    int rank_ = 0;
    bool build_ = false;
    DeviceGraph dg_;
    std::vector<int64_t> bytes_;
    int comm_counter_ = 0;
    std::map<std::pair<TensorId, std::vector<int64_t>>, TensorId> fed_blocks_;  // (tensor, box) -> its input
};

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

// Whether `src` is the rank `dst` takes `from`-laid-out data from: on every
// level where the data is whole, the receiver's own position there, so each
// element comes from one rank.
bool Lowerer::holds_for(const State &from, int src, int dst) const {
    for (size_t l = 0; l < cuts_.size(); l++)
        if (from[l].kind != Form::Split && coords_[src][l] != coords_[dst][l]) return false;
    return true;
}

// `have[r]`: the box rank r holds, laid out as `from`. Every rank's moves (the
// count-only pass needs every rank's bytes).
std::vector<Moves> Lowerer::redistribute(const std::vector<Box> &have, const State &from,
                                         const std::vector<Box> &target, size_t elem) const {
    std::vector<Moves> moves(n_);
    for (int r = 0; r < n_; r++) {
        for (int src = 0; src < n_; src++) {
            if (!holds_for(from, src, r)) continue;
            Box piece = target[r].intersect(have[src]);
            if (piece.empty()) continue;
            if (src == r) {
                moves[r].local.push_back(piece);
                continue;
            }
            moves[r].recvs.emplace_back(src, piece);
            moves[src].sends.emplace_back(r, piece);
            moves[src].bytes += piece.elements() * static_cast<int64_t>(elem);
        }
    }
    for (Moves &m : moves) std::sort(m.sends.begin(), m.sends.end(), [](auto &a, auto &b) { return a.first < b.first; });
    return moves;
}

// One rank's part of redistribute(): the same pieces in the same order, in
// O(ranks) instead of O(ranks^2), for a build of that rank alone.
Moves Lowerer::redistribute_for(int rank, const std::vector<Box> &have, const State &from,
                                const std::vector<Box> &target, size_t elem) const {
    Moves m;
    for (int src = 0; src < n_; src++) {
        if (!holds_for(from, src, rank)) continue;
        Box piece = target[rank].intersect(have[src]);
        if (piece.empty()) continue;
        if (src == rank) m.local.push_back(piece);
        else m.recvs.emplace_back(src, piece);
    }
    for (int dst = 0; dst < n_; dst++) {
        if (dst == rank || !holds_for(from, rank, dst)) continue;
        Box piece = target[dst].intersect(have[rank]);
        if (piece.empty()) continue;
        m.sends.emplace_back(dst, piece);
        m.bytes += piece.elements() * static_cast<int64_t>(elem);
    }
    return m;
}

// `source`: the training-graph tensor the result holds the block `out_box` of,
// or kNoTensor (a stage of a staged operator).
TensorId Lowerer::add_comm(const std::string &why, const CommAttrs &attrs, TensorId in, DType dtype,
                           const Box &out_box, TensorId source, TensorRole role) {
    std::string name = "comm" + std::to_string(comm_counter_++) + ":" + why;
    TensorId t = dg_.graph.add_comm_node(name, comm_attrs_to(attrs), {in}, TensorType{dtype, out_box.extents()}, role);
    dg_.source.push_back(source);
    dg_.box.push_back(out_box);
    dg_.comm_nodes++;
    return t;
}

// Another block of a tensor the trainer feeds (is_fed): a graph input of its
// own, which the trainer fills from the same host batch (ShardedStore::write),
// so reading the data in another layout moves no bytes. One input per block.
TensorId Lowerer::add_fed_block(TensorId whole, const Box &box) {
    if (!build_) return kNoTensor;
    if (box == dg_.box[dg_.local[whole]]) return dg_.local[whole];
    auto [it, fresh] = fed_blocks_.try_emplace({whole, box_ints(box)}, kNoTensor);
    if (!fresh) return it->second;
    const TensorInfo &info = g_.tensor(whole);
    it->second = dg_.graph.add_data(info.name + "@" + box.str(), TensorType{info.type.dtype, box.extents()});
    dg_.source.push_back(whole);
    dg_.box.push_back(box);
    return it->second;
}

// Every rank takes the same branch: the decisions depend on all ranks' boxes.
TensorId Lowerer::add_redistribute(TensorId src, const State &from, const std::vector<Box> &target, size_t elem,
                                   TensorId whole, TensorRole role, const std::string &why, int held_is_target) {
    const Shape &s = g_.tensor(whole).type.shape;
    std::vector<Box> computed;
    const bool as_held = same_cuts(from, held_state_[whole]);
    if (!as_held) {
        computed.resize(n_);
        for (int r = 0; r < n_; r++) computed[r] = box_in(s, from, cuts_, coords_[r], why);
    }
    const std::vector<Box> &have = as_held ? held_all(whole) : computed;
    if (as_held && held_is_target >= 0 ? held_is_target == 1 : have == target) return src;
    if (!build_) {
        std::vector<Moves> moves = redistribute(have, from, target, elem);
        for (int r = 0; r < n_; r++) bytes_[r] += moves[r].bytes;
        return kNoTensor;
    }
    const Moves m = redistribute_for(rank_, have, from, target, elem);
    bytes_[rank_] += m.bytes;
    const Box &in_box = have[rank_], &out_box = target[rank_];
    CommAttrs a;
    a.kind = CommNodeKind::Redistribute;
    a.world = n_;
    a.bytes = m.bytes;
    for (const auto &[peer, b] : m.sends) a.sends.push_back({peer, b.shifted(in_box)});
    for (const auto &[peer, b] : m.recvs) a.recvs.push_back({peer, b.shifted(out_box)});
    for (const Box &b : m.local) a.local.push_back({b.shifted(in_box), b.shifted(out_box).lo});
    const DType dtype = g_.tensor(whole).type.dtype;
    // A rank that needs none of it (a slice gradient's block outside the
    // slice) still sends its part; its output is one element nothing reads.
    if (out_box.empty())
        return add_comm(why, a, src, dtype, Box::whole(Shape(out_box.rank(), 1)), kNoTensor, role);
    return add_comm(why, a, src, dtype, out_box, whole, role);
}

TensorId Lowerer::add_reduction(TensorId src, const Shape &shape, State &st, const std::vector<Box> &target,
                                DType dtype, TensorId whole, TensorRole role, const std::string &why) {
    const size_t elem = dtype_size(dtype);
    std::vector<bool> partial(cuts_.size(), false);
    for (size_t l = 0; l < st.size(); l++) partial[l] = st[l].kind == Form::Partial;
    // Reduce-scatter when each group's target boxes tile the summed box (in
    // blocks of unequal size where the split is uneven).
    // The groups partition the ranks and every member sums the same box, so
    // one member per group is checked.
    bool scatter = true;
    std::vector<char> checked(static_cast<size_t>(n_), 0);
    for (int r = 0; r < n_ && scatter; r++) {
        if (checked[r]) continue;
        std::vector<int64_t> grp = group_of(coords_, r, partial);
        for (int64_t q : grp) checked[static_cast<size_t>(q)] = 1;
        Box sum = box_in(shape, st, cuts_, coords_[r], why);
        int64_t covered = 0;
        for (size_t a = 0; a < grp.size() && scatter; a++) {
            const Box &ta = target[grp[a]];
            if (!sum.contains(ta)) scatter = false;
            for (size_t b = 0; b < a && scatter; b++)
                if (!ta.intersect(target[grp[b]]).empty()) scatter = false;
            covered += ta.elements();
        }
        if (covered != sum.elements()) scatter = false;
    }
    const Box in_box = box_in(shape, st, cuts_, coords_[std::max(rank_, 0)], why);
    // Every rank's bytes for the count-only pass; a build needs its own.
    for (int r = build_ ? rank_ : 0; r < (build_ ? rank_ + 1 : n_); r++) {
        std::vector<int64_t> grp = group_of(coords_, r, partial);
        int k = static_cast<int>(grp.size());
        int i = static_cast<int>(std::find(grp.begin(), grp.end(), r) - grp.begin());
        int64_t count = box_in(shape, st, cuts_, coords_[r], why).elements();
        // The ring reduce-scatter sends every chunk but the member's own.
        bytes_[r] += scatter ? (count - target[r].elements()) * static_cast<int64_t>(elem)
                             : all_reduce_sent(count, k, i) * static_cast<int64_t>(elem);
    }
    TensorId out = kNoTensor;
    if (build_) {
        std::vector<int64_t> grp = group_of(coords_, rank_, partial);
        int k = static_cast<int>(grp.size());
        int i = static_cast<int>(std::find(grp.begin(), grp.end(), rank_) - grp.begin());
        CommAttrs a;
        a.ranks.assign(grp.begin(), grp.end());
        if (scatter) {
            a.kind = CommNodeKind::ReduceScatter;
            for (int64_t q : grp) a.chunks.push_back(target[q].shifted(in_box));
            a.bytes = (in_box.elements() - target[rank_].elements()) * static_cast<int64_t>(elem);
            out = add_comm(why, a, src, dtype, target[rank_], whole, role);
        } else {
            a.kind = CommNodeKind::AllReduce;
            a.bytes = all_reduce_sent(in_box.elements(), k, i) * static_cast<int64_t>(elem);
            out = add_comm(why, a, src, dtype, in_box, whole, role);
        }
    }
    for (Form &f : st)
        if (f.kind == Form::Partial) f = Form{};
    if (scatter) {
        // The result is the target; mark it so the caller moves nothing more.
        st.clear();
    }
    return out;
}

// Sums the levels of `st` that hold partial sums, but those `keep` keeps, into
// `target`; `st` is left as what the result holds (empty when it is `target`).
TensorId Lowerer::reduce_partials(TensorId src, State &st, const std::vector<bool> &keep,
                                  const std::vector<Box> &target, TensorId whole, TensorRole role,
                                  const std::string &why, bool wide) {
    State reduce = st;
    bool any = false;
    for (size_t l = 0; l < st.size(); l++) {
        if (st[l].kind != Form::Partial) continue;
        if (keep[l]) reduce[l] = Form{};  // summed later; its box is whole either way
        else any = true;
    }
    if (!any) return src;
    const TensorInfo &info = g_.tensor(whole);
    const DType dtype = wide ? DType::F32 : info.type.dtype;
    TensorId out = add_reduction(src, info.type.shape, reduce, target, dtype, whole, role, why);
    if (reduce.empty()) st.clear();  // reduce-scattered into the target
    for (size_t l = 0; l < st.size(); l++)
        if (st[l].kind == Form::Partial && !keep[l]) st[l] = Form{};
    return out;
}

// Input t of a node, from its layout into the blocks `target` the node reads;
// its partial sums are summed first, but at the levels `keep` (where the node
// adds partial sums as they are).
TensorId Lowerer::read_input(TensorId src, TensorId t, const std::vector<bool> &keep, const std::vector<Box> &target,
                             TensorRole role, const std::string &why, int held_is_target) {
    State st = held_state_[t];
    for (size_t l = 0; l < st.size(); l++)
        TESSERA_CHECK(!keep[l] || st[l].kind == Form::Partial, "lowering: at level ", l + 1, " the plan adds ",
                      held_what_[t], " as partial sums, but holds it as ", plan_.tensors[t].layout[l].str());
    TensorId cur = reduce_partials(src, st, keep, target, t, role, why);
    if (!st.empty())
        cur = add_redistribute(cur, st, target, dtype_size(g_.tensor(t).type.dtype), t, role, why, held_is_target);
    return cur;
}

// Node's output t, made whole at levels where the plan holds it as partial
// sums: the members at coordinate 0 of those levels keep it and the others
// hold zeros, so that the addends sum to it. (A NaN or an infinity of the
// value becomes a NaN on the others, so the sum is still not finite.)
TensorId Lowerer::keep_on_one_member(TensorId cur, State &st, const std::vector<bool> &held_partial,
                                     const Node &node, TensorId t, const Box &box) {
    bool any = false, keeps = true;
    for (size_t l = 0; l < st.size(); l++) {
        if (!held_partial[l] || st[l].kind == Form::Partial) continue;
        TESSERA_CHECK(st[l].kind == Form::Whole, "lowering: ", node.call.who(), " makes ", held_what_[t],
                      " split at level ", l + 1, ", but the plan holds it there as partial sums");
        st[l] = Form{Form::Partial, -1};
        any = true;
        keeps = keeps && coords_[std::max(rank_, 0)][l] == 0;
    }
    if (!any || !build_ || keeps) return cur;
    return add_scale(cur, 0.0, node, "#partial_addend", t, box);
}

// `in` times alpha, a node of its own after `node`'s, holding the block `box` of `source`.
TensorId Lowerer::add_scale(TensorId in, double alpha, const Node &node, const std::string &suffix, TensorId source,
                            const Box &box) {
    OpCall scale{OpKind::Scale, node.call.name + suffix, {}};
    scale.attrs.set("alpha", alpha);
    TensorId out = dg_.graph.add_node(scale, {in}, g_.tensor(source).role)[0];
    dg_.graph.set_node_flags(dg_.graph.num_nodes() - 1, node.backward, node.optimizer);
    dg_.source.push_back(source);
    dg_.box.push_back(box);
    return out;
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
// extents themselves.) `in`: this rank's block of the first input.
double Lowerer::mean_rescale(const Node &node, const Box &in) const {
    if (node.call.kind != OpKind::SoftmaxXent && node.call.kind != OpKind::SoftmaxXentGrad) return 1.0;
    return static_cast<double>(in.hi[0] - in.lo[0]) / static_cast<double>(g_.tensor(node.inputs[0]).type.shape[0]);
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
        std::vector<int64_t> grp = group_of(coords_, r, levels);
        int i = static_cast<int>(std::find(grp.begin(), grp.end(), r) - grp.begin());
        int64_t sent = all_reduce_sent(counts[r], static_cast<int>(grp.size()), i) *
                       static_cast<int64_t>(dtype_size(dtype));
        bytes_[r] += sent;
        if (r == rank_) mine = sent;
    }
    if (!build_) return kNoTensor;
    CommAttrs a;
    a.kind = CommNodeKind::AllReduce;
    const std::vector<int64_t> grp = group_of(coords_, rank_, levels);
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

// The outputs of `node` that its blocks make as partial sums of a 16-bit
// tensor, summed across devices right after it: they are made and summed in
// f32 (lang's kF32OutputsAttr) and rounded once, after the sum, as one device
// rounds the whole sum (add_narrowing). Partial sums held as such for a later
// node, and a staged operator's, stay in the storage type.
std::vector<int64_t> Lowerer::summed_wide(const Node &node, const std::vector<State> &out_state, bool staged) const {
    std::vector<int64_t> wide;
    for (size_t j = 0; j < node.outputs.size(); j++) {
        const TensorId t = node.outputs[j];
        const TensorType &type = g_.tensor(t).type;
        if (part::partial_sum_type(g_, t, type, staged) == type) continue;
        bool partial = false, held_partial = false;
        for (size_t l = 0; l < cuts_.size(); l++) {
            partial = partial || out_state[j][l].kind == Form::Partial;
            held_partial = held_partial || held_state_[t][l].kind == Form::Partial;
        }
        if (partial && !held_partial) wide.push_back(static_cast<int64_t>(j));
    }
    return wide;
}

// The f32 sum `in` rounded to the storage type of `source`, on the block it holds.
TensorId Lowerer::add_narrowing(TensorId in, const Node &node, TensorId source) {
    const DType store = g_.tensor(source).type.dtype;
    OpCall cast{OpKind::Cast, g_.tensor(source).name + "#" + dtype_name(store), {{"to", std::string(dtype_name(store))}}};
    const Box box = dg_.box[in];
    TensorId out = dg_.graph.add_node(cast, {in}, g_.tensor(source).role)[0];
    dg_.graph.set_node_flags(dg_.graph.num_nodes() - 1, node.backward, node.optimizer);
    dg_.source.push_back(source);
    dg_.box.push_back(box);
    return out;
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
    if (staged) raw = add_staged(n, choice, local_in, in_boxes, out_box);
    if (build_) {
        if (!staged) raw = add_block_op(node, choice, wide, local_in, blocks, out_box);
        const double alpha = mean_rescale(node, in_box[0]);
        if (alpha != 1.0) raw[0] = add_scale(raw[0], alpha, node, "#whole_batch", node.outputs[0], out_box[0]);
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

}  // namespace

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
