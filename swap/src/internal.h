// Private to swap/: the planner's prepared problem, the swap scheduler and the
// fast simulator that the genetic algorithm calls once per candidate.
//
// A "buffer" is a storage root that the order touches (or any persistent
// root: those need a home even when untouched). Positions index the order of
// the candidate being scheduled; uses are stored per NodeId so that
// reordering needs no rebuilding.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/align.h"
#include "tessera/graph/graph.h"
#include "tessera/swap/swap_plan.h"
#include "tessera/swap/swap_program.h"

namespace tessera::swap_detail {

// What a buffer of `raw` bytes occupies in a slot or the pinned area.
inline int64_t buffer_bytes(int64_t raw) { return std::max(align_up(raw, kSwapAlignment), kSwapAlignment); }

struct Buffer {
    TensorId root = kNoTensor;
    int64_t bytes = 0;        // aligned to kSwapAlignment: what a slot or the pinned area holds
    int64_t raw_bytes = 0;    // what a swap moves
    bool persistent = false;  // lives across steps: pinned, or homed in host memory
    bool initial = false;     // holds a value when the step starts (a graph input)
    NodeId producer = kNoNode;  // the root's producer when it is in the order
    int uses = 0;             // nodes of the order that touch it
};

struct Use {
    int buf = 0;
    bool read = false;
    bool write = false;
};

// How non-pinned buffers map to pool slots: class c holds slots of
// bytes[c] (ascending); buffer b has class of_buf[b] (-1: never in a pool) and
// may occupy a slot of that class or of any larger one.
struct Classes {
    std::vector<int64_t> bytes;
    std::vector<int> of_buf;
};

// The facts about one problem that no candidate changes.
struct Prepared {
    const Graph *g = nullptr;
    std::vector<NodeId> order;          // as given
    std::vector<double> node_time;      // per NodeId
    // Per NodeId: the node may run on the host (an optimizer node whose
    // outputs all update persistent tensors in place, with a host time), and
    // that time. host_nodes lists them in order.
    std::vector<uint8_t> host_ok;
    std::vector<double> host_time;
    std::vector<NodeId> host_nodes;
    // Per NodeId: runs on the host in every candidate (host updates "all", or
    // a node whose operands cannot fit the budget on the device).
    std::vector<uint8_t> host_fixed;
    // The buffers that may be dropped and recomputed (SwapOptions::recompute):
    // forward activations whose producer has that one output of its own.
    std::vector<int> recompute_bufs;
    std::vector<uint8_t> recomputable;  // per buffer: one of recompute_bufs
    // Per NodeId: the buffers of inputs whose slot the node's output may
    // take when the node reads them for the last time (an element-wise
    // operator, input and output of one size); -1: none.
    std::vector<std::array<int, 2>> overwrites;
    int64_t budget = 0;
    double h2d = 0, d2h = 0;
    std::vector<Buffer> bufs;
    std::vector<int> buf_of_tensor;     // per TensorId: the buffer of its root, or -1
    std::vector<int> use_begin;         // per NodeId + 1: CSR into uses (empty for nodes not in the order)
    std::vector<Use> uses;
    std::vector<int> buf_use_begin;     // per buffer + 1: CSR sized by Buffer::uses
    std::vector<uint8_t> fwd_node;      // per NodeId: neither backward nor optimizer (vDNN's forward pass)
    Classes classes;                    // size classes of the buffers that may live in pools
    // Homes fixed by SwapProblem::homes_from: offsets per buffer (-1: host-homed).
    bool fixed_homes = false;
    std::vector<int64_t> fixed_pin;
    int64_t fixed_pinned_bytes = 0;
    std::vector<int> pin_rank;          // persistent buffers, most uses per byte first
    double ideal_time = 0;
    // Dependencies between positions of the given order that any reordering
    // keeps: data flow, in-place writes against other accesses of the same
    // storage, and communication nodes in their relative order.
    std::vector<int> pred_begin, preds;  // CSR per position of `order`
};

// Validates `problem` and builds the prepared form. Throws tessera::Error for
// malformed inputs and, with check_budget, for a budget below some operator's
// working set (not counting the nodes fixed on the host). Host updates need
// the advisor and host times. Without check_budget (the least budget), every
// node that may run on the host counts as fixed there. Size classes are left
// to pick_classes().
Prepared prepare(const SwapProblem &problem, SwapPolicy policy, bool check_budget, HostUpdates host = HostUpdates::Off);

// Chooses p.classes so that the smallest pools fit the budget; false when no
// choice does. `smallest` gets the least budget any tried choice needs.
bool pick_classes(Prepared &p, int64_t *smallest);

// The working set of node n: aligned bytes by storage root, plus the fixed
// pinned bytes with homes_from.
int64_t working_set(const Prepared &p, NodeId n);
// The largest working set of one operator of the order that runs on the
// device (not host_fixed); `worst` gets its node.
int64_t largest_working_set(const Prepared &p, NodeId *worst);

// One candidate's memory layout.
struct Layout {
    std::vector<int64_t> pin;   // per buffer: arena offset when pinned, else -1
    int64_t pinned_bytes = 0;
    std::vector<int> slots;     // per class
    // Per NodeId: run on the host (only where Prepared::host_ok); empty: none.
    // The buffers such a node uses are never pinned.
    std::vector<uint8_t> host;
    bool on_host(NodeId n) const { return !host.empty() && host[n]; }
    // Per buffer: dropped rather than swapped out when evicted dirty, and
    // recomputed before its next use; empty: none.
    std::vector<uint8_t> recompute;
    // Slots also offer pieces to smaller buffers, and adjacent slots spans
    // to larger ones (Scheduler::reset_slots; the advisor only).
    bool split = false;
};

// A candidate whose recomputations cannot run: a producer's input changed
// since it ran, is gone, or finds no slot. `blame` is the buffer of the
// layout's recompute bits to clear first (the innermost one being recomputed,
// else the last one recomputed; -1: none). The search repairs such a
// candidate by clearing that bit; plans without recomputation never throw it.
struct RecomputeInfeasible {
    int blame = -1;
};

// The fewest slots per class that let every operator of the order run, given
// which buffers are pinned: since a buffer fits any larger slot, for every
// class c the slots of classes >= c must number at least the operator's
// buffers of classes >= c (Hall's condition for nested choices), and the
// fewest bytes take each slot as small as that allows.
// Nodes run on the host (`host`, per NodeId, may be null) need no slots.
std::vector<int> min_slots(const Prepared &p, const Classes &c, const std::vector<int64_t> &pin,
                           const std::vector<uint8_t> *host = nullptr);
// Bytes of pools of `slots`.
int64_t pool_bytes(const Classes &c, const std::vector<int> &slots);

// Pins persistent buffers in pin_rank order while the pinned bytes stay within
// `cap` (or takes the fixed homes); never one that a node of layout.host uses.
void choose_pins(const Prepared &p, int64_t cap, Layout &layout);
// Fills layout.slots: each class its minimum, then the remaining pool bytes
// split in proportion to `weights`, capped at the buffers a class can hold.
void split_pools(const Prepared &p, const Classes &c, const std::vector<double> &weights, Layout &layout);
// The per-class demand (bytes of the class's non-pinned buffers): the seed weights.
std::vector<double> demand_weights(const Prepared &p, const Classes &c, const std::vector<int64_t> &pin);
// The most bytes persistent buffers may take when pools need their minimum.
int64_t max_pinnable(const Prepared &p, const Classes &c);

// A compact schedule: steps in generation order with an issue key; sorting by
// (key, swaps before computes, generation) gives the issue order, in which
// every dependency comes first.
struct IStep {
    SwapStep::Kind kind = SwapStep::Kind::Compute;
    int key = 0;
    int node = kNoNode;   // Compute
    int buf = -1;         // SwapOut, SwapIn
    int64_t offset = -1;
    int dep_begin = 0, dep_end = 0;  // into Schedule::deps (generation indices)
};

struct Schedule {
    std::vector<IStep> steps;
    std::vector<int> deps;
    std::vector<int> issue;             // generation indices in issue order
    std::vector<int64_t> produce_at;    // per buffer, -1 when not produced into a slot
    std::vector<uint8_t> moved;         // per buffer: any swap step
    std::vector<int64_t> pool_offset;   // per class
    int64_t swap_in_bytes = 0, swap_out_bytes = 0;
};

// Runs the swap scheduler for one order, class map and layout under `policy`
// (Advisor: Belady eviction and early prefetch; Lru and Vdnn: see
// swap_plan.h). Reuses its buffers between calls: one per thread.
class Scheduler {
public:
    void run(const Prepared &p, const std::vector<NodeId> &order, const Classes &c, const Layout &layout,
             SwapPolicy policy, Schedule &out);

private:
    int acquire(const Prepared &p, int cls, int pos, int protect_stamp, SwapPolicy policy, Schedule &out);
    void release(const Prepared &p, int b, Schedule &out);  // the slot of b becomes free
    int emit(Schedule &out, SwapStep::Kind kind, int key, int node, int buf, int64_t offset);
    // A read buffer b not on the device into slot s: swapped in, or recomputed
    // when it was dropped.
    void bring_in(const Prepared &p, const Classes &c, int b, int s, int pos, SwapPolicy policy, Schedule &out);
    void recompute(const Prepared &p, const Classes &c, int b, int s, int pos, SwapPolicy policy, Schedule &out);
    void hold_inputs(const Prepared &p, int b, int delta);
    [[noreturn]] void infeasible() const;
    void dep(Schedule &out, int step);
    // The step just emitted must not wait for a step issued after it.
    void expect_waits_backward(const Schedule &out) const;
    int swap_out(const Prepared &p, int b, Schedule &out);
    void swap_in(const Prepared &p, int b, int slot, int pos, SwapPolicy policy, Schedule &out);
    void host_update(const Prepared &p, int pos, NodeId node, Schedule &out);
    void reset(const Prepared &p, const std::vector<NodeId> &order, const Classes &c, const Layout &layout,
               SwapPolicy policy, Schedule &out);
    void reset_slots(const Classes &c, const Layout &layout, bool split, Schedule &out);
    void add_pieces(const Classes &c, int s);
    void add_spans(const Classes &c, int k);
    void link_overlaps();
    int64_t eviction_score(int v, SwapPolicy policy) const;
    const std::vector<int> &occupants(int s);
    int free_slot(int k) const;
    bool is_span(int s) const { return slot_whole_[s] == s && s >= class_begin_.back(); }  // else whole or a piece
    void requeue(const Prepared &p, const Classes &c, size_t q, int k);
    void queue_operands(const Prepared &p, const Classes &c);
    bool place_operand(const Prepared &p, const Classes &c, const Layout &layout, int i, size_t q, SwapPolicy policy,
                       Schedule &out);
    void unplace_for_restart(const Prepared &p, const Classes &c, int i, Schedule &out);
    int move_smaller(const Prepared &p, const Classes &c, int i, size_t q, int cls, Schedule &out);
    int slot_to_evict(int k, int protect_from, SwapPolicy policy) const;
    void hand_over_slot(const Prepared &p, int i, Schedule &out);
    void wait_for_region(Schedule &out, int s, const std::vector<int> &history, std::vector<int> *into = nullptr);
    void occupy(int s, int b);
    void vacate(int s);
    void mark_offloaded(const Prepared &p, const std::vector<NodeId> &order, SwapPolicy policy);
    void place_operands(const Prepared &p, const Classes &c, const Layout &layout, int i, SwapPolicy policy,
                        Schedule &out);
    void run_operator(const Prepared &p, const std::vector<NodeId> &order, const Classes &c, const Layout &layout,
                      int i, SwapPolicy policy, Schedule &out);
    void prefetch_next(const Prepared &p, const Classes &c, NodeId next, int i, SwapPolicy policy, Schedule &out);
    void order_issue(Schedule &out);

