// The scheduler's slots: the pools' whole slots, the pieces a slot offers
// smaller buffers and the spans adjacent slots offer larger ones (the
// advisor only), which slots overlap, which are free, which to evict, and
// what a new occupant waits for. The scheduler itself is in schedule.cpp.
#include <algorithm>
#include <limits>
#include <utility>

#include "internal.h"

namespace tessera::swap_detail {

// Slots: pools from pinned_bytes upwards, the largest class first; all free.
// With `split`, a slot also offers pieces (add_pieces) and adjacent slots
// spans (add_spans), each overlapping the slots it shares bytes with. A
// buffer in a piece leaves the rest of the slot to others, and one in a span
// needs no slot of its own size (SwapAdvisor's pools give a buffer one whole
// slot).
void Scheduler::reset_slots(const Classes &c, const Layout &layout, bool split, Schedule &out) {
    int nc = static_cast<int>(c.bytes.size());
    class_begin_.assign(nc + 1, 0);
    for (int k = 0; k < nc; k++) class_begin_[k + 1] = class_begin_[k] + layout.slots[k];
    const int ns = class_begin_[nc];
    slot_offset_.resize(ns);
    slot_bytes_.resize(ns);
    slot_whole_.resize(ns);
    pieces_.assign(nc, {});
    out.pool_offset.assign(nc, 0);
    int64_t at = layout.pinned_bytes;
    for (int k = nc - 1; k >= 0; k--) {
        out.pool_offset[k] = at;
        for (int s = class_begin_[k]; s < class_begin_[k + 1]; s++) {
            slot_offset_[s] = at + (s - class_begin_[k]) * c.bytes[k];
            slot_bytes_[s] = c.bytes[k];
            slot_whole_[s] = s;
        }
        at += layout.slots[k] * c.bytes[k];
    }
    for (int s = 0; s < ns && split; s++) add_pieces(c, s);
    for (int k = 0; k < nc && split; k++) add_spans(c, k);
    link_overlaps();
    const size_t all = slot_offset_.size();
    occ_.assign(all, -1);
    cover_.assign(all, 0);
    slot_last_compute_.assign(all, -1);
    slot_swapout_.assign(all, -1);
    slot_pending_in_.assign(all, -1);
    region_ready_.assign(all, 0);
}

// The pieces of whole slot s: for each smaller class of at least 1 /
// kMaxPieces its size, as many slots of that class as fit in it.
void Scheduler::add_pieces(const Classes &c, int s) {
    for (int j = 0; j < static_cast<int>(c.bytes.size()); j++) {
        const int64_t n = slot_bytes_[s] / c.bytes[j];
        if (n < 2 || n > kMaxPieces) continue;
        for (int64_t i = 0; i < n; i++) {
            slot_offset_.push_back(slot_offset_[s] + i * c.bytes[j]);
            slot_bytes_.push_back(c.bytes[j]);
            slot_whole_.push_back(s);
            pieces_[j].push_back(static_cast<int>(slot_offset_.size()) - 1);
        }
    }
}

// Spans: for each larger class, as many adjacent whole slots of class k as
// hold one buffer of it (at most kMaxPieces), at every whole slot a run of
// them starts at.
void Scheduler::add_spans(const Classes &c, int k) {
    for (int j = k + 1; j < static_cast<int>(c.bytes.size()); j++) {
        const int64_t n = (c.bytes[j] + c.bytes[k] - 1) / c.bytes[k];
        if (n < 2 || n > kMaxPieces) continue;
        for (int s = class_begin_[k]; s + n <= class_begin_[k + 1]; s++) {
            slot_offset_.push_back(slot_offset_[s]);
            slot_bytes_.push_back(c.bytes[j]);
            slot_whole_.push_back(static_cast<int>(slot_whole_.size()));
            pieces_[j].push_back(static_cast<int>(slot_offset_.size()) - 1);
        }
    }
}

// overlap_: per slot, the other slots that share bytes with it.
void Scheduler::link_overlaps() {
    const int all = static_cast<int>(slot_offset_.size());
    by_offset_.resize(all);
    for (int u = 0; u < all; u++) by_offset_[u] = u;
    std::sort(by_offset_.begin(), by_offset_.end(), [&](int a, int b) { return slot_offset_[a] < slot_offset_[b]; });
    overlap_count_.assign(all, 0);
    overlap_pairs_.clear();
    for (int x = 0; x < all; x++) {
        const int u = by_offset_[x];
        for (int y = x + 1; y < all && slot_offset_[by_offset_[y]] < slot_offset_[u] + slot_bytes_[u]; y++) {
            overlap_pairs_.push_back({u, by_offset_[y]});
            overlap_count_[u]++;
            overlap_count_[by_offset_[y]]++;
        }
    }
    overlap_begin_.assign(all + 1, 0);
    for (int u = 0; u < all; u++) overlap_begin_[u + 1] = overlap_begin_[u] + overlap_count_[u];
    overlap_.resize(overlap_begin_[all]);
    for (int u = 0; u < all; u++) overlap_count_[u] = overlap_begin_[u];
    for (auto [u, v] : overlap_pairs_) {
        overlap_[overlap_count_[u]++] = v;
        overlap_[overlap_count_[v]++] = u;
    }
}

// A free slot of class k, or -1: a whole slot, else a piece of a slot
// already partly taken (it fills a hole), else a piece of an empty one (it
// splits a slot); among equals, the one whose memory is free first.
int Scheduler::free_slot(int k) const {
    int best = -1;
    for (int s = class_begin_[k]; s < class_begin_[k + 1]; s++)
        if (cover_[s] == 0 && (best < 0 || region_ready_[s] < region_ready_[best])) best = s;
    if (best >= 0) return best;
    int best_rank = 0;
    for (int s : pieces_[k]) {
        if (cover_[s] != 0 || (spans_off_ && is_span(s))) continue;
        const int rank = cover_[slot_whole_[s]] > 0 ? 0 : 1;
        if (best < 0 || rank < best_rank || (rank == best_rank && region_ready_[s] < region_ready_[best])) {
            best = s;
            best_rank = rank;
        }
    }
    return best;
}

// The slot of class k whose occupants (it and those overlapping it) all may
// be evicted and go best: the highest score of the worst of them, then the
// fewest; -1 when none.
int Scheduler::slot_to_evict(int k, int protect_from, SwapPolicy policy) const {
    int best = -1, best_victims = 0;
    int64_t best_score = std::numeric_limits<int64_t>::min();
    auto consider = [&](int s) {
        int64_t score = std::numeric_limits<int64_t>::max();
        int victims = 0;
        auto weigh = [&](int v) {
            if (v < 0) return true;
            if (stamp_[v] >= protect_from) return false;
            victims++;
            score = std::min(score, eviction_score(v, policy));
            return true;
        };
        bool evictable = weigh(occ_[s]);
        for (int q = overlap_begin_[s]; evictable && q < overlap_begin_[s + 1]; q++) evictable = weigh(occ_[overlap_[q]]);
        if (!evictable || victims == 0) return;
        if (score > best_score || (score == best_score && victims < best_victims)) {
            best_score = score;
            best = s;
            best_victims = victims;
        }
    };
    for (int s = class_begin_[k]; s < class_begin_[k + 1]; s++) consider(s);
    for (int s : pieces_[k])
        if (occ_[slot_whole_[s]] < 0 && !(spans_off_ && is_span(s))) consider(s);  // else as the whole slot
    return best;
}

// Which occupant goes first: Belady's furthest next use (clean copies first
// among equals) for the advisor, the least recently used otherwise.
int64_t Scheduler::eviction_score(int v, SwapPolicy policy) const {
    if (policy != SwapPolicy::Advisor) return -static_cast<int64_t>(touch_[v]);
    int64_t next = use_ptr_[v] < use_end_[v] ? use_pos_[use_ptr_[v]] : std::numeric_limits<int>::max();
    return next * 2 + host_valid_[v];
}

// The buffers in slot s or in a slot that overlaps it (a piece of it, or
// the slot it is a piece of), in occupants_ (valid until the next call).
const std::vector<int> &Scheduler::occupants(int s) {
    occupants_.clear();
    if (occ_[s] >= 0) occupants_.push_back(occ_[s]);
    for (int k = overlap_begin_[s]; k < overlap_begin_[s + 1]; k++)
        if (occ_[overlap_[k]] >= 0) occupants_.push_back(occ_[overlap_[k]]);
    return occupants_;
}

// The last steps that read or wrote slot s's memory, from `history` (one of
// the per-slot step arrays), for s and every slot that overlaps it: what a
// new occupant waits for.
void Scheduler::wait_for_region(Schedule &out, int s, const std::vector<int> &history, std::vector<int> *into) {
    auto add = [&](int step) {
        if (into) into->push_back(step);
        else dep(out, step);
    };
    add(history[s]);
    for (int k = overlap_begin_[s]; k < overlap_begin_[s + 1]; k++) add(history[overlap_[k]]);
}

void Scheduler::occupy(int s, int b) {
    occ_[s] = b;
    cover_[s]++;
    for (int k = overlap_begin_[s]; k < overlap_begin_[s + 1]; k++) cover_[overlap_[k]]++;
}

void Scheduler::vacate(int s) {
    occ_[s] = -1;
    cover_[s]--;
    for (int k = overlap_begin_[s]; k < overlap_begin_[s + 1]; k++) cover_[overlap_[k]]--;
}

}  // namespace tessera::swap_detail
