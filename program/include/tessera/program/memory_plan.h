// The static memory plan: every tensor's offset in the device arena, fixed
// before the first step for one order of the nodes.
//
// Lifetimes follow the order. Data, Param, OptState and Constant tensors and
// the graph's named outputs persist across steps, so they live for the whole
// step. Any other tensor lives from its producer's position to its last
// reader's position, inclusive; after that its bytes can be reused. Two tensors whose
// lifetimes share a position never share bytes, which in particular keeps a
// node's outputs apart from its inputs. There are two exceptions:
//   - an optimizer output with `updates` set (w' replaces w) shares its
//     target's storage, because the update kernels run in place;
//   - a reshape's output is a view: it shares its input's storage, and the
//     executor runs nothing for the node. Tensors are dense and row-major, so
//     a reshape's output is its input's bytes in the same order.
// A storage root is a tensor whose storage others share; its lifetime is the
// hull of the lifetimes of every tensor that shares it, so the bytes stay put
// until the last reader of any of them.
//
// When a reshape is a view. The node is an operator (not a communication
// node's carrier) with one input x and one output y of the same size, and:
//   - y is not persistent (a graph output keeps its own storage all step) and
//     nothing updates y in place;
//   - no node writes x's storage root in place at a position after the
//     reshape and up to y's last reader, inclusive: the view must read the
//     value x had when it was made. Tensors are otherwise written once, so
//     only an in-place update (w' over w, for a reshape of w read after the
//     optimizer step) could change the bytes under a view; that reshape
//     copies. A reshape of a view follows the same rule with its root.
// Reshapes of reshapes chain to one root. Swapped runs (swap/swap_program.h)
// build their own memory plan, without views: a swap plan moves each storage
// root alone, and its reshapes copy as before.
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
    // Per TensorId, for a reshape's output that is a view: the reshape's
    // input, whose storage it shares (offset equal); kNoTensor otherwise.
    // Empty when there are no views.
    std::vector<TensorId> view_of;

    bool is_view(TensorId t) const { return !view_of.empty() && view_of.at(t) != kNoTensor; }

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
struct MemoryPlanOptions {
    // Reshapes become views where the rule above allows. Default: the
    // environment variable TESSERA_RESHAPE_VIEWS, 1 (on) or 0 (off, every
    // reshape copies), read once; 1 when unset.
    bool reshape_views = reshape_views_default();
    // Blocks of storage are placed by a few greedy passes, each quadratic in
    // the blocks, up to this many; above it by an allocator run forward in
    // time, O(b log b) (program_large_graph_test prints its times).
    size_t greedy_blocks = 8192;

    static bool reshape_views_default();
};

MemoryPlan plan_memory(const Graph &g, const std::vector<NodeId> &order, const MemoryPlanOptions &options = {});

// The tensor whose storage `t` uses under `plan`: storage_root() of the graph
// (in-place updates), following the plan's views as well.
TensorId storage_root(const Graph &g, const MemoryPlan &plan, TensorId t);
// The same for every tensor, indexed by TensorId.
std::vector<TensorId> storage_roots(const Graph &g, const MemoryPlan &plan);

// For each position i of `order` holding a communication node (Node::comm):
// the position where the compute stream waits for it, the first later
// operator that reads the output of a communication node at i or after
// (order.size() when none does); -1 at other positions. A collective runs
// beside the compute stream until then, so plan_memory keeps its inputs and
// output alive until that position, and build_program waits there.
std::vector<int> comm_sync_points(const Graph &g, const std::vector<NodeId> &order);

// Checks that `plan` fits `g` (one offset per tensor, aligned, inside the arena,
// in-place updates and views sharing storage, views only of reshapes; host
// regions aligned, inside host_bytes, on storage roots). Whether a view's root
// keeps its value while the view is read depends on the program:
// verify_program() checks that. tessera::Error names the first problem and
// `source` (a file name, or "memory plan").
void check_memory_plan(const Graph &g, const MemoryPlan &plan, const std::string &source = "memory plan");

// storage_root() and persistent_tensors() are in tessera/graph/graph.h.

nlohmann::json memory_plan_to_json(const MemoryPlan &plan);
MemoryPlan memory_plan_from_json(const nlohmann::json &j, const std::string &source = "memory plan JSON");

}  // namespace tessera
