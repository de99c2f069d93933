#include "tessera/program/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "tessera/align.h"
#include "tessera/error.h"
#include "tessera/json_input.h"
#include "tessera/size.h"
#include "tessera/tunables.h"

namespace tessera {

namespace {

// One block of storage to place: a storage root and the hull of the lifetimes
// of the tensors that share it. Persistent blocks span [-1, n].
struct Block {
    TensorId root;
    int64_t size;  // aligned
    int start, end;
    bool persistent;
};

struct Placed {
    int64_t offset, size;
    int start, end;
};

// One greedy pass over `blocks` in the given order. best_fit picks the tightest
// gap that fits; otherwise the lowest. Returns the arena size; offsets go to `out`.
int64_t place(const std::vector<Block> &blocks, const std::vector<int> &order, bool best_fit,
              std::vector<int64_t> &out) {
    std::vector<Placed> placed;  // sorted by offset
    placed.reserve(order.size());
    out.assign(blocks.size(), 0);
    int64_t arena = 0;
    for (int bi : order) {
        const Block &b = blocks[bi];
        int64_t prev_end = 0, best = -1, best_gap = std::numeric_limits<int64_t>::max();
        for (const Placed &p : placed) {
            if (p.end < b.start || b.end < p.start) continue;  // lifetimes apart: may share bytes
            int64_t gap = p.offset - prev_end;
            if (gap >= b.size && (best < 0 || (best_fit && gap < best_gap))) {
                best = prev_end;
                best_gap = gap;
            }
            prev_end = std::max(prev_end, p.offset + p.size);
        }
        if (best < 0) best = prev_end;
        out[bi] = best;
        arena = std::max(arena, best + b.size);
        Placed p{best, b.size, b.start, b.end};
        auto at = std::upper_bound(placed.begin(), placed.end(), p,
                                   [](const Placed &x, const Placed &y) { return x.offset < y.offset; });
        placed.insert(at, p);
    }
    return arena;
}

// Free byte ranges of an arena that grows at its top: the best fit of a size
// in O(log n), freed ranges merged with their neighbours.
class FreeRanges {
public:
    int64_t allocate(int64_t size) {
        auto fit = by_size_.lower_bound({size, 0});
        if (fit == by_size_.end()) return grow(size);
        const auto [have, offset] = *fit;
        erase(offset);
        if (have > size) insert(offset + size, have - size);
        return offset;
    }

    void release(int64_t offset, int64_t size) {
        auto next = by_offset_.lower_bound(offset);
        if (next != by_offset_.end() && next->first == offset + size) {
            size += next->second;
            erase(next->first);
        }
        next = by_offset_.lower_bound(offset);
        if (next != by_offset_.begin()) {
            auto prev = std::prev(next);
            if (prev->first + prev->second == offset) {
                offset = prev->first;
                size += prev->second;
                erase(offset);
            }
        }
        insert(offset, size);
    }

    int64_t top() const { return top_; }

private:
    // A block that fits nowhere starts at the top, or in the free range that
    // ends there.
    int64_t grow(int64_t size) {
        int64_t offset = top_;
        if (!by_offset_.empty()) {
            const auto last = std::prev(by_offset_.end());
            if (last->first + last->second == top_) {
                offset = last->first;
                erase(offset);
            }
        }
        top_ = offset + size;
        return offset;
    }

    void insert(int64_t offset, int64_t size) {
        by_offset_.emplace(offset, size);
        by_size_.emplace(size, offset);
    }

    void erase(int64_t offset) {
        auto it = by_offset_.find(offset);
        by_size_.erase({it->second, offset});
        by_offset_.erase(it);
    }

