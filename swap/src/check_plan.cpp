// check_swap_plan: a check of a swap plan that trusts nothing the planner
// computed. It has two halves:
//   - the plan's own shape, which no program shows: one entry per tensor,
//     pools inside the arena and apart, pinned tensors that are persistent
//     roots and do not overlap, every arena placement inside one pool,
//     swaps of roots with their true sizes, waits for earlier steps
//     only, and the steps computing the plan's order;
//   - residency and races, which are the program's: the plan becomes the
//     program the executor would run (build_swap_run's), and the one verifier
//     of programs (program/verify.h) replays it, naming the plan's steps.
#include <algorithm>
#include <utility>

#include "internal.h"
#include "tessera/error.h"
#include "tessera/program/verify.h"
#include "tessera/swap/swap_program.h"

namespace tessera {

namespace {

// What the structural checks share: the plan, its graph, each root's bytes.
struct PlanFacts {
    const Graph &g;
    const SwapPlan &plan;
    const std::string &source;
    std::vector<TensorId> root;
    std::vector<int64_t> raw, bytes;  // per root: what a copy moves, what a slot holds

    PlanFacts(const Graph &graph, const SwapPlan &p, const std::string &src)
        : g(graph), plan(p), source(src), root(graph.num_tensors()), raw(graph.num_tensors(), 0),
          bytes(graph.num_tensors(), 0) {
        for (TensorId t = 0; t < g.num_tensors(); t++) {
            root[t] = storage_root(g, t);
            raw[root[t]] = std::max(raw[root[t]], g.tensor(t).type.bytes());
        }
        for (TensorId t = 0; t < g.num_tensors(); t++) bytes[t] = swap_detail::buffer_bytes(raw[t]);
    }
    std::string name(TensorId t) const { return "'" + g.tensor(t).name + "'"; }
    // Whether `need` bytes at `off` lie inside one pool, at a multiple of
    // kSwapAlignment (a whole slot, a piece of one, or adjacent slots).
    bool is_slot(int64_t off, int64_t need) const {
        for (const SwapPool &p : plan.pools)
            if (off >= p.offset && off < p.offset + p.slots * p.slot_bytes)
                return (off - p.offset) % kSwapAlignment == 0 && off + need <= p.offset + p.slots * p.slot_bytes;
        return false;
    }
};

void check_sizes(const PlanFacts &f) {
    const SwapPlan &plan = f.plan;
    const size_t nt = static_cast<size_t>(f.g.num_tensors());
    TESSERA_CHECK(plan.pinned.size() == nt && plan.produce_at.size() == nt && plan.swapped.size() == nt, f.source,
                  ": pinned, produce_at and swapped need one entry per tensor (", nt, "), got ", plan.pinned.size(),
                  ", ", plan.produce_at.size(), " and ", plan.swapped.size(), "; was the plan made for another graph?");
    TESSERA_CHECK(plan.pinned_bytes >= 0 && plan.pinned_bytes <= plan.arena_bytes, f.source, ": pinned_bytes ",
                  plan.pinned_bytes, " is outside the arena of ", plan.arena_bytes, " bytes");
}

// Pools: inside the arena, above the pinned area, apart from each other.
void check_pools(const PlanFacts &f) {
    const SwapPlan &plan = f.plan;
    std::vector<std::pair<int64_t, int64_t>> areas;
    for (size_t k = 0; k < plan.pools.size(); k++) {
        const SwapPool &p = plan.pools[k];
        TESSERA_CHECK(p.slot_bytes > 0 && p.slot_bytes % kSwapAlignment == 0 && p.slots >= 0, f.source, ": pool ", k,
                      " has slot_bytes ", p.slot_bytes, " and ", p.slots, " slots; slots must be a positive multiple of ",
                      kSwapAlignment, " bytes");
        int64_t end = p.offset + p.slots * p.slot_bytes;
        TESSERA_CHECK(p.offset >= plan.pinned_bytes && end <= plan.arena_bytes, f.source, ": pool ", k, " spans [",
                      p.offset, ", ", end, "), outside [pinned_bytes ", plan.pinned_bytes, ", arena ", plan.arena_bytes,
                      ")");
        areas.push_back({p.offset, end});
    }
    std::sort(areas.begin(), areas.end());
    for (size_t k = 1; k < areas.size(); k++)
        TESSERA_CHECK(areas[k].first >= areas[k - 1].second, f.source, ": two pools overlap at offset ",
                      areas[k].first);
}

// Pinned tensors: persistent roots, inside [0, pinned_bytes), apart; every
// other persistent root lives in host memory.
void check_pins(const PlanFacts &f) {
    const SwapPlan &plan = f.plan;
    const std::vector<bool> persist = persistent_tensors(f.g);
    std::vector<std::pair<int64_t, TensorId>> pins;
    for (TensorId t = 0; t < f.g.num_tensors(); t++) {
        if (plan.pinned[t] < 0) {
            if (f.root[t] == t && persist[t])
                TESSERA_CHECK(plan.swapped[t], f.source, ": ", f.name(t),
                              " is persistent and not pinned, so it lives in host memory, but swapped is 0");
            continue;
        }
        TESSERA_CHECK(f.root[t] == t && persist[t], f.source, ": ", f.name(t),
                      " is pinned but is not a persistent storage root");
        TESSERA_CHECK(plan.pinned[t] + f.bytes[t] <= plan.pinned_bytes, f.source, ": pinned ", f.name(t),
                      " at offset ", plan.pinned[t], " ends beyond pinned_bytes ", plan.pinned_bytes);
        pins.push_back({plan.pinned[t], t});
    }
    std::sort(pins.begin(), pins.end());
    for (size_t k = 1; k < pins.size(); k++)
        TESSERA_CHECK(pins[k].first >= pins[k - 1].first + f.bytes[pins[k - 1].second], f.source, ": pinned ",
                      f.name(pins[k - 1].second), " and ", f.name(pins[k].second), " overlap");
}

std::string step_name(const PlanFacts &f, int i) {
    const SwapStep &s = f.plan.steps[i];
    std::string w = f.source + ": step " + std::to_string(i) + " (" + swap_step_kind_name(s.kind);
    const bool runs = s.kind == SwapStep::Kind::Compute || s.kind == SwapStep::Kind::HostUpdate ||
                      s.kind == SwapStep::Kind::Recompute;
    if (runs && s.node >= 0 && s.node < f.g.num_nodes()) w += " '" + f.g.node(s.node).call.name + "'";
    if (!runs && s.tensor >= 0 && s.tensor < f.g.num_tensors()) w += " " + f.name(s.tensor);
    return w + ")";
}

void check_swap_step(const PlanFacts &f, int i) {
    const SwapStep &s = f.plan.steps[i];
    TESSERA_CHECK(s.tensor >= 0 && s.tensor < f.g.num_tensors() && f.root[s.tensor] == s.tensor, step_name(f, i),
                  ": tensor ", s.tensor, " is not a storage root of the graph");
    const TensorId r = s.tensor;
    TESSERA_CHECK(f.plan.pinned[r] < 0, step_name(f, i), ": moves ", f.name(r), ", which is pinned");
    TESSERA_CHECK(s.bytes == f.raw[r], step_name(f, i), ": moves ", s.bytes, " bytes, but ", f.name(r), " has ",
                  f.raw[r]);
    TESSERA_CHECK(f.plan.swapped[r], step_name(f, i), ": moves ", f.name(r), ", but its swapped flag is 0");
    if (s.kind == SwapStep::Kind::SwapIn)
        TESSERA_CHECK(f.is_slot(s.offset, f.bytes[r]), step_name(f, i), ": offset ", s.offset,
                      " is not a place inside one pool for ", f.bytes[r], " bytes");
}

// A host update: an optimizer node, with a host time, whose operands are
// all in host memory (none pinned). The verifier checks the rest.
void check_host_update(const PlanFacts &f, int i) {
    const SwapStep &s = f.plan.steps[i];
    const Node &node = f.g.node(s.node);
    TESSERA_CHECK(node.optimizer && !node.comm, step_name(f, i), ": only optimizer updates run on the host");
    TESSERA_CHECK(static_cast<int>(f.plan.host_node_time_s.size()) == f.g.num_nodes(), step_name(f, i),
                  ": the plan has no host time for it (host_node_time_s has ", f.plan.host_node_time_s.size(),
                  " entries for ", f.g.num_nodes(), " nodes)");
    for (const auto *list : {&node.inputs, &node.outputs})
        for (TensorId t : *list)
            TESSERA_CHECK(f.plan.pinned[f.root[t]] < 0, step_name(f, i), ": runs on the host but ",
                          f.name(f.root[t]), " is pinned in the arena");
}

// A recomputation: a forward node of the order, run again, writing its one
// output (the step's tensor) to a slot that holds it.
void check_recompute_step(const PlanFacts &f, int i) {
    const SwapStep &s = f.plan.steps[i];
    TESSERA_CHECK(s.node >= 0 && s.node < f.g.num_nodes(), step_name(f, i), ": node ", s.node,
                  " is not a node of the graph");
    const Node &node = f.g.node(s.node);
    TESSERA_CHECK(node.outputs.size() == 1 && node.outputs[0] == s.tensor && f.root[s.tensor] == s.tensor,
                  step_name(f, i), ": recomputes tensor ", s.tensor, ", which is not the node's one output");
    TESSERA_CHECK(f.plan.pinned[s.tensor] < 0 && f.is_slot(s.offset, f.bytes[s.tensor]), step_name(f, i),
                  ": offset ", s.offset, " is not a place inside one pool for ", f.bytes[s.tensor], " bytes");
}

// A compute or host-update step: its node is the next of the order, and what
// a compute step produces afresh goes to a slot.
void check_compute_step(const PlanFacts &f, int i, size_t &next_compute) {
    const SwapStep &s = f.plan.steps[i];
    TESSERA_CHECK(s.node >= 0 && s.node < f.g.num_nodes(), step_name(f, i), ": node ", s.node,
                  " is not a node of the graph");
    TESSERA_CHECK(next_compute < f.plan.order.size() && f.plan.order[next_compute] == s.node, step_name(f, i),
                  ": computes out of the plan's order (expected position ", next_compute, ")");
    next_compute++;
    if (s.kind == SwapStep::Kind::HostUpdate) return check_host_update(f, i);
    for (TensorId t : f.g.node(s.node).outputs) {
        if (f.root[t] != t || f.plan.pinned[t] >= 0) continue;
        int64_t off = f.plan.produce_at[t];
        TESSERA_CHECK(off >= 0 && f.is_slot(off, f.bytes[t]), step_name(f, i), ": produces ", f.name(t),
                      " but its produce_at (", off, ") is not a place inside one pool for ", f.bytes[t], " bytes");
    }
}

void check_steps(const PlanFacts &f) {
    const SwapPlan &plan = f.plan;
    std::vector<char> seen(f.g.num_nodes(), 0);
    for (NodeId n : plan.order) {
        TESSERA_CHECK(n >= 0 && n < f.g.num_nodes() && !seen[n], f.source, ": the order holds node ", n,
                      " twice or it is not a node of the graph");
        seen[n] = 1;
    }
    size_t next_compute = 0;
    for (int i = 0; i < static_cast<int>(plan.steps.size()); i++) {
        for (int a : plan.steps[i].after)
            TESSERA_CHECK(a >= 0 && a < i, step_name(f, i), ": waits for step ", a, ", which is not an earlier step");
        SwapStep::Kind k = plan.steps[i].kind;
        if (k == SwapStep::Kind::Recompute) check_recompute_step(f, i);
        else if (k == SwapStep::Kind::Compute || k == SwapStep::Kind::HostUpdate) check_compute_step(f, i, next_compute);
        else check_swap_step(f, i);
    }
    TESSERA_CHECK(next_compute == plan.order.size(), f.source, ": the steps compute ", next_compute, " of the ",
                  plan.order.size(), " nodes of the order");
}

}  // namespace

namespace swap_detail {

void check_swap_plan_shape(const Graph &g, const SwapPlan &plan, const std::string &source) {
    PlanFacts f(g, plan, source);
    check_sizes(f);
    check_pools(f);
    check_pins(f);
    check_steps(f);
}

}  // namespace swap_detail

void check_swap_plan(const Graph &g, const SwapPlan &plan, const std::string &source) {
    swap_detail::check_swap_plan_shape(g, plan, source);
    SwapRun run = swap_detail::assemble_swap_run(g, plan, nullptr);
    verify_program(g, run.train, run.memory, VerifyNames{source, run.train_steps});
}

}  // namespace tessera
