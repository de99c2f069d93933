// The swap scheduler: one order, one pool layout and one policy in, the
// steps of a swap plan out (its slots are in slots.cpp, its recomputation in
// recompute.cpp, the prepared problem it reads in prepare.cpp).
//
// Policy of the scheduler, in one place:
//   * A buffer is resident in one slot of its size class while it is on the
//     device. An operator needs all its buffers resident; a buffer it reads
//     comes in by a swap-in, a buffer it only writes just takes a slot.
//   * A slot comes from the class's free slots (the one whose last occupant
//     finished earliest) or by evicting a resident that the operator does not
//     use: Belady (furthest next use, clean ones first on ties) for Advisor,
//     least recently used for the baselines. An evicted buffer whose host
//     copy is stale is swapped out; its swap-out is issued right after its
//     last write, since reads do not conflict with it.
//   * Every step carries an issue key (the position of the compute step it is
//     issued before). A swap-in's key is the earliest its slot allows: after
//     the slot's previous occupant's last use and swap-out, after the buffer's
//     own previous residency, and never before an earlier swap-in (the
//     swap-in stream is FIFO in operator need). Lru and Vdnn swap in on demand
//     instead: before the operator, once the operator before it is done.
//   * The advisor lets an element-wise operator's output take the slot of an
//     input it reads for the last time (op_may_overwrite_input), so that the
//     two need one slot between them, not two.
//   * A buffer is freed after its last use in the step; host-homed persistent
//     buffers that the step wrote are swapped out first, so that every
//     host-homed buffer ends the step in host memory, up to date.
//   * An optimizer node the layout puts on the host takes no slot: a dirty
//     operand (its gradient) is swapped out, the host-update step waits for
//     that and for the swap-ins still reading the regions it overwrites, and
//     the arena copy of what it updates is freed without a swap-out.
// Keys make the issue order consistent by construction: every dependency has
// a smaller key, or the same key and an earlier generation.
#include <algorithm>
#include <utility>

#include "internal.h"
#include "tessera/error.h"

