// The swap plan for people: the HTML timeline of memory and streams that
// tessera-plan embeds in its page.
#pragma once

#include <string>

#include "tessera/graph/graph.h"
#include "tessera/swap/swap_plan.h"

namespace tessera {

// An HTML fragment for a page made by html_page() (tessera/html_page.h), whose
// stylesheet styles its class, tessera-swap: a <section> with inline SVG, no
// scripts and nothing fetched. It holds a summary table (budget, pinned bytes,
// pools, predicted and ideal time, bytes swapped, peaks), the pools, then one
// lane per stream (compute, swap-out, swap-in, host) with every step at its
// simulated start and end, and below it the bytes resident over time against
// the budget. Hovering a step names its node or tensor.
//
// The resident bytes are rebuilt from the steps, not taken from the planner:
// pinned tensors all the time, and any other buffer from its producer's start
// or its swap-in's start until the last step touching it before it next
// arrives. The summary shows that peak beside the planner's `peak_bytes`.
// Throws tessera::Error when a step names a node or tensor `g` lacks, or ends
// before it starts.
std::string swap_plan_html_section(const Graph &g, const SwapPlan &plan);

}  // namespace tessera