    std::map<int64_t, int64_t> by_offset_;       // offset -> size
    std::set<std::pair<int64_t, int64_t>> by_size_;  // (size, offset)
    int64_t top_ = 0;
};

// An allocator run forward in time: at each position the blocks that ended
// before it are freed, then the blocks that start there, largest first, take
// the best-fitting free range. O(b log b), for graphs too large for the
// greedy passes of `place` (each pass scans every placed block).
int64_t place_by_time(const std::vector<Block> &blocks, std::vector<int64_t> &out) {
    std::vector<int> by_start(blocks.size()), by_end(blocks.size());
    for (size_t i = 0; i < blocks.size(); i++) by_start[i] = by_end[i] = static_cast<int>(i);
    std::stable_sort(by_start.begin(), by_start.end(), [&](int a, int b) {
        return blocks[a].start != blocks[b].start ? blocks[a].start < blocks[b].start
                                                  : blocks[a].size > blocks[b].size;
    });
    std::stable_sort(by_end.begin(), by_end.end(), [&](int a, int b) { return blocks[a].end < blocks[b].end; });
    out.assign(blocks.size(), 0);
    FreeRanges free;
    size_t ended = 0;
    for (int bi : by_start) {
        for (; ended < by_end.size() && blocks[by_end[ended]].end < blocks[bi].start; ended++)
            free.release(out[by_end[ended]], blocks[by_end[ended]].size);
        out[bi] = free.allocate(blocks[bi].size);
    }
    return free.top();
}

std::string node_label(const Graph &g, NodeId n) { return "'" + g.node(n).call.name + "'"; }

// Each view is the output of a reshape operator, of its input, the same size,
// not persistent; views of views end at a root.
void check_views(const Graph &g, const MemoryPlan &plan, const std::string &source) {
    if (plan.view_of.empty()) return;
    TESSERA_CHECK(static_cast<int>(plan.view_of.size()) == g.num_tensors(), source, ": has views for ",
                  plan.view_of.size(), " tensors but the graph has ", g.num_tensors(),
                  "; give one entry per tensor (-1: not a view), or none");
    const std::vector<bool> persistent = persistent_tensors(g);
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const TensorId x = plan.view_of[t];
        if (x == kNoTensor) continue;
        const TensorInfo &info = g.tensor(t);
        const NodeId p = info.producer;
        TESSERA_CHECK(x >= 0 && x < g.num_tensors(), source, ": tensor '", info.name, "' is a view of tensor ", x,
                      ", which does not exist; the graph has ", g.num_tensors(), " tensors");
        TESSERA_CHECK(p != kNoNode && !g.node(p).comm && g.node(p).call.kind == OpKind::Reshape &&
                          g.node(p).inputs.size() == 1 && g.node(p).inputs[0] == x,
                      source, ": tensor '", info.name, "' is a view of '", g.tensor(x).name,
                      "', but only the output of a reshape of '", g.tensor(x).name, "' can be");
        TESSERA_CHECK(info.type.bytes() == g.tensor(x).type.bytes(), source, ": tensor '", info.name, "' (",
                      type_str(info.type), ") is a view of '", g.tensor(x).name, "' (", type_str(g.tensor(x).type),
                      "), which has another size");
        TESSERA_CHECK(!persistent[t] && storage_root(g, t) == t, source, ": tensor '", info.name,
                      "' is a view of '", g.tensor(x).name,
                      "', but it persists or is updated in place, so it needs storage of its own");
    }
}

}  // namespace

std::vector<NodeId> default_order(const Graph &g) {
    std::vector<NodeId> order(g.num_nodes());
    for (NodeId n = 0; n < g.num_nodes(); n++) order[n] = n;
    return order;
}

std::vector<int> comm_sync_points(const Graph &g, const std::vector<NodeId> &order) {
    const int n = static_cast<int>(order.size());
    std::vector<int> sync(n, -1), pos(g.num_nodes(), -1);
    for (int i = 0; i < n; i++) pos[order[i]] = i;
    // Walking forward, `pending` are the communication positions not yet
    // waited for; an operator reading the output of the newest of them (or of
    // any, since the comm stream runs in order) is where they all complete.
    std::vector<int> pending;
    for (int i = 0; i < n; i++) {
        const Node &node = g.node(order[i]);
        if (node.comm) {
            pending.push_back(i);
            continue;
        }
        int newest = -1;
        for (TensorId t : node.inputs) {
            NodeId p = g.tensor(t).producer;
            if (p != kNoNode && g.node(p).comm && pos[p] >= 0 && pos[p] < i) newest = std::max(newest, pos[p]);
        }
        if (newest < 0) continue;
        // Everything pending up to `newest` completes here; later ones stay pending.
        std::vector<int> still;
        for (int c : pending) {
            if (c <= newest) sync[c] = i;
            else still.push_back(c);
        }
        pending.swap(still);
    }
    for (int c : pending) sync[c] = n;
    return sync;
}