namespace tessera::swap_detail {

int Scheduler::emit(Schedule &out, SwapStep::Kind kind, int key, int node, int buf, int64_t offset) {
    IStep s;
    s.kind = kind;
    s.key = key;
    s.node = node;
    s.buf = buf;
    s.offset = offset;
    s.dep_begin = s.dep_end = static_cast<int>(out.deps.size());
    out.steps.push_back(s);
    return static_cast<int>(out.steps.size()) - 1;
}

void Scheduler::dep(Schedule &out, int step) {
    if (step < 0) return;
    out.deps.push_back(step);
    out.steps.back().dep_end = static_cast<int>(out.deps.size());
}

// Issued right after the step that wrote the slot's contents: the compute of
// the buffer's last write, or the recomputation that refilled the slot since
// (whose key is later: a swap-out keyed at the first write would read a slot
// the buffer did not hold yet).
int Scheduler::swap_out(const Prepared &p, int b, Schedule &out) {
    int s = slot_of_[b];
    const int writer = last_write_step_[b];
    const int key = writer >= 0 ? out.steps[writer].key + 1 : last_write_pos_[b] + 1;
    int st = emit(out, SwapStep::Kind::SwapOut, key, kNoNode, b, slot_offset_[s]);
    dep(out, writer);
    resid_swapout_[b] = st;
    last_swapout_step_[b] = st;
    host_valid_[b] = 1;
    out.moved[b] = 1;
    out.swap_out_bytes += p.bufs[b].raw_bytes;
    return st;
}

void Scheduler::release(const Prepared &p, int b, Schedule &out) {
    int s = slot_of_[b];
    if (occ_[s] != b) {  // an output overwrote it (hand_over_slot): dead, its slot no longer its own
        if (!host_valid_[b] && recompute_on_ && p.recomputable[b]) dropped_[b] = kFreedDrop;
        slot_of_[b] = -1;
        resid_swapin_[b] = resid_swapout_[b] = resid_last_compute_[b] = -1;
        return;
    }
    // A dropped buffer's producer will read this one again.
    bool future = use_ptr_[b] < use_end_[b] || held_[b] > 0;
    if (!host_valid_[b] && future && may_drop_[b] && use_ptr_[b] < use_end_[b]) {
        dropped_[b] = kHeldDrop;  // recomputed before its next use instead of swapped
        hold_inputs(p, b, +1);
    } else if (!host_valid_[b] && (future || p.bufs[b].persistent)) {
        swap_out(p, b, out);
    } else if (!host_valid_[b] && recompute_on_ && p.recomputable[b]) {
        dropped_[b] = kFreedDrop;  // gone, but a later recomputation may run its producer again
    }
    int ready = 0;
    if (resid_last_compute_[b] >= 0) ready = out.steps[resid_last_compute_[b]].key + 1;
    if (resid_swapout_[b] >= 0) ready = std::max(ready, out.steps[resid_swapout_[b]].key);
    if (resid_swapin_[b] >= 0) ready = std::max(ready, out.steps[resid_swapin_[b]].key);
    slot_last_compute_[s] = resid_last_compute_[b];
    slot_swapout_[s] = resid_swapout_[b];
    slot_pending_in_[s] = resid_swapin_[b];
    region_ready_[s] = std::max(region_ready_[s], ready);
    for (int k = overlap_begin_[s]; k < overlap_begin_[s + 1]; k++)
        region_ready_[overlap_[k]] = std::max(region_ready_[overlap_[k]], ready);
    min_key_[b] = std::max(min_key_[b], ready);
    vacate(s);
    slot_of_[b] = -1;
    resid_swapin_[b] = resid_swapout_[b] = resid_last_compute_[b] = -1;
}

int Scheduler::acquire(const Prepared &p, int cls, int pos, int protect_from, SwapPolicy policy, Schedule &out) {
    const int nc = static_cast<int>(pieces_.size());
    // A free slot, of the smallest class that has one.
    for (int k = cls; k < nc; k++) {
        int s = free_slot(k);
        if (s >= 0) return s;
    }
    // Else evictions, in the smallest class that has a slot whose occupants
    // (several where a piece overlaps them) may all go.
    for (int k = cls; k < nc; k++) {
        int s = slot_to_evict(k, protect_from, policy);
        if (s < 0) continue;
        for (int v : occupants(s)) release(p, v, out);
        return s;
    }
    (void)pos;
    return -1;
}


void Scheduler::swap_in(const Prepared &p, int b, int s, int pos, SwapPolicy policy, Schedule &out) {
    int key = std::max({last_swapin_key_, region_ready_[s], min_key_[b]});
    if (last_swapout_step_[b] >= 0) key = std::max(key, out.steps[last_swapout_step_[b]].key);
    bool on_demand = policy != SwapPolicy::Advisor;
    if (on_demand) key = std::max(key, pos);
    int st = emit(out, SwapStep::Kind::SwapIn, key, kNoNode, b, slot_offset_[s]);
    wait_for_region(out, s, slot_last_compute_);
    wait_for_region(out, s, slot_swapout_);
    dep(out, last_swapout_step_[b]);
    if (on_demand && pos >= 1) dep(out, compute_step_[pos - 1]);
    last_swapin_key_ = key;
    slot_of_[b] = s;
    occupy(s, b);
    resid_swapin_[b] = st;
    last_swapin_step_[b] = st;
    resid_swapout_[b] = resid_last_compute_[b] = -1;
    touch_[b] = pos;
    out.moved[b] = 1;
    out.swap_in_bytes += p.bufs[b].raw_bytes;
}

// An optimizer node on the host, at position `pos`: its operands must be
// current in host memory, so one still dirty on the device (the gradient) is
// swapped out; it waits for that and, for the regions it overwrites, for the
// swap-ins still reading them. Afterwards the host copies are current and an
// arena copy of what it updated is stale: its slot is freed, unwritten.
void Scheduler::host_update(const Prepared &p, int pos, NodeId node, Schedule &out) {
    const int ub = p.use_begin[node], ue = p.use_begin[node + 1];
    pending_deps_.clear();
    for (int k = ub; k < ue; k++) {
        const Use &u = p.uses[k];
        int b = u.buf;
        TESSERA_INTERNAL_ASSERT(!pinned_[b], "buffer ", b, " of a host update is pinned");
        if (!host_valid_[b]) {
            if (slot_of_[b] < 0 && dropped_[b]) {  // the host cannot recompute
                if (may_drop_[b]) throw RecomputeInfeasible{b};
                infeasible();
            }
            TESSERA_INTERNAL_ASSERT(slot_of_[b] >= 0, "buffer ", b, " is neither in host memory nor on the device");
            swap_out(p, b, out);
        }
        pending_deps_.push_back(last_swapout_step_[b]);
        if (u.write) pending_deps_.push_back(last_swapin_step_[b]);
    }
    int hs = emit(out, SwapStep::Kind::HostUpdate, pos, node, -1, -1);
    for (int d : pending_deps_) dep(out, d);
    compute_step_[pos] = pos > 0 ? compute_step_[pos - 1] : -1;
    for (int k = ub; k < ue; k++) {
        const Use &u = p.uses[k];
        int b = u.buf;
        last_use_pos_[b] = touch_[b] = pos;
        use_ptr_[b]++;
        if (u.write) {
            last_swapout_step_[b] = hs;  // later swap-ins read what it wrote
            last_write_pos_[b] = pos;
            host_valid_[b] = 1;
            out.moved[b] = 1;
        }
        if (slot_of_[b] >= 0 && (u.write || use_ptr_[b] == use_end_[b])) release(p, b, out);
    }
}

// Fresh per-run state: use positions, slots in pool order, every buffer off
// the device (host copies valid for graph inputs), and vDNN's offloads.
void Scheduler::reset(const Prepared &p, const std::vector<NodeId> &order, const Classes &c, const Layout &layout,
                      SwapPolicy policy, Schedule &out) {
    const int nb = static_cast<int>(p.bufs.size());
    n_ = static_cast<int>(order.size());
    out.steps.clear();
    out.deps.clear();
    out.issue.clear();
    out.produce_at.assign(nb, -1);
    out.moved.assign(nb, 0);
    out.swap_in_bytes = out.swap_out_bytes = 0;

    // Use positions per buffer, in order.
    use_pos_.resize(p.buf_use_begin[nb]);
    use_ptr_.assign(p.buf_use_begin.begin(), p.buf_use_begin.end() - 1);
    for (int i = 0; i < n_; i++)
        for (int k = p.use_begin[order[i]]; k < p.use_begin[order[i] + 1]; k++)
            use_pos_[use_ptr_[p.uses[k].buf]++] = i;
    use_ptr_.assign(p.buf_use_begin.begin(), p.buf_use_begin.end() - 1);
    use_end_.assign(p.buf_use_begin.begin() + 1, p.buf_use_begin.end());
    reset_slots(c, layout, layout.split && policy == SwapPolicy::Advisor, out);

    slot_of_.assign(nb, -1);
    stamp_.assign(nb, -1);
    touch_.assign(nb, -1);
    last_use_pos_.assign(nb, -1);
    last_write_pos_.assign(nb, -1);
    last_write_step_.assign(nb, -1);
    resid_swapin_.assign(nb, -1);
    resid_swapout_.assign(nb, -1);
    resid_last_compute_.assign(nb, -1);
    last_swapout_step_.assign(nb, -1);
    last_swapin_step_.assign(nb, -1);
    min_key_.assign(nb, 0);
    host_valid_.resize(nb);
    pinned_.resize(nb);
    for (int b = 0; b < nb; b++) {
        host_valid_[b] = p.bufs[b].initial;
        pinned_[b] = layout.pin[b] >= 0;
    }
    compute_step_.assign(n_, -1);
    placed_at_.assign(nb, -1);
    may_drop_.assign(nb, 0);
    if (!layout.recompute.empty()) may_drop_ = layout.recompute;
    dropped_.assign(nb, 0);
    held_.assign(nb, 0);
    recompute_on_ = !layout.recompute.empty();
    overwrite_on_ = layout.split && policy == SwapPolicy::Advisor;
    recomputing_.clear();
    last_recomputed_ = -1;
    node_pos_.assign(p.g->num_nodes(), -1);
    for (int i = 0; i < n_; i++) node_pos_[order[i]] = i;
    last_swapin_key_ = 0;
    mark_offloaded(p, order, policy);
}

// vDNN: forward activations, used again in the backward pass, go to the
// host after their production and come back one operator ahead.
void Scheduler::mark_offloaded(const Prepared &p, const std::vector<NodeId> &order, SwapPolicy policy) {
    const int nb = static_cast<int>(p.bufs.size());
    offloaded_.assign(nb, 0);
    if (policy != SwapPolicy::Vdnn) return;
    first_bwd_.assign(nb, -1);
    last_fwd_.assign(nb, -1);
    for (int i = 0; i < n_; i++) {
        NodeId n = order[i];
        bool bwd = p.g->node(n).backward;
        for (int k = p.use_begin[n]; k < p.use_begin[n + 1]; k++) {
            int b = p.uses[k].buf;
            if (bwd && first_bwd_[b] < 0) first_bwd_[b] = i;
            if (p.fwd_node[n] && first_bwd_[b] < 0) last_fwd_[b] = i;
        }
    }
    for (int b = 0; b < nb; b++) {
        const Buffer &bf = p.bufs[b];
        offloaded_[b] = !bf.persistent && !pinned_[b] && bf.producer != kNoNode && p.fwd_node[bf.producer] &&
                        first_bwd_[b] > last_fwd_[b] && last_fwd_[b] >= 0;
    }
}

// Places the buffers of the operator at position i that are not on the
// device, the largest class first, and collects in pending_deps_ what its
// compute step waits for. When an operand finds no slot, the placement
// starts again without spans (unplace_for_restart), and then move_smaller
// makes room.
void Scheduler::place_operands(const Prepared &p, const Classes &c, const Layout &layout, int i, SwapPolicy policy,
                               Schedule &out) {
    const NodeId n = current_;
    const int ub = p.use_begin[n], ue = p.use_begin[n + 1];
    pending_deps_.clear();
    spans_off_ = false;
    hand_over_slot(p, i, out);
    queue_operands(p, c);
    size_t q = 0;
    while (q < need_.size()) q = place_operand(p, c, layout, i, q, policy, out) ? q + 1 : 0;
    for (int k = ub; k < ue; k++) {
        const Use &u = p.uses[k];
        int b = u.buf;
        if (pinned_[b]) continue;
        if (resid_swapin_[b] >= 0) pending_deps_.push_back(std::exchange(resid_swapin_[b], -1));
        if (u.write && resid_swapout_[b] >= 0) pending_deps_.push_back(std::exchange(resid_swapout_[b], -1));
    }
}

// An element-wise operator that reads an input for the last time may write
// its output over it (Prepared::overwrites): the output takes the input's
// slot, and the operator waits for a swap-out still reading it. The input
// stays usable until the operator has run (release then only forgets it).
void Scheduler::hand_over_slot(const Prepared &p, int i, Schedule &out) {
    handed_to_ = -1;
    const NodeId n = current_;
    if (!overwrite_on_ || p.overwrites[n][0] < 0) return;
    const int y = p.buf_of_tensor[p.g->node(n).outputs[0]];
    if (slot_of_[y] >= 0 || pinned_[y]) return;
    for (int x : p.overwrites[n]) {
        if (x < 0 || pinned_[x]) continue;
        const int s = slot_of_[x];
        if (s < 0 || is_span(s) || use_ptr_[x] + 1 != use_end_[x] || held_[x] > 0) continue;
        slot_of_[y] = s;
        occ_[s] = y;
        placed_at_[y] = i;
        resid_swapin_[y] = resid_swapout_[y] = resid_last_compute_[y] = -1;
        if (resid_swapout_[x] >= 0) pending_deps_.push_back(std::exchange(resid_swapout_[x], -1));
        if (out.produce_at[y] < 0) out.produce_at[y] = slot_offset_[s];
        handed_to_ = y;
        return;
    }
}

// need_: the current operator's operands not on the device, the largest
// class first.
void Scheduler::queue_operands(const Prepared &p, const Classes &c) {
    need_.clear();
    for (int k = p.use_begin[current_]; k < p.use_begin[current_ + 1]; k++)
        if (!pinned_[p.uses[k].buf] && slot_of_[p.uses[k].buf] < 0) need_.push_back(k);
    auto by_class = [&](int x, int y) { return c.of_buf[p.uses[x].buf] > c.of_buf[p.uses[y].buf]; };
    std::stable_sort(need_.begin(), need_.end(), by_class);
}

// Places need_[q]; false when it found no slot and the placement must start
// again without spans.
bool Scheduler::place_operand(const Prepared &p, const Classes &c, const Layout &layout, int i, size_t q,
                              SwapPolicy policy, Schedule &out) {
    const NodeId n = current_;
    const Use &u = p.uses[need_[q]];
    const int b = u.buf, cls = c.of_buf[b];
    if (slot_of_[b] >= 0) return true;  // placed by a recomputation of another one
    int s = acquire(p, cls, i, i, policy, out);
    if (s < 0 && !spans_off_) {
        unplace_for_restart(p, c, i, out);
        return false;
    }
    if (s < 0) s = move_smaller(p, c, i, q, cls, out);
    // Slots that recomputations took for their inputs can leave none.
    if (s < 0 && !layout.recompute.empty()) infeasible();
    TESSERA_INTERNAL_ASSERT(s >= 0, "no slot for a buffer of node ", n);
    placed_at_[b] = i;
    if (u.read) {
        bring_in(p, c, b, s, i, policy, out);
        return true;
    }
    wait_for_region(out, s, slot_swapout_, &pending_deps_);
    wait_for_region(out, s, slot_pending_in_, &pending_deps_);
    slot_of_[b] = s;
    occupy(s, b);
    resid_swapin_[b] = resid_swapout_[b] = resid_last_compute_[b] = -1;
    if (p.bufs[b].producer == n && out.produce_at[b] < 0) out.produce_at[b] = slot_offset_[s];
    return true;
}

// An operand in a span of smaller slots takes several of them, which can
// leave another operand no slot. Every operand placed for this operator,
// and every one in a span, leaves its slot (one placed only to be written
// is simply unplaced); the placement starts again without spans, as with
// whole slots and pieces, where Hall's condition on the pools holds.
void Scheduler::unplace_for_restart(const Prepared &p, const Classes &c, int i, Schedule &out) {
    spans_off_ = true;
    for (int k = p.use_begin[current_]; k < p.use_begin[current_ + 1]; k++) {
        const int a = p.uses[k].buf, s = slot_of_[a];
        if (s < 0 || pinned_[a] || a == handed_to_ || (placed_at_[a] != i && !is_span(s))) continue;
        if (placed_at_[a] == i && !p.uses[k].read) {
            if (p.bufs[a].producer == current_ && out.produce_at[a] == slot_offset_[s]) out.produce_at[a] = -1;
            vacate(s);
            slot_of_[a] = -1;
        } else {
            release(p, a, out);
        }
        placed_at_[a] = -1;
    }
    queue_operands(p, c);
}

// Queues use k of the current operator to be placed after need_[q], among
// those of its class.
void Scheduler::requeue(const Prepared &p, const Classes &c, size_t q, int k) {
    auto by_class = [&](int x, int y) { return c.of_buf[p.uses[x].buf] > c.of_buf[p.uses[y].buf]; };
    need_.insert(std::upper_bound(need_.begin() + static_cast<std::ptrdiff_t>(q) + 1, need_.end(), k, by_class), k);
}

// When every whole slot big enough holds a buffer this operator uses, one
// of them holds only smaller buffers placed before this operator: they move
// (through host memory) and go back to the queue. Hall's condition on the
// pools guarantees this ends with everything placed.
int Scheduler::move_smaller(const Prepared &p, const Classes &c, int i, size_t q, int cls, Schedule &out) {
    const int nc = static_cast<int>(c.bytes.size());
    for (int t = class_begin_[cls]; t < class_begin_[nc]; t++) {
        const std::vector<int> &in_t = occupants(t);
        if (std::any_of(in_t.begin(), in_t.end(), [&](int a) { return c.of_buf[a] >= cls || placed_at_[a] == i; }))
            continue;
        for (int a : std::vector<int>(in_t)) {
            release(p, a, out);
            for (int k = p.use_begin[current_]; k < p.use_begin[current_ + 1]; k++)
                if (p.uses[k].buf == a) requeue(p, c, q, k);
        }
        return t;
    }
    return -1;
}

// The operator at position i on the device: its operands placed, its compute
// step, then the buffers it used for the last time freed (vDNN: its
// offloaded activations sent out, the next operator's prefetched).
void Scheduler::run_operator(const Prepared &p, const std::vector<NodeId> &order, const Classes &c,
                             const Layout &layout, int i, SwapPolicy policy, Schedule &out) {
    const NodeId node = order[i];
    current_ = node;
    const int ub = p.use_begin[node], ue = p.use_begin[node + 1];
    for (int k = ub; k < ue; k++) stamp_[p.uses[k].buf] = i;
    place_operands(p, c, layout, i, policy, out);
    int cs = emit(out, SwapStep::Kind::Compute, i, node, -1, -1);
    for (int d : pending_deps_) dep(out, d);
    expect_waits_backward(out);
    compute_step_[i] = cs;
    for (int k = ub; k < ue; k++) {
        const Use &u = p.uses[k];
        int b = u.buf;
        last_use_pos_[b] = touch_[b] = i;
        use_ptr_[b]++;
        if (u.write) {
            last_write_pos_[b] = i;
            last_write_step_[b] = cs;
            host_valid_[b] = 0;
        }
        if (!pinned_[b]) resid_last_compute_[b] = cs;
    }
    for (int k = ub; k < ue; k++) {
        const Use &u = p.uses[k];
        int b = u.buf;
        if (pinned_[b] || slot_of_[b] < 0) continue;
        if (use_ptr_[b] == use_end_[b]) {
            release(p, b, out);
        } else if (offloaded_[b]) {
            if (u.write && !host_valid_[b]) swap_out(p, b, out);
            if (i == last_fwd_[b]) release(p, b, out);
        }
    }
    if (policy == SwapPolicy::Vdnn && i + 1 < n_) prefetch_next(p, c, order[i + 1], i, policy, out);
}

// vDNN's prefetch: the next operator's offloaded activations start coming in
// once the operator before it (at position i) is done.
void Scheduler::prefetch_next(const Prepared &p, const Classes &c, NodeId next, int i, SwapPolicy policy,
                              Schedule &out) {
    for (int k = p.use_begin[next]; k < p.use_begin[next + 1]; k++) stamp_[p.uses[k].buf] = i + 1;
    for (int k = p.use_begin[next]; k < p.use_begin[next + 1]; k++) {
        int b = p.uses[k].buf;
        if (!offloaded_[b] || slot_of_[b] >= 0 || !p.uses[k].read) continue;
        int s = acquire(p, c.of_buf[b], i, i, policy, out);
        if (s >= 0) swap_in(p, b, s, i, policy, out);
    }
}

// Issue order: a counting sort by (key, swaps before the compute stream's
// steps), stable in generation order.
void Scheduler::order_issue(Schedule &out) {
    int nkeys = 2 * n_ + 4;
    std::vector<int> &count = pending_deps_;
    count.assign(nkeys + 1, 0);
    auto on_compute = [](const IStep &s) { return swap_step_stream(s.kind) == 0; };
    for (const IStep &s : out.steps) count[2 * s.key + on_compute(s) + 1]++;
    for (int k = 0; k < nkeys; k++) count[k + 1] += count[k];
    out.issue.resize(out.steps.size());
    for (size_t g = 0; g < out.steps.size(); g++) {
        const IStep &s = out.steps[g];
        out.issue[count[2 * s.key + on_compute(s)]++] = static_cast<int>(g);
    }
}

void Scheduler::run(const Prepared &p, const std::vector<NodeId> &order, const Classes &c, const Layout &layout,
                    SwapPolicy policy, Schedule &out) {
    reset(p, order, c, layout, policy, out);
    for (int i = 0; i < n_; i++) {
        if (layout.on_host(order[i])) host_update(p, i, order[i], out);
        else run_operator(p, order, c, layout, i, policy, out);
    }
    for (size_t b = 0; b < p.bufs.size(); b++)
        TESSERA_INTERNAL_ASSERT(slot_of_[b] < 0 || !p.bufs[b].persistent, "host-homed buffer ", b,
                                " ends the step on the device");
    order_issue(out);
}

}  // namespace tessera::swap_detail
