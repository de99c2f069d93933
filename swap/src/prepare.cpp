// Preparing a swap problem for the planner (Prepared, internal.h): validating
// it, its buffers (storage roots) and their uses, the optimizer nodes that may
// run on the host, the activations that may be recomputed, the inputs an
// element-wise output may overwrite, the dependencies any reordering keeps,
// and the size classes and pool layouts (pins, slot counts) that candidates
// are made of. The scheduler that walks a candidate is in schedule.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "internal.h"
#include "tessera/error.h"
#include "tessera/text.h"

namespace tessera::swap_detail {

static void validate_and_index(const SwapProblem &pr, SwapPolicy policy, Prepared &p) {
    TESSERA_CHECK(pr.graph != nullptr, "swap problem: no graph given");
    const Graph &g = *pr.graph;
    p.g = &g;
    int nn = g.num_nodes();
    TESSERA_CHECK(!pr.order.empty(), "swap problem: the order is empty; give the nodes to run (e.g. every node, "
                                     "in index order)");
    TESSERA_CHECK(static_cast<int>(pr.node_time_s.size()) == nn, "swap problem: node_time_s has ",
                  pr.node_time_s.size(), " entries but the graph has ", nn, " nodes; give one time per NodeId");
    if (policy != SwapPolicy::Ideal) {
        TESSERA_CHECK(pr.budget > 0, "swap problem: the budget must be positive, got ", pr.budget, " bytes");
        TESSERA_CHECK(pr.h2d_bytes_per_s > 0 && std::isfinite(pr.h2d_bytes_per_s),
                      "swap problem: the host-to-device bandwidth must be positive, got ", pr.h2d_bytes_per_s,
                      " bytes/s");
        TESSERA_CHECK(pr.d2h_bytes_per_s > 0 && std::isfinite(pr.d2h_bytes_per_s),
                      "swap problem: the device-to-host bandwidth must be positive, got ", pr.d2h_bytes_per_s,
                      " bytes/s");
    }
    std::vector<int> pos(nn, -1);
    for (size_t i = 0; i < pr.order.size(); i++) {
        NodeId n = pr.order[i];
        TESSERA_CHECK(n >= 0 && n < nn, "swap problem: order[", i, "] = ", n, " is not a node of the graph (it has ",
                      nn, " nodes)");
        TESSERA_CHECK(pos[n] < 0, "swap problem: node '", g.node(n).call.name, "' appears twice in the order (at ",
                      pos[n], " and ", i, ")");
        double t = pr.node_time_s[n];
        TESSERA_CHECK(std::isfinite(t) && t >= 0, "swap problem: node '", g.node(n).call.name, "' has time ", t,
                      " s; times must be finite and non-negative");
        pos[n] = static_cast<int>(i);
    }
    for (size_t i = 0; i < pr.order.size(); i++) {
        const Node &node = g.node(pr.order[i]);
        for (TensorId t : node.inputs) {
            NodeId prod = g.tensor(t).producer;
            if (prod == kNoNode) continue;
            TESSERA_CHECK(pos[prod] >= 0, "swap problem: node '", node.call.name, "' reads '", g.tensor(t).name,
                          "', but its producer '", g.node(prod).call.name, "' is not in the order");
            TESSERA_CHECK(pos[prod] < static_cast<int>(i), "swap problem: the order is not topological: node '",
                          node.call.name, "' (position ", i, ") reads '", g.tensor(t).name, "', which '",
                          g.node(prod).call.name, "' produces later (position ", pos[prod], ")");
        }
    }
    p.order = pr.order;
    p.node_time = pr.node_time_s;
    p.budget = pr.budget;
    p.h2d = pr.h2d_bytes_per_s;
    p.d2h = pr.d2h_bytes_per_s;
    p.ideal_time = 0;
    for (NodeId n : pr.order) p.ideal_time += pr.node_time_s[n];
}

static void build_buffers(Prepared &p) {
    const Graph &g = *p.g;
    int nt = g.num_tensors(), nn = g.num_nodes();
    std::vector<bool> persist = persistent_tensors(g);
    std::vector<TensorId> root(nt);
    std::vector<int64_t> raw(nt, 0);
    for (TensorId t = 0; t < nt; t++) {
        root[t] = storage_root(g, t);
        raw[root[t]] = std::max(raw[root[t]], g.tensor(t).type.bytes());
    }
    std::vector<bool> touched(nt, false);
    for (NodeId n : p.order) {
        for (TensorId t : g.node(n).inputs) touched[root[t]] = true;
        for (TensorId t : g.node(n).outputs) touched[root[t]] = true;
    }
    std::vector<int> buf_of_root(nt, -1);
    p.bufs.clear();
    for (TensorId r = 0; r < nt; r++) {
        if (root[r] != r || (!touched[r] && !persist[r])) continue;
        Buffer b;
        b.root = r;
        b.raw_bytes = raw[r];
        b.bytes = buffer_bytes(raw[r]);
        b.persistent = persist[r];
        b.initial = g.tensor(r).producer == kNoNode;
        buf_of_root[r] = static_cast<int>(p.bufs.size());
        p.bufs.push_back(b);
    }
    p.buf_of_tensor.assign(nt, -1);
    for (TensorId t = 0; t < nt; t++) p.buf_of_tensor[t] = buf_of_root[root[t]];

    // Uses per node, one per buffer: read when an input has that root, write
    // when an output does.
    p.use_begin.assign(nn + 1, 0);
    p.uses.clear();
    std::vector<int> seen(p.bufs.size(), -1);
    std::vector<std::vector<Use>> per_node(nn);
    for (NodeId n : p.order) {
        auto &list = per_node[n];
        auto add = [&](TensorId t, bool write) {
            int b = p.buf_of_tensor[t];
            if (seen[b] != n) {
                seen[b] = n;
                list.push_back(Use{b, false, false});
            }
            for (Use &u : list)
                if (u.buf == b) (write ? u.write : u.read) = true;
        };
        for (TensorId t : g.node(n).inputs) add(t, false);
        for (TensorId t : g.node(n).outputs) add(t, true);
        for (const Use &u : list) {
            p.bufs[u.buf].uses++;
            for (TensorId t : g.node(n).outputs)
                if (root[t] == p.bufs[u.buf].root && g.tensor(p.bufs[u.buf].root).producer == n)
                    p.bufs[u.buf].producer = n;
        }
    }
    for (NodeId n = 0; n < nn; n++) {
        p.use_begin[n] = static_cast<int>(p.uses.size());
        p.uses.insert(p.uses.end(), per_node[n].begin(), per_node[n].end());
    }
    p.use_begin[nn] = static_cast<int>(p.uses.size());
    p.buf_use_begin.assign(p.bufs.size() + 1, 0);
    for (size_t b = 0; b < p.bufs.size(); b++) p.buf_use_begin[b + 1] = p.buf_use_begin[b] + p.bufs[b].uses;
    p.fwd_node.assign(nn, 0);
    for (NodeId n = 0; n < nn; n++) p.fwd_node[n] = !g.node(n).backward && !g.node(n).optimizer;

    // Pinning candidates: the most uses per byte first (a small weight read
    // by many operators saves the most swapping per byte of the arena).
    p.pin_rank.clear();
    for (size_t b = 0; b < p.bufs.size(); b++)
        if (p.bufs[b].persistent && p.bufs[b].uses > 0) p.pin_rank.push_back(static_cast<int>(b));
    std::stable_sort(p.pin_rank.begin(), p.pin_rank.end(), [&](int a, int b) {
        return static_cast<double>(p.bufs[a].uses) / p.bufs[a].bytes >
               static_cast<double>(p.bufs[b].uses) / p.bufs[b].bytes;
    });
}

// The optimizer nodes that may run on the host: every output updates a
// persistent tensor in place, and the problem gives a host time.
static void find_host_nodes(const SwapProblem &pr, bool allowed, Prepared &p) {
    const Graph &g = *p.g;
    p.host_ok.assign(g.num_nodes(), 0);
    p.host_fixed.assign(g.num_nodes(), 0);
    p.host_time.assign(g.num_nodes(), 0.0);
    p.host_nodes.clear();
    if (pr.host_node_time_s.empty() || !allowed) return;
    TESSERA_CHECK(static_cast<int>(pr.host_node_time_s.size()) == g.num_nodes(), "swap problem: host_node_time_s has ",
                  pr.host_node_time_s.size(), " entries but the graph has ", g.num_nodes(),
                  " nodes; give one host time per NodeId, or none");
    std::vector<bool> persist = persistent_tensors(g);
    for (NodeId n : p.order) {
        const Node &node = g.node(n);
        double t = pr.host_node_time_s[n];
        if (!node.optimizer || node.comm) continue;
        TESSERA_CHECK(std::isfinite(t) && t >= 0, "swap problem: node '", node.call.name, "' has host time ", t,
                      " s; times must be finite and non-negative");
        bool in_place = true;
        for (TensorId o : node.outputs) in_place = in_place && storage_root(g, o) != o && persist[storage_root(g, o)];
        if (!in_place) continue;
        p.host_ok[n] = 1;
        p.host_time[n] = t;
        p.host_nodes.push_back(n);
    }
}

// Forward activations that may be dropped and recomputed: not persistent,
// produced by a forward operator (not a collective) whose one output is the
// buffer's own storage.
static void find_recomputable(Prepared &p) {
    const Graph &g = *p.g;
    p.recompute_bufs.clear();
    p.recomputable.assign(p.bufs.size(), 0);
    // Running the producer again gives the buffer's value only if nothing
    // else writes it (in place) afterwards.
    std::vector<int> writers(p.bufs.size(), 0);
    for (NodeId n : p.order)
        for (int k = p.use_begin[n]; k < p.use_begin[n + 1]; k++) writers[p.uses[k].buf] += p.uses[k].write;
    for (size_t b = 0; b < p.bufs.size(); b++) {
        const Buffer &bf = p.bufs[b];
        if (bf.persistent || bf.producer == kNoNode || !p.fwd_node[bf.producer] || writers[b] != 1) continue;
        const Node &node = g.node(bf.producer);
        if (node.comm || node.outputs.size() != 1 || node.outputs[0] != bf.root) continue;
        p.recompute_bufs.push_back(static_cast<int>(b));
        p.recomputable[b] = 1;
    }
}

// Per node, the inputs whose slot its output may take (Prepared::overwrites).
static void find_overwrites(Prepared &p) {
    const Graph &g = *p.g;
    p.overwrites.assign(g.num_nodes(), {-1, -1});
    for (NodeId n : p.order) {
        const Node &node = g.node(n);
        if (node.comm || node.outputs.size() != 1) continue;
        const int y = p.buf_of_tensor[node.outputs[0]];
        if (y < 0 || p.bufs[y].persistent || p.bufs[y].root != node.outputs[0]) continue;
        int found = 0;
        for (int k = 0; k < static_cast<int>(node.inputs.size()) && found < 2; k++) {
            const int x = p.buf_of_tensor[node.inputs[k]];
            if (!op_may_overwrite_input(node.call.kind, k) || x < 0 || x == y || p.bufs[x].persistent) continue;
            if (p.bufs[x].raw_bytes != p.bufs[y].raw_bytes || (found == 1 && p.overwrites[n][0] == x)) continue;
            p.overwrites[n][found++] = x;
        }
    }
}

static void build_preds(Prepared &p) {
    int n = static_cast<int>(p.order.size());
    std::vector<std::vector<int>> preds(n);
    std::vector<int> last_write(p.bufs.size(), -1);
    std::vector<std::vector<int>> reads(p.bufs.size());
    int last_comm = -1;
    for (int i = 0; i < n; i++) {
        NodeId node = p.order[i];
        for (int k = p.use_begin[node]; k < p.use_begin[node + 1]; k++) {
            const Use &u = p.uses[k];
            if (last_write[u.buf] >= 0) preds[i].push_back(last_write[u.buf]);
            if (u.write) {
                for (int r : reads[u.buf])
                    if (r != i) preds[i].push_back(r);
                reads[u.buf].clear();
                last_write[u.buf] = i;
            } else {
                reads[u.buf].push_back(i);
            }
        }
        if (p.g->node(node).comm) {
            if (last_comm >= 0) preds[i].push_back(last_comm);
            last_comm = i;
        }
    }
    p.pred_begin.assign(n + 1, 0);
    p.preds.clear();
    for (int i = 0; i < n; i++) {
        auto &v = preds[i];
        std::sort(v.begin(), v.end());
        v.erase(std::unique(v.begin(), v.end()), v.end());
        p.pred_begin[i] = static_cast<int>(p.preds.size());
        p.preds.insert(p.preds.end(), v.begin(), v.end());
    }
    p.pred_begin[n] = static_cast<int>(p.preds.size());
}

static void take_homes(const SwapProblem &pr, Prepared &p) {
    const SwapPlan &h = *pr.homes_from;
    const Graph &g = *p.g;
    TESSERA_CHECK(static_cast<int>(h.pinned.size()) == g.num_tensors(), "swap problem: homes_from has ",
                  h.pinned.size(), " pinned entries but the graph has ", g.num_tensors(),
                  " tensors; it must be a plan for the same graph");
    p.fixed_homes = true;
    p.fixed_pin.assign(p.bufs.size(), -1);
    p.fixed_pinned_bytes = h.pinned_bytes;
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        if (h.pinned[t] < 0) continue;
        int b = p.buf_of_tensor[t];
        TESSERA_CHECK(b >= 0 && p.bufs[b].root == t && p.bufs[b].persistent, "swap problem: homes_from pins '",
                      g.tensor(t).name, "', which is not a persistent storage root of this graph");
        TESSERA_CHECK(h.pinned[t] + p.bufs[b].bytes <= h.pinned_bytes, "swap problem: homes_from pins '",
                      g.tensor(t).name, "' at offset ", h.pinned[t], ", beyond its pinned_bytes ", h.pinned_bytes);
        p.fixed_pin[b] = h.pinned[t];
    }
}