namespace {

// The order checked: each node once, inputs produced earlier.
void check_node_order(const Graph &g, const std::vector<NodeId> &order) {
    std::vector<int> pos(g.num_nodes(), -1);
    for (int i = 0; i < static_cast<int>(order.size()); i++) {
        NodeId id = order[i];
        TESSERA_CHECK(id >= 0 && id < g.num_nodes(), "node order: position ", i, " names node ", id,
                      " but the graph has ", g.num_nodes(), " nodes");
        TESSERA_CHECK(pos[id] < 0, "node order: node ", node_label(g, id), " appears twice (positions ", pos[id],
                      " and ", i, ")");
        for (TensorId t : g.node(id).inputs) {
            NodeId p = g.tensor(t).producer;
            TESSERA_CHECK(p == kNoNode || pos[p] >= 0, "node order: node ", node_label(g, id), " (position ", i,
                          ") reads '", g.tensor(t).name, "', but its producer ", node_label(g, p),
                          " does not run before it; the order must be topological");
        }
        pos[id] = i;
    }
}

// A few orderings of the same greedy placement; the smallest arena, with its
// offsets (per block) in `best_offsets`.
// Placement is cheap next to a training step, and no one order wins on every
// graph.
int64_t place_smallest(const std::vector<Block> &blocks, size_t greedy_blocks, std::vector<int64_t> &best_offsets) {
    if (blocks.size() > greedy_blocks) return place_by_time(blocks, best_offsets);
    std::vector<int> by_size(blocks.size());
    for (size_t i = 0; i < blocks.size(); i++) by_size[i] = static_cast<int>(i);
    auto larger = [&](int a, int b) {
        const Block &x = blocks[a], &y = blocks[b];
        if (x.size != y.size) return x.size > y.size;
        if (x.start != y.start) return x.start < y.start;
        return x.root < y.root;
    };
    std::stable_sort(by_size.begin(), by_size.end(), larger);
    std::vector<int> persistent_first = by_size;
    std::stable_partition(persistent_first.begin(), persistent_first.end(),
                          [&](int b) { return blocks[b].persistent; });
    struct Variant {
        const std::vector<int> *order;
        bool best_fit;
    };
    std::vector<int64_t> offsets;
    int64_t best_arena = -1;
    for (Variant v : {Variant{&by_size, true}, Variant{&by_size, false}, Variant{&persistent_first, true}}) {
        int64_t arena = place(blocks, *v.order, v.best_fit, offsets);
        if (best_arena < 0 || arena < best_arena) {
            best_arena = arena;
            best_offsets = offsets;
        }
    }
    return best_arena;
}

}  // namespace

bool MemoryPlanOptions::reshape_views_default() {
    static const bool on = env_choice("TESSERA_RESHAPE_VIEWS", {"1", "0"}, "1", "reshape views setting") == "1";
    return on;
}

TensorId storage_root(const Graph &g, const MemoryPlan &plan, TensorId t) {
    for (;;) {
        t = storage_root(g, t);
        if (!plan.is_view(t)) return t;
        t = plan.view_of[t];
    }
}

std::vector<TensorId> storage_roots(const Graph &g, const MemoryPlan &plan) {
    std::vector<TensorId> roots(g.num_tensors());
    for (TensorId t = 0; t < g.num_tensors(); t++) roots[t] = storage_root(g, plan, t);
    return roots;
}

