// The swap plan for people: the HTML timeline of memory and streams that
// tessera-plan embeds in its page.
#pragma once

#include <string>

#include "tessera/graph/graph.h"
#include "tessera/swap/swap_plan.h"

namespace tessera {

// A self-contained HTML fragment (inline SVG, no scripts from elsewhere): one
// lane per stream (compute, swap-out, swap-in) with every step at its
// simulated start and end, and below it the bytes resident over time against
// the budget; hovering a step names its node or tensor.
std::string swap_plan_html_section(const Graph &g, const SwapPlan &plan);

}  // namespace tessera
