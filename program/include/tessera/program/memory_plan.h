// The static memory plan: every tensor's offset in the device arena, fixed
// before the first step for one order of the nodes.
//
// Lifetimes follow the order. Data, Param, OptState and Constant tensors and
// the graph's named outputs persist across steps, so they live for the whole
// step. Any other tensor lives from its producer's position to its last
// reader's position, inclusive; after that its bytes can be reused. Two tensors whose
// lifetimes share a position never share bytes, which in particular keeps a
// node's outputs apart from its inputs. The one exception is an optimizer
// output with `updates` set (w' replaces w): it shares its target's storage,
// because the update kernels run in place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tessera/graph/graph.h"

namespace tessera {

struct MemoryPlan {
    static constexpr int64_t kAlignment = 64;

    std::vector<NodeId> order;    // the node order the plan was made for
    std::vector<int64_t> offset;  // per TensorId; -1 = no storage (never produced in `order`)
    int64_t arena_bytes = 0;      // the end of the highest tensor
    // The most tensor bytes live at any one position of `order`: no placement
    // of the same lifetimes can use a smaller arena.
    int64_t lower_bound = 0;
    int64_t persistent_bytes = 0;  // bytes of the tensors that live all step
    // Host memory for swapped runs (swap/swap_program.h); empty and 0 otherwise.
    // Per TensorId, read at storage roots (-1: none): a region of the host
    // area of host_bytes. A persistent tensor with a region is host-homed:
    // between steps its value is there, not in the arena (its offset is -1,
    // or where the step produces it), and a program swaps it in to use it.
    // For any other tensor the region is its swap space.
    std::vector<int64_t> host_offset;
    int64_t host_bytes = 0;

    int64_t host_offset_of(TensorId root) const { return host_offset.empty() ? -1 : host_offset.at(root); }

    bool has_storage(TensorId t) const { return offset.at(t) >= 0; }
    // One line: tensors, arena, lower bound, persistent bytes, and the ratio.
    std::string summary() const;
    bool operator==(const MemoryPlan &) const = default;
};

// Node index order: the order the graph was built in, which is topological.
std::vector<NodeId> default_order(const Graph &g);

// Plans the arena for running the nodes of `order` in that order. `order` may
// leave nodes out (their outputs get no storage), but every node's inputs must
// be graph inputs or outputs of nodes earlier in it; tessera::Error otherwise.
//
// Offsets come from "greedy by size" (as in TFLite's arena planner): tensors
// are placed largest first, each at the offset of the tightest gap, among the
// tensors already placed whose lifetimes overlap its own, that it fits in.
// Large tensors are the hard ones to fit; placed first, they claim the
// bottom of the arena, and the many small ones fill the gaps between them.
// Two variants run as well (lowest gap instead of tightest; persistent tensors
// first) and the smallest arena wins, so the result is deterministic and
// usually within a few percent of the lower bound (the MLP training graphs of
// the tests: within 0.1%). O(tensors^2); 5000 tensors plan in about 20 ms.
MemoryPlan plan_memory(const Graph &g, const std::vector<NodeId> &order);

// For each position i of `order` holding a communication node (Node::comm):
// the position where the compute stream waits for it, the first later
// operator that reads the output of a communication node at i or after
// (order.size() when none does); -1 at other positions. A collective runs
// beside the compute stream until then, so plan_memory keeps its inputs and
// output alive until that position, and build_program waits there.
std::vector<int> comm_sync_points(const Graph &g, const std::vector<NodeId> &order);

// Checks that `plan` fits `g` (one offset per tensor, aligned, inside the arena,
// in-place updates sharing storage; host regions aligned, inside host_bytes,
// on storage roots). tessera::Error names the first problem and
// `source` (a file name, or "memory plan").
void check_memory_plan(const Graph &g, const MemoryPlan &plan, const std::string &source = "memory plan");

// storage_root() and persistent_tensors() are in tessera/graph/graph.h.

nlohmann::json memory_plan_to_json(const MemoryPlan &plan);
MemoryPlan memory_plan_from_json(const nlohmann::json &j, const std::string &source = "memory plan JSON");

}  // namespace tessera