namespace {

// Whether the node at position i of the order, a reshape, can leave its
// output as a view of its input (the rule in memory_plan.h). `root`: the
// storage roots so far; `writes`: per storage root, the positions of the
// nodes that write it in place; `end`: per tensor, its last reader.
bool can_view(const Graph &g, const Node &node, int i, const std::vector<TensorId> &root,
              const std::vector<std::vector<int>> &writes, const std::vector<int> &end,
              const std::vector<bool> &persistent, const std::vector<bool> &updated) {
    if (node.comm || node.call.kind != OpKind::Reshape || node.inputs.size() != 1 || node.outputs.size() != 1)
        return false;
    const TensorId x = node.inputs[0], y = node.outputs[0];
    if (persistent[y] || updated[y] || g.tensor(y).updates != kNoTensor) return false;
    if (g.tensor(x).type.bytes() != g.tensor(y).type.bytes()) return false;
    for (int p : writes[root[x]])
        if (i < p && p <= end[y]) return false;
    return true;
}

// Views, in order, so that a reshape's input has its final root: where
// storage roots are written in place, then each reshape the rule allows.
// Sets plan.view_of (left empty when no reshape is a view) and moves each
// view's storage root to its input's.
void mark_reshape_views(const Graph &g, const std::vector<NodeId> &order, const std::vector<int> &start,
                        const std::vector<int> &end, const std::vector<bool> &persistent, std::vector<int> &root,
                        MemoryPlan &plan) {
    const int nt = g.num_tensors(), n = static_cast<int>(order.size());
    std::vector<std::vector<int>> writes(nt);
    std::vector<bool> updated(nt, false);
    for (TensorId t = 0; t < nt; t++) {
        if (root[t] == t) continue;
        updated[root[t]] = true;
        if (start[t] >= 0) writes[root[t]].push_back(start[t]);
    }
    plan.view_of.assign(nt, kNoTensor);
    bool any = false;
    for (int i = 0; i < n; i++) {
        const Node &node = g.node(order[i]);
        if (!can_view(g, node, i, root, writes, end, persistent, updated)) continue;
        plan.view_of[node.outputs[0]] = node.inputs[0];
        root[node.outputs[0]] = root[node.inputs[0]];
        any = true;
    }
    if (!any) plan.view_of.clear();
}

}  // namespace

MemoryPlan plan_memory(const Graph &g, const std::vector<NodeId> &order, const MemoryPlanOptions &options) {
    const int nt = g.num_tensors(), n = static_cast<int>(order.size());

    check_node_order(g, order);

    // Each tensor's own lifetime, then the hull over each storage root. A
    // collective's buffers live until the compute stream waits for it.
    std::vector<bool> persistent = persistent_tensors(g);
    std::vector<int> start(nt, -1), end(nt, -1);
    const std::vector<int> sync = comm_sync_points(g, order);
    for (int i = 0; i < n; i++) {
        const Node &node = g.node(order[i]);
        int until = node.comm ? std::min(sync[i], n - 1) : i;
        for (TensorId t : node.outputs) {
            start[t] = i;
            end[t] = until;
        }
        for (TensorId t : node.inputs) end[t] = std::max(end[t], until);
    }
    std::vector<int> root(nt), gstart(nt, std::numeric_limits<int>::max()), gend(nt, -1);
    std::vector<bool> stored(nt, false);
    for (TensorId t = 0; t < nt; t++) {
        root[t] = storage_root(g, t);
        const TensorInfo &info = g.tensor(t);
        if (info.updates != kNoTensor)
            TESSERA_CHECK(info.type.bytes() == g.tensor(root[t]).type.bytes(), "tensor '", info.name,
                          "' updates '", g.tensor(root[t]).name, "' in place but has type ", type_str(info.type),
                          " instead of ", type_str(g.tensor(root[t]).type));
    }

    MemoryPlan plan;
    plan.order = order;
    if (options.reshape_views) mark_reshape_views(g, order, start, end, persistent, root, plan);

    for (TensorId t = 0; t < nt; t++) {
        const TensorInfo &info = g.tensor(t);
        bool exists = info.producer == kNoNode || start[t] >= 0;
        if (persistent[t] || exists) stored[root[t]] = true;
        if (start[t] >= 0) {
            gstart[root[t]] = std::min(gstart[root[t]], start[t]);
            gend[root[t]] = std::max(gend[root[t]], end[t]);
        }
    }

    std::vector<Block> blocks;
    std::vector<int64_t> diff(n + 1, 0);
    for (TensorId t = 0; t < nt; t++) {
        if (root[t] != t || !stored[t]) continue;
        int64_t bytes = g.tensor(t).type.bytes();
        if (persistent[t]) {
            plan.persistent_bytes += bytes;
            blocks.push_back({t, align_up(bytes, MemoryPlan::kAlignment), -1, n, true});
        } else {
            TESSERA_INTERNAL_ASSERT(gend[t] >= gstart[t], "'", g.tensor(t).name, "' is stored but never produced");
            diff[gstart[t]] += bytes;
            diff[gend[t] + 1] -= bytes;
            blocks.push_back({t, align_up(bytes, MemoryPlan::kAlignment), gstart[t], gend[t], false});
        }
    }
    int64_t live = 0, most = 0;
    for (int i = 0; i < n; i++) most = std::max(most, live += diff[i]);
    plan.lower_bound = plan.persistent_bytes + most;

    std::vector<int64_t> best_offsets;
    const int64_t best_arena = place_smallest(blocks, options.greedy_blocks, best_offsets);
    plan.arena_bytes = std::max<int64_t>(best_arena, 0);

    plan.offset.assign(nt, -1);
    std::vector<int64_t> root_offset(nt, -1);
    for (size_t i = 0; i < blocks.size(); i++) root_offset[blocks[i].root] = best_offsets[i];
    for (TensorId t = 0; t < nt; t++) plan.offset[t] = root_offset[root[t]];
    return plan;
}

