// Lowering's communication: redistributions between layouts, reductions of
// partial sums (in f32 for 16-bit tensors, part::partial_sum_type), and the
// nodes around them (lowerer.h).
#include <algorithm>

#include "lowerer.h"

namespace tessera::lowering {

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
        const std::vector<int64_t> &grp = groups_.members(r, partial);
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
        const std::vector<int64_t> &grp = groups_.members(r, partial);
        int k = static_cast<int>(grp.size());
        int i = groups_.position(r, partial);
        int64_t count = box_in(shape, st, cuts_, coords_[r], why).elements();
        // The ring reduce-scatter sends every chunk but the member's own.
        bytes_[r] += scatter ? (count - target[r].elements()) * static_cast<int64_t>(elem)
                             : all_reduce_sent(count, k, i) * static_cast<int64_t>(elem);
    }
    TensorId out = kNoTensor;
    if (build_) {
        const std::vector<int64_t> &grp = groups_.members(rank_, partial);
        int k = static_cast<int>(grp.size());
        int i = groups_.position(rank_, partial);
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

}  // namespace tessera::lowering