int64_t working_set(const Prepared &p, NodeId n) {
    int64_t ws = p.fixed_homes ? p.fixed_pinned_bytes : 0;
    for (int k = p.use_begin[n]; k < p.use_begin[n + 1]; k++) {
        int b = p.uses[k].buf;
        if (!p.fixed_homes || p.fixed_pin[b] < 0) ws += p.bufs[b].bytes;
    }
    return ws;
}

int64_t largest_working_set(const Prepared &p, NodeId *worst) {
    int64_t best = -1;
    for (NodeId n : p.order) {
        if (p.host_fixed[n]) continue;
        int64_t ws = working_set(p, n);
        if (ws > best) {
            best = ws;
            if (worst) *worst = n;
        }
    }
    return best;
}

Classes make_classes(const Prepared &p, double tolerance, int max_classes) {
    std::vector<int64_t> sizes;
    for (size_t b = 0; b < p.bufs.size(); b++)
        if (p.bufs[b].uses > 0 && !(p.fixed_homes && p.fixed_pin[b] >= 0)) sizes.push_back(p.bufs[b].bytes);
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    Classes c;
    for (double tol = tolerance;; tol = tol * 2 + 0.25) {
        c.bytes.clear();
        size_t i = 0;
        while (i < sizes.size()) {
            int64_t start = sizes[i], top = start;
            while (i < sizes.size() && (tol >= 0 ? sizes[i] <= start * (1 + tol) : sizes[i] == start)) top = sizes[i++];
            c.bytes.push_back(top);
        }
        if (tol < 0 || static_cast<int>(c.bytes.size()) <= max_classes) break;
    }
    c.of_buf.assign(p.bufs.size(), -1);
    for (size_t b = 0; b < p.bufs.size(); b++) {
        if (p.bufs[b].uses == 0 || (p.fixed_homes && p.fixed_pin[b] >= 0)) continue;
        c.of_buf[b] = static_cast<int>(std::lower_bound(c.bytes.begin(), c.bytes.end(), p.bufs[b].bytes) -
                                       c.bytes.begin());
    }
    return c;
}

