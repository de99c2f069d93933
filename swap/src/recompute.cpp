// The scheduler's recomputation: running a dropped buffer's producer again
// before its next use (bring_in, recompute), the inputs a drop holds, and
// what makes a candidate's recomputations infeasible and whom that blames.
// The rest of the scheduler is in schedule.cpp, its slots in slots.cpp.
#include <algorithm>
#include <vector>

#include "internal.h"
#include "tessera/error.h"

namespace tessera::swap_detail {

// A recomputation makes a slot's contents at the key of the operator that
// needed them, and a swap-out of them can go no earlier than the key after:
// an operand of that same operator given such a slot, or a swap-in that must
// wait for it, would wait for a step issued after its own. Such drop choices
// are infeasible (the search moves on); without recomputation it cannot
// happen.
void Scheduler::expect_waits_backward(const Schedule &out) const {
    const IStep &st = out.steps.back();
    for (int d = st.dep_begin; d < st.dep_end; d++) {
        if (out.steps[out.deps[d]].key <= st.key) continue;
        if (std::any_of(may_drop_.begin(), may_drop_.end(), [](uint8_t v) { return v != 0; }))
            infeasible();
        TESSERA_INTERNAL_ASSERT(false, "a ", swap_step_kind_name(st.kind), " step at key ", st.key, " waits for a ",
                                swap_step_kind_name(out.steps[out.deps[d]].kind), " step at key ",
                                out.steps[out.deps[d]].key);
    }
}

void Scheduler::infeasible() const {
    for (auto it = recomputing_.rbegin(); it != recomputing_.rend(); ++it)
        if (may_drop_[*it]) throw RecomputeInfeasible{*it};
    throw RecomputeInfeasible{last_recomputed_};
}

void Scheduler::hold_inputs(const Prepared &p, int b, int delta) {
    NodeId producer = p.bufs[b].producer;
    for (int k = p.use_begin[producer]; k < p.use_begin[producer + 1]; k++)
        if (p.uses[k].buf != b) held_[p.uses[k].buf] += delta;
}

void Scheduler::bring_in(const Prepared &p, const Classes &c, int b, int s, int pos, SwapPolicy policy,
                         Schedule &out) {
    if (dropped_[b]) return recompute(p, c, b, s, pos, policy, out);
    if (!host_valid_[b]) infeasible();  // a producer's input that is gone
    swap_in(p, b, s, pos, policy, out);
}

// Runs the producer of dropped buffer b again at position `pos`, into slot
// s: its inputs must be unchanged since it ran; those not on the device are
// brought in first (swapped in, or recomputed in turn), protected from
// eviction until it has run.
void Scheduler::recompute(const Prepared &p, const Classes &c, int b, int s, int pos, SwapPolicy policy,
                          Schedule &out) {
    const NodeId producer = p.bufs[b].producer;
    const int ub = p.use_begin[producer], ue = p.use_begin[producer + 1];
    recomputing_.push_back(b);
    slot_of_[b] = s;
    occupy(s, b);
    stamp_[b] = pos;
    std::vector<int> stamps;  // the inputs' stamps before this protection
    for (int k = ub; k < ue; k++) {
        int x = p.uses[k].buf;
        stamps.push_back(stamp_[x]);
        if (x == b) continue;
        if (last_write_pos_[x] > node_pos_[producer]) infeasible();
        stamp_[x] = pos;
    }
    for (int k = ub; k < ue; k++) {
        int x = p.uses[k].buf;
        if (x == b || pinned_[x] || slot_of_[x] >= 0) continue;
        int sx = acquire(p, c.of_buf[x], pos, pos, policy, out);
        if (sx < 0) infeasible();
        placed_at_[x] = pos;
        bring_in(p, c, x, sx, pos, policy, out);
    }
    const int rs = emit(out, SwapStep::Kind::Recompute, pos, producer, b, slot_offset_[s]);
    wait_for_region(out, s, slot_swapout_);
    wait_for_region(out, s, slot_pending_in_);
    for (int k = ub; k < ue; k++) {
        int x = p.uses[k].buf;
        if (x == b || pinned_[x]) continue;
        dep(out, resid_swapin_[x]);
        resid_swapin_[x] = -1;
        resid_last_compute_[x] = rs;
    }
    expect_waits_backward(out);
    resid_swapin_[b] = resid_swapout_[b] = -1;
    resid_last_compute_[b] = rs;
    last_write_step_[b] = rs;  // what a swap-out of this residency waits for
    if (dropped_[b] == kHeldDrop) hold_inputs(p, b, -1);
    dropped_[b] = 0;
    recomputing_.pop_back();
    if (may_drop_[b]) last_recomputed_ = b;
    touch_[b] = pos;
    // Inputs brought in only for this are evictable again, and freed when
    // nothing reads them any more (their slots wait for this step).
    for (int k = ub; k < ue; k++) {
        int x = p.uses[k].buf;
        if (x == b) continue;
        stamp_[x] = stamps[static_cast<size_t>(k - ub)];
        if (!pinned_[x] && slot_of_[x] >= 0 && stamp_[x] != pos && use_ptr_[x] == use_end_[x] && held_[x] == 0)
            release(p, x, out);
    }
}

}  // namespace tessera::swap_detail
