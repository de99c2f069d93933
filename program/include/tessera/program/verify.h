// The verifier of programs: the one replay of a program against a memory
// plan, used by the executor before it runs a program and by the swap
// planner's check (check_swap_plan) on the program a swap plan becomes.
//
// It replays the instructions in list order and tracks, for every storage
// root, where it lives (its "stay" in the arena, or its region in the host
// area) and, as vector clocks over the streams, which instructions are known
// to have finished before each one starts (same-stream order plus events).
// It rejects:
//   - a read of a tensor that is not in the arena (never produced, written
//     over, or host-homed and not swapped in);
//   - a read, copy or overwrite that races with the instruction that wrote,
//     or still uses, the same bytes (no event between them);
//   - a write over a pinned persistent tensor, or over an operand of the same
//     instruction (except an element-wise output exactly over an input it
//     may overwrite, op_may_overwrite_input: that input is then gone);
//   - a swap-in from a host region that does not hold the current value, or
//     that a swap-out may still be writing;
//   - placements and host regions outside the arena and the host area;
//   - a host-homed tensor whose last write is not swapped out by the end;
//   - a read of a view (MemoryPlan::view_of) after its root has been written
//     since the view was made (an in-place update), or whose root is no
//     longer in the arena; a recomputed view; a view on the host stream;
//   - an operator on the host stream (a host-side update) that reads a host
//     region not holding its operand's current value, or that races with a
//     swap of the regions it reads or writes; after it, the arena copy of
//     what it updated is stale, and reading or swapping out that copy is an
//     error;
//   - with no placement of its own (Program::place), a program whose nodes do
//     not follow the memory plan's order (its lifetimes hold only for it).
// check_program()'s checks (ids, events, producers) come first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"
#include "tessera/program/memory_plan.h"
#include "tessera/program/program.h"

namespace tessera {

// Where one instruction's bytes are, as the verifier resolved them.
struct VerifiedInstruction {
    // Compute, Collective: the arena offset of each input and each output, in
    // the node's order (an in-place output at its target's offset); for an
    // operator on the host stream, offsets in the host area instead.
    std::vector<int64_t> inputs, outputs;
    // SwapOut, SwapIn: the arena side and the host side of the copy.
    int64_t arena_offset = -1, host_offset = -1, bytes = 0;
    int64_t born = 0;       // arena bytes that become live when it starts
    int64_t died = 0;       // arena bytes that die when it ends
    int64_t touch_end = 0;  // the largest offset + size it touches in the arena
    // Compute: a reshape whose output the memory plan makes a view of its
    // input (MemoryPlan::view_of); there is nothing to run.
    bool view = false;
};

// How messages name what the verifier finds. By default "program instruction
// 7 (compute 'fc1' on the compute stream) ...", with the fix given as events
// to record and wait for. With `step_of` (per instruction, the step it was
// made from, -1 for the events between steps), a program built from a plan
// of steps names the plan's steps instead: "<source>: step 3 (swap-in 'x' on
// the swap-in stream) ...", and the fix as a step to wait for.
struct VerifyNames {
    std::string source = "program";
    std::vector<int> step_of;
};

// Throws tessera::Error naming the first instruction that breaks a rule.
std::vector<VerifiedInstruction> verify_program(const Graph &g, const Program &p, const MemoryPlan &plan,
                                                const VerifyNames &names = {});

}  // namespace tessera
