#include "tessera/swap/swap_program.h"

#include <algorithm>
#include <array>

#include "tessera/align.h"
#include "internal.h"
#include "tessera/error.h"
#include "tessera/program/verify.h"

namespace tessera {

namespace {

StreamKind stream_of(const Graph &g, const SwapStep &st) {
    switch (st.kind) {
    case SwapStep::Kind::Compute: return g.node(st.node).comm ? StreamKind::Comm : StreamKind::Compute;
    case SwapStep::Kind::SwapOut: return StreamKind::SwapOut;
    case SwapStep::Kind::SwapIn: return StreamKind::SwapIn;
    case SwapStep::Kind::HostUpdate: return StreamKind::Host;
    case SwapStep::Kind::Recompute: return StreamKind::Compute;
    }
    TESSERA_INTERNAL_ASSERT(false, "unknown swap step kind ", static_cast<int>(st.kind));
}

// One plan's steps as instructions, in issue order. A step waits, per other
// stream, only for the latest step of that stream it names: streams run in
// order, so the earlier ones are done by then. That keeps the events to the
// steps something really waits for.
// `step_of` gets, per instruction, the step it comes from (an event's, the
// step it follows or precedes).
Program program_from_plan(const Graph &g, const SwapPlan &plan, const MemoryPlan &memory, const char *which,
                          std::vector<int> &step_of) {
    const int n = static_cast<int>(plan.steps.size());
    std::vector<StreamKind> stream(n);
    for (int k = 0; k < n; k++) stream[k] = stream_of(g, plan.steps[k]);

    // waits[k]: per stream, the latest step of it that step k waits for.
    std::vector<std::array<int, kNumStreams>> waits(n);
    std::vector<int> event(n, -1);
    Program p;
    for (int k = 0; k < n; k++) {
        waits[k].fill(-1);
        for (int j : plan.steps[k].after) {
            TESSERA_INTERNAL_ASSERT(j >= 0 && j < k, which, " swap plan step ", k, " waits for step ", j,
                                    ", which check_swap_plan should have rejected");
            int q = static_cast<int>(stream[j]);
            if (stream[j] != stream[k]) waits[k][q] = std::max(waits[k][q], j);
        }
    }
    for (int k = 0; k < n; k++)
        for (int j : waits[k])
            if (j >= 0) event[j] = 0;
    for (int k = 0; k < n; k++)
        if (event[k] == 0) event[k] = -2;  // needed; numbered when recorded
    for (int k = 0; k < n; k++) event[k] = event[k] == -2 ? p.num_events++ : -1;

    p.place = plan.produce_at;
    bool compute_since_collective = false;
    for (int k = 0; k < n; k++) {
        const SwapStep &st = plan.steps[k];
        const StreamKind s = stream[k];
        const bool collective = s == StreamKind::Comm;
        if (collective && compute_since_collective) {
            // A collective reads what the operators before it wrote.
            int e = p.num_events++;
            p.instructions.push_back(Instruction::record(e, StreamKind::Compute));
            p.instructions.push_back(Instruction::wait(e, StreamKind::Comm));
            compute_since_collective = false;
        }
        for (int j : waits[k])
            if (j >= 0) p.instructions.push_back(Instruction::wait(event[j], s));
        switch (st.kind) {
        case SwapStep::Kind::Compute:
            p.instructions.push_back(collective ? Instruction::collective(st.node) : Instruction::compute(st.node));
            compute_since_collective = compute_since_collective || !collective;
            break;
        case SwapStep::Kind::HostUpdate: p.instructions.push_back(Instruction::compute(st.node, StreamKind::Host)); break;
        case SwapStep::Kind::Recompute:
            p.instructions.push_back(Instruction::recompute(st.node, st.offset));
            compute_since_collective = true;
            break;
        case SwapStep::Kind::SwapOut:
        case SwapStep::Kind::SwapIn: {
            int64_t h = memory.host_offset_of(st.tensor);
            TESSERA_INTERNAL_ASSERT(h >= 0, which, " swap plan step ", k, " moves '", g.tensor(st.tensor).name,
                                    "', which the plan does not mark as swapped");
            p.instructions.push_back(st.kind == SwapStep::Kind::SwapOut
                                         ? Instruction::swap_out(st.tensor, h, st.bytes, st.offset)
                                         : Instruction::swap_in(st.tensor, st.offset, h, st.bytes));
            break;
        }
        }
        if (event[k] >= 0) p.instructions.push_back(Instruction::record(event[k], s));
        if (collective) {
            // The simulator runs a collective in the compute stream's place.
            int e = event[k];
            if (e < 0) {
                e = p.num_events++;
                p.instructions.push_back(Instruction::record(e, StreamKind::Comm));
            }
            p.instructions.push_back(Instruction::wait(e, StreamKind::Compute));
        }
        step_of.resize(p.instructions.size(), k);
    }
    return p;
}

// The two plans agree on their homes.
void check_plans_agree(const Graph &g, const SwapPlan &train, const SwapPlan *forward) {
    if (forward) {
        TESSERA_CHECK(forward->arena_bytes <= train.arena_bytes, "the forward swap plan needs an arena of ",
                      forward->arena_bytes, " bytes but the training plan's is ", train.arena_bytes,
                      "; plan both for the same budget");
        for (TensorId r = 0; r < g.num_tensors(); r++)
            TESSERA_CHECK(forward->pinned[r] == train.pinned[r], "the forward swap plan pins '", g.tensor(r).name,
                          "' at ", forward->pinned[r], " but the training plan at ", train.pinned[r],
                          " (-1: not pinned); plan the forward pass with homes_from = the training plan so that "
                          "both programs see the same tensors");
    }
}

}  // namespace

namespace swap_detail {

SwapRun assemble_swap_run(const Graph &g, const SwapPlan &train, const SwapPlan *forward) {
    const int nt = g.num_tensors();
    SwapRun run;
    MemoryPlan &m = run.memory;
    m.order = train.order;
    m.arena_bytes = train.arena_bytes;
    m.offset.assign(nt, -1);
    m.host_offset.assign(nt, -1);
    for (TensorId t = 0; t < nt; t++) {
        TensorId r = storage_root(g, t);
        if (train.pinned[r] < 0) continue;
        m.offset[t] = train.pinned[r];
        if (r == t) m.persistent_bytes += g.tensor(t).type.bytes();
    }
    // One host region per buffer that either program moves, in tensor order.
    for (TensorId r = 0; r < nt; r++) {
        bool swapped = train.swapped[r] || (forward && forward->swapped[r]);
        if (!swapped) continue;
        TESSERA_CHECK(storage_root(g, r) == r, "swap plan: '", g.tensor(r).name, "' updates '",
                      g.tensor(storage_root(g, r)).name, "' in place, so only '", g.tensor(storage_root(g, r)).name,
                      "' can be marked as swapped");
        TESSERA_CHECK(train.pinned[r] < 0, "swap plan: '", g.tensor(r).name, "' is pinned at arena offset ",
                      train.pinned[r], " and also marked as swapped; a pinned tensor never leaves the arena");
        m.host_offset[r] = m.host_bytes;
        m.host_bytes += align_up(g.tensor(r).type.bytes(), MemoryPlan::kAlignment);
    }
    check_memory_plan(g, m, "memory plan of the swap run");

    run.train = program_from_plan(g, train, m, "training", run.train_steps);
    if (forward) run.forward = program_from_plan(g, *forward, m, "forward", run.forward_steps);
    return run;
}

}  // namespace swap_detail

SwapRun build_swap_run(const Graph &g, const SwapPlan &train, const SwapPlan *forward) {
    swap_detail::check_swap_plan_shape(g, train, "training swap plan");
    if (forward) swap_detail::check_swap_plan_shape(g, *forward, "forward swap plan");
    check_plans_agree(g, train, forward);
    SwapRun run = swap_detail::assemble_swap_run(g, train, forward);
    verify_program(g, run.train, run.memory, VerifyNames{"training swap plan", run.train_steps});
    if (forward) verify_program(g, run.forward, run.memory, VerifyNames{"forward swap plan", run.forward_steps});
    return run;
}

}  // namespace tessera