void check_memory_plan(const Graph &g, const MemoryPlan &plan, const std::string &source) {
    TESSERA_CHECK(static_cast<int>(plan.offset.size()) == g.num_tensors(), source, ": has offsets for ",
                  plan.offset.size(), " tensors but the graph has ", g.num_tensors(),
                  "; the plan was made for another graph");
    TESSERA_CHECK(plan.arena_bytes >= 0, source, ": arena_bytes is negative (", plan.arena_bytes, ")");
    for (NodeId n : plan.order)
        TESSERA_CHECK(n >= 0 && n < g.num_nodes(), source, ": the order names node ", n, " but the graph has ",
                      g.num_nodes(), " nodes");
    check_views(g, plan, source);
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const TensorInfo &info = g.tensor(t);
        int64_t off = plan.offset[t];
        if (off < 0) {
            TESSERA_CHECK(off == -1, source, ": tensor '", info.name, "' has offset ", off,
                          "; use -1 for no storage");
            continue;
        }
        TESSERA_CHECK(off % MemoryPlan::kAlignment == 0, source, ": tensor '", info.name, "' has offset ", off,
                      ", which is not a multiple of ", MemoryPlan::kAlignment);
        TESSERA_CHECK(off + info.type.bytes() <= plan.arena_bytes, source, ": tensor '", info.name,
                      "' (", type_str(info.type), ") at offset ", off, " ends at ", off + info.type.bytes(),
                      ", past the arena of ", plan.arena_bytes, " bytes");
        TensorId r = storage_root(g, t);
        TESSERA_CHECK(r == t || plan.offset[r] == off, source, ": tensor '", info.name, "' updates '",
                      g.tensor(r).name, "' in place, so it must have the same offset (", plan.offset[r],
                      "), not ", off);
        if (!plan.is_view(t)) continue;
        const TensorId x = plan.view_of[t];
        TESSERA_CHECK(plan.offset[x] == off, source, ": tensor '", info.name, "' is a view of '", g.tensor(x).name,
                      "', so it must have the same offset (", plan.offset[x], "), not ", off);
    }
    TESSERA_CHECK(plan.host_bytes >= 0, source, ": host_bytes is negative (", plan.host_bytes, ")");
    if (plan.host_offset.empty()) return;
    TESSERA_CHECK(static_cast<int>(plan.host_offset.size()) == g.num_tensors(), source, ": has host offsets for ",
                  plan.host_offset.size(), " tensors but the graph has ", g.num_tensors(),
                  "; give one per tensor, or none");
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        const TensorInfo &info = g.tensor(t);
        int64_t off = plan.host_offset[t];
        if (off == -1) continue;
        TESSERA_CHECK(off >= 0, source, ": tensor '", info.name, "' has host offset ", off,
                      "; use -1 for no host region");
        TensorId r = storage_root(g, plan, t);
        TESSERA_CHECK(r == t, source, ": tensor '", info.name, "' ",
                      plan.is_view(t) ? "is a view of '" + g.tensor(plan.view_of[t]).name + "'"
                                      : "updates '" + g.tensor(r).name + "' in place",
                      " and uses its host region; give the host offset to '", g.tensor(r).name, "' only");
        TESSERA_CHECK(off % MemoryPlan::kAlignment == 0, source, ": tensor '", info.name, "' has host offset ", off,
                      ", which is not a multiple of ", MemoryPlan::kAlignment);
        TESSERA_CHECK(off + info.type.bytes() <= plan.host_bytes, source, ": tensor '", info.name, "' (",
                      type_str(info.type), ") at host offset ", off, " ends at ", off + info.type.bytes(),
                      ", past the host area of ", plan.host_bytes, " bytes");
    }
}