    // Per position of the order being scheduled.
    std::vector<int> compute_step_;
    // Per buffer.
    std::vector<int> use_pos_, use_ptr_, use_end_;
    // last_write_pos_: the position of the last compute that wrote the buffer;
    // last_write_step_: the step that wrote its device copy (that compute, or
    // a recomputation since).
    std::vector<int> slot_of_, stamp_, touch_, last_use_pos_, last_write_pos_, last_write_step_;
    std::vector<int> resid_swapin_, resid_swapout_, resid_last_compute_, min_key_;
    // The latest step that wrote the host copy (a swap-out or a host update)
    // and the latest swap-in that read it.
    std::vector<int> last_swapout_step_, last_swapin_step_;
    std::vector<int> first_bwd_, last_fwd_, placed_at_;
    std::vector<int> need_;  // buffers the current operator still needs placed
    std::vector<uint8_t> host_valid_, pinned_, offloaded_;
    // Per buffer: the layout's recompute bit; dropped now (kHeldDrop: chosen
    // by the layout, its producer's inputs held until it is recomputed;
    // kFreedDrop: a buffer of Prepared::recomputable freed after its last
    // use, which a recomputation of a buffer it feeds may run again, if its
    // own inputs are still there or can be brought back).
    static constexpr uint8_t kHeldDrop = 1, kFreedDrop = 2;
    std::vector<uint8_t> may_drop_, dropped_;
    bool recompute_on_ = false;  // the layout allows recomputation at all
    // The buffers being recomputed, outermost first, and the last one of the
    // layout's recompute bits recomputed: whom infeasible() blames.
    std::vector<int> recomputing_;
    int last_recomputed_ = -1;
    std::vector<int> held_;                    // per buffer: dropped buffers whose producer reads it
    std::vector<int> node_pos_;                // per NodeId: position in the order being scheduled
    // Per slot: the pools' whole slots first (class_begin_ indexes them by
    // class), then pieces and spans. slot_whole_: the whole slot a piece is
    // part of (a whole slot or a span: itself); cover_: occupied slots among
    // it and those overlapping it (0: free); overlap_: CSR of the slots
    // overlapping each.
    static constexpr int64_t kMaxPieces = 4;
    // region_ready_: the key from which its memory is free (the latest of its
    // past occupants' and of those of the slots overlapping it).
    std::vector<int> occ_, cover_, slot_whole_, slot_last_compute_, slot_swapout_, slot_pending_in_, region_ready_;
    std::vector<int64_t> slot_offset_, slot_bytes_;
    std::vector<int> class_begin_, overlap_begin_, overlap_;
    std::vector<std::vector<int>> pieces_;  // per class: its pieces of larger slots and spans of smaller ones
    bool spans_off_ = false;  // for the rest of the current operator's placement
    std::vector<int> occupants_, by_offset_, overlap_count_;
    std::vector<std::pair<int, int>> overlap_pairs_;
    std::vector<int> pending_deps_;  // for the compute step being built
    int last_swapin_key_ = 0;
    int n_ = 0;
    NodeId current_ = kNoNode;  // the operator being placed
    int handed_to_ = -1;         // the current operator's output in the slot of an input it overwrites
    bool overwrite_on_ = false;  // outputs may take their inputs' slots (the advisor's split layouts)
};

// Runs the advisor's scheduler; where the layout's recomputations cannot run,
// clears the recompute bit the scheduler blames and runs again, at most
// max_repairs times. Returns whether the last run made a schedule; `cleared`
// (may be null) gets the buffers whose bits it cleared, in order.
bool schedule_repairing(Scheduler &sched, const Prepared &p, const std::vector<NodeId> &order, const Classes &c,
                        Layout &layout, int max_repairs, Schedule &out, std::vector<int> *cleared);

// Simulates a compact schedule: the iteration time.
double simulate_schedule(const Prepared &p, Schedule &s, std::vector<double> &end_scratch);

// Turns a schedule into a SwapPlan with simulated times and statistics.
SwapPlan make_plan(const Prepared &p, const std::vector<NodeId> &order, const Classes &c, const Layout &layout,
                   SwapPolicy policy, const Schedule &s);

// Fills each step's start and end, time_s, high_water, peak_bytes and the swap
// byte counts of `plan`, replaying its steps.
void finalize_plan(const Graph &g, SwapPlan &plan, const std::vector<double> &node_time, double h2d, double d2h);

// Size classes: distinct sizes of the buffers that may go to pools, merged
// while rounding up wastes at most `tolerance` (0.25 = 25%), then merged
// further until at most `max_classes` remain. tolerance < 0: exact sizes.
Classes make_classes(const Prepared &p, double tolerance, int max_classes);

// check_swap_plan's first half: the plan's own shape (check_plan.cpp).
void check_swap_plan_shape(const Graph &g, const SwapPlan &plan, const std::string &source);
// build_swap_run without its checks (swap_program.cpp).
SwapRun assemble_swap_run(const Graph &g, const SwapPlan &train, const SwapPlan *forward);

}  // namespace tessera::swap_detail
