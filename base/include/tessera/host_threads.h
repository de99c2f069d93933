// How many threads a planning tool that runs alone on this host should use.
#pragma once

namespace tessera {

// One per hardware thread, at most 8 (1 when the count is unknown). The
// planners' searches and the bench's per-rank lowering split their work this
// way; past 8 their gains level off, and a shared node's other jobs suffer.
// tessera-train does not use it: its ranks share the node's cores.
int host_planning_threads();

}  // namespace tessera