std::string MemoryPlan::summary() const {
    int stored = 0;
    for (int64_t o : offset) stored += o >= 0;
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.3f", lower_bound > 0 ? double(arena_bytes) / double(lower_bound) : 1.0);
    std::string s = detail::concat("memory plan: ", order.size(), " nodes, ", stored, " of ", offset.size(),
                          " tensors stored; arena ", arena_bytes, " bytes (", format_bytes(arena_bytes),
                          "), lower bound ", lower_bound, " bytes (", format_bytes(lower_bound), "), arena/bound ",
                          ratio, "; persistent ", persistent_bytes, " bytes (", format_bytes(persistent_bytes), ")");
    int views = 0;
    for (TensorId x : view_of) views += x != kNoTensor;
    if (views > 0) s += detail::concat("; ", views, views == 1 ? " reshape is a view" : " reshapes are views");
    if (host_bytes > 0) s += detail::concat("; host area ", host_bytes, " bytes (", format_bytes(host_bytes), ")");
    return s;
}

nlohmann::json memory_plan_to_json(const MemoryPlan &plan) {
    nlohmann::json j{{"alignment", MemoryPlan::kAlignment}, {"order", plan.order},
                          {"offset", plan.offset},           {"arena_bytes", plan.arena_bytes},
                          {"lower_bound", plan.lower_bound}, {"persistent_bytes", plan.persistent_bytes}};
    if (!plan.view_of.empty()) j["view_of"] = plan.view_of;
    if (!plan.host_offset.empty()) {
        j["host_offset"] = plan.host_offset;
        j["host_bytes"] = plan.host_bytes;
    }
    return j;
}

MemoryPlan memory_plan_from_json(const nlohmann::json &j, const std::string &source) {
    TESSERA_CHECK(j.is_object(), source, ": a memory plan must be a JSON object, got ", j.type_name());
    auto field = [&](const char *name) -> const nlohmann::json & {
        TESSERA_CHECK(j.contains(name), source, ": missing field '", name, "'");
        return j.at(name);
    };
    auto integer = [&](const char *name) {
        const nlohmann::json &v = field(name);
        TESSERA_CHECK(v.is_number_integer(), source, ": field '", name, "' must be an integer, got ", json_preview(v));
        return v.get<int64_t>();
    };
    auto integers = [&](const char *name) {
        const nlohmann::json &v = field(name);
        TESSERA_CHECK(v.is_array(), source, ": field '", name, "' must be an array of integers");
        std::vector<int64_t> out;
        for (size_t i = 0; i < v.size(); i++) {
            TESSERA_CHECK(v[i].is_number_integer(), source, ": ", name, "[", i, "] must be an integer, got ",
                          json_preview(v[i]));
            out.push_back(v[i].get<int64_t>());
        }
        return out;
    };
    int64_t alignment = integer("alignment");
    TESSERA_CHECK(alignment == MemoryPlan::kAlignment, source, ": alignment ", alignment,
                  " is not supported; this build aligns tensors to ", MemoryPlan::kAlignment, " bytes");
    MemoryPlan plan;
    for (int64_t n : integers("order")) {
        TESSERA_CHECK(n >= 0 && n <= std::numeric_limits<NodeId>::max(), source, ": order has node id ", n);
        plan.order.push_back(static_cast<NodeId>(n));
    }
    plan.offset = integers("offset");
    plan.arena_bytes = integer("arena_bytes");
    plan.lower_bound = integer("lower_bound");
    plan.persistent_bytes = integer("persistent_bytes");
    // Plans written before swapping existed have neither field.
    if (j.contains("host_offset")) plan.host_offset = integers("host_offset");
    if (j.contains("host_bytes")) plan.host_bytes = integer("host_bytes");
    // Plans written before views existed have no views.
    if (j.contains("view_of"))
        for (int64_t t : integers("view_of")) {
            TESSERA_CHECK(t >= kNoTensor && t <= std::numeric_limits<TensorId>::max(), source,
                          ": view_of has tensor id ", t);
            plan.view_of.push_back(static_cast<TensorId>(t));
        }
    return plan;
}

}  // namespace tessera
