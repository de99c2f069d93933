// Programs from swap plans (swap_plan.h): the bridge from the planner to the
// executor, made of program/'s values, which need no device. It lives here so
// that exec/ runs programs without linking the planner.
//
// A swapped run has one memory plan and up to two programs (the training step
// and the evaluation forward pass), each from its own swap plan. The plans
// share their homes (the forward plan is made with homes_from = the training
// plan), so the memory plan holds what both agree on: each pinned persistent
// tensor's arena offset, and one host region per buffer that either plan
// swaps. Where a program's producers write their outputs differs per plan, so
// it travels with the program (Program::place).
#pragma once

#include "tessera/graph/graph.h"
#include "tessera/program/memory_plan.h"
#include "tessera/program/program.h"
#include "tessera/swap/swap_plan.h"

namespace tessera {

struct SwapRun {
    MemoryPlan memory;  // arena_bytes = the budget; offsets of the pinned tensors; host_offset, host_bytes
    Program train;
    Program forward;  // empty when no forward plan was given
    // Per instruction of train and forward, the plan step it comes from (an
    // event's: the step it waits before or records after).
    std::vector<int> train_steps, forward_steps;
};

// Each plan's steps become instructions on the compute, swap-out and swap-in
// streams (communication nodes: a collective on the comm stream that the
// compute stream waits for at once), with one event recorded after every step
// that another stream waits for. Throws tessera::Error when the plans do not
// fit `g` (check_swap_plan()'s checks of their shape), disagree on their
// homes, or make programs that the verifier of programs (program/verify.h)
// rejects; messages name the plan's steps.
SwapRun build_swap_run(const Graph &g, const SwapPlan &train, const SwapPlan *forward = nullptr);

}  // namespace tessera