std::vector<int> min_slots(const Prepared &p, const Classes &c, const std::vector<int64_t> &pin,
                           const std::vector<uint8_t> *host) {
    int nc = static_cast<int>(c.bytes.size());
    std::vector<int> need_at_least(nc + 1, 0), count(nc, 0);
    for (NodeId n : p.order) {
        if (host && !host->empty() && (*host)[n]) continue;
        for (int k = p.use_begin[n]; k < p.use_begin[n + 1]; k++) {
            int b = p.uses[k].buf;
            if (pin[b] < 0 && c.of_buf[b] >= 0) count[c.of_buf[b]]++;
        }
        int at_least = 0;
        for (int k = nc - 1; k >= 0; k--) {
            at_least += count[k];
            need_at_least[k] = std::max(need_at_least[k], at_least);
            count[k] = 0;
        }
    }
    std::vector<int> slots(nc, 0);
    int above = 0;
    for (int k = nc - 1; k >= 0; k--) {
        slots[k] = std::max(0, need_at_least[k] - above);
        above += slots[k];
    }
    return slots;
}

int64_t pool_bytes(const Classes &c, const std::vector<int> &slots) {
    int64_t s = 0;
    for (size_t k = 0; k < slots.size(); k++) s += slots[k] * c.bytes[k];
    return s;
}

int64_t max_pinnable(const Prepared &p, const Classes &c) {
    std::vector<int64_t> none(p.bufs.size(), -1);
    return p.budget - pool_bytes(c, min_slots(p, c, none));
}

void choose_pins(const Prepared &p, int64_t cap, Layout &layout) {
    layout.pin.assign(p.bufs.size(), -1);
    if (p.fixed_homes) {
        layout.pin = p.fixed_pin;
        layout.pinned_bytes = p.fixed_pinned_bytes;
        return;
    }
    std::vector<uint8_t> used_on_host(p.bufs.size(), 0);
    for (NodeId n : p.host_nodes)
        if (layout.on_host(n))
            for (int k = p.use_begin[n]; k < p.use_begin[n + 1]; k++) used_on_host[p.uses[k].buf] = 1;
    int64_t used = 0;
    for (int b : p.pin_rank) {
        if (used + p.bufs[b].bytes > cap || used_on_host[b]) continue;
        layout.pin[b] = used;
        used += p.bufs[b].bytes;
    }
    layout.pinned_bytes = used;
}

std::vector<double> demand_weights(const Prepared &p, const Classes &c, const std::vector<int64_t> &pin) {
    std::vector<double> w(c.bytes.size(), 0);
    for (size_t b = 0; b < p.bufs.size(); b++)
        if (c.of_buf[b] >= 0 && pin[b] < 0) w[c.of_buf[b]] += static_cast<double>(c.bytes[c.of_buf[b]]);
    return w;
}

void split_pools(const Prepared &p, const Classes &c, const std::vector<double> &weights, Layout &layout) {
    int nc = static_cast<int>(c.bytes.size());
    layout.slots = min_slots(p, c, layout.pin, &layout.host);
    // More slots of class k than buffers that fit them are of no use.
    std::vector<int> cap(nc, 0);
    for (size_t b = 0; b < p.bufs.size(); b++)
        if (c.of_buf[b] >= 0 && layout.pin[b] < 0) cap[c.of_buf[b]]++;
    for (int k = 1; k < nc; k++) cap[k] += cap[k - 1];
    int64_t room = p.budget - layout.pinned_bytes - pool_bytes(c, layout.slots);
    TESSERA_INTERNAL_ASSERT(room >= 0, "pools do not fit: ", room);
    double wsum = 0;
    for (int k = 0; k < nc; k++)
        if (cap[k] > layout.slots[k]) wsum += std::max(0.0, weights[k]);
    int64_t left = room;
    if (wsum > 0) {
        for (int k = 0; k < nc; k++) {
            if (cap[k] <= layout.slots[k]) continue;
            double share = std::max(0.0, weights[k]) / wsum * static_cast<double>(room);
            int64_t add = std::min<int64_t>(cap[k] - layout.slots[k], static_cast<int64_t>(share / c.bytes[k]));
            layout.slots[k] += static_cast<int>(add);
            left -= add * c.bytes[k];
        }
    }
    // What rounding left over goes to the heaviest classes that can use it.
    std::vector<int> by_weight(nc);
    for (int k = 0; k < nc; k++) by_weight[k] = k;
    std::stable_sort(by_weight.begin(), by_weight.end(), [&](int a, int b) { return weights[a] > weights[b]; });
    for (int k : by_weight) {
        int64_t add = std::min<int64_t>(cap[k] - layout.slots[k], left / c.bytes[k]);
        if (add <= 0) continue;
        layout.slots[k] += static_cast<int>(add);
        left -= add * c.bytes[k];
    }
}

Prepared prepare(const SwapProblem &problem, SwapPolicy policy, bool check_budget, HostUpdates host) {
    Prepared p;
    // Without a budget check (min_swap_budget), budget and bandwidths may be unset.
    validate_and_index(problem, check_budget ? policy : SwapPolicy::Ideal, p);
    build_buffers(p);
    find_host_nodes(problem, host != HostUpdates::Off && policy == SwapPolicy::Advisor, p);
    find_recomputable(p);
    find_overwrites(p);
    for (NodeId n : p.host_nodes)
        p.host_fixed[n] = host == HostUpdates::All || !check_budget || working_set(p, n) > p.budget;
    if (problem.homes_from && policy != SwapPolicy::Ideal) take_homes(problem, p);
    build_preds(p);
    if (policy == SwapPolicy::Ideal) return p;
    if (p.fixed_homes && check_budget)
        TESSERA_CHECK(p.fixed_pinned_bytes <= p.budget, "budget ", format_bytes(p.budget),
                      " cannot work: the plan given as homes_from pins ", format_bytes(p.fixed_pinned_bytes),
                      " of persistent tensors");
    if (!check_budget) return p;
    NodeId worst = kNoNode;
    int64_t ws = largest_working_set(p, &worst);
    if (ws > p.budget) {
        const Graph &g = *p.g;
        std::vector<int> bs;
        for (int k = p.use_begin[worst]; k < p.use_begin[worst + 1]; k++)
            if (!p.fixed_homes || p.fixed_pin[p.uses[k].buf] < 0) bs.push_back(p.uses[k].buf);
        std::stable_sort(bs.begin(), bs.end(), [&](int a, int b) { return p.bufs[a].bytes > p.bufs[b].bytes; });
        std::string list;
        for (size_t k = 0; k < bs.size() && k < 8; k++)
            list += (k ? ", " : "") + g.tensor(p.bufs[bs[k]].root).name + " " + format_bytes(p.bufs[bs[k]].bytes);
        if (bs.size() > 8) list += ", and " + std::to_string(bs.size() - 8) + " more";
        std::string pinned =
            p.fixed_homes ? " plus " + format_bytes(p.fixed_pinned_bytes) + " of pinned persistent tensors" : "";
        int64_t pools = 0;
        pick_classes(p, &pools);
        int64_t smallest = std::max(ws, pools);
        fail("budget ", format_bytes(p.budget), " (", p.budget, " bytes) cannot work: operator '",
             g.node(worst).call.name, "' needs ", format_bytes(ws), " (", ws, " bytes) for its inputs and outputs (", list, ")", pinned,
             "; the smallest budget that can is ", format_bytes(smallest), " (", smallest, " bytes)");
    }
    return p;
}

// Picks size classes whose minimal pools fit the budget: a few classes with
// little rounding first; exact sizes, then coarser classes, when rounding up
// makes the pools too big. Returns false when none fits.
bool pick_classes(Prepared &p, int64_t *smallest) {
    struct Try {
        double tol;
        int max;
    };
    const Try tries[] = {{0.25, 16}, {-1, 0}, {0.25, 1 << 30}, {0.5, 16}, {1.0, 8}, {1e18, 1}};
    int64_t best = std::numeric_limits<int64_t>::max();
    std::vector<int64_t> none(p.bufs.size(), -1);
    if (p.fixed_homes) none = p.fixed_pin;
    bool found = false;
    for (const Try &t : tries) {
        Classes c = make_classes(p, t.tol, t.max);
        int64_t need = pool_bytes(c, min_slots(p, c, none, &p.host_fixed)) + (p.fixed_homes ? p.fixed_pinned_bytes : 0);
        best = std::min(best, need);
        if (!found && need <= p.budget) {
            p.classes = std::move(c);
            found = true;
        }
    }
    if (smallest) *smallest = best;
    return found;
}

}  // namespace tessera::swap_detail
