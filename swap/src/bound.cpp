// swap_lower_bound: no plan for a problem can be faster than this.
//
// A plan runs four streams (compute, swap-in, swap-out, host), so its step is
// at least the busiest stream's work. Whatever the order, layout, swaps and
// recomputations, some work no plan avoids:
//   * compute: every operator that runs on the device;
//   * swap-in: every persistent buffer a device operator reads before it
//     writes it, less what the arena can keep pinned (at most the budget);
//   * swap-out: every persistent buffer a device operator writes, less what
//     can stay pinned; plus the gradients of the updates run on the host;
//   * host: the updates run on the host;
//   * the turn: take a node that every forward read of a buffer precedes and
//     every backward read follows (where the backward pass starts). The
//     weights read on both sides of it and the activations made before it
//     and read after it exceed the budget by some bytes. Right after that
//     node those bytes are not on the device, so they come back later: on
//     the swap-in stream, or, for activations that may be, recomputed on the
//     compute stream.
// Moving an update to the host shortens compute, swap-in and swap-out and
// lengthens the host stream. For a candidate step T the bound asks whether
// each stream fits T with the host's spare time spent on that stream's own
// best choice of updates (fractions allowed), and whether the swap-in and
// compute streams' spare time can bring back the turn's bytes (recomputing
// the cheapest per byte first). Every relaxation only lowers the bound. The
// least T that passes, found by bisection, is the bound.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "internal.h"

namespace tessera {
namespace swap_detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// What running one optional update on the host saves on one stream.
struct Saving {
    double host_s = 0;
    double saves_s = 0;
};

// One stream's work with only the fixed updates on the host (may be negative
// for the links: the budget is taken off before what the host saves), and
// what each optional update would save it, best saving per host second first.
struct StreamWork {
    double base_s = 0;
    std::vector<Saving> savings;
};

void sort_savings(StreamWork &w) {
    auto rate = [](const Saving &s) { return s.host_s > 0 ? s.saves_s / s.host_s : kInf; };
    std::stable_sort(w.savings.begin(), w.savings.end(),
                     [&](const Saving &a, const Saving &b) { return rate(a) > rate(b); });
}

// The most time stream `w` can save with `host_s` of host time, moving
// fractions of updates in the best order.
double most_saved(const StreamWork &w, double host_s) {
    double saved = 0;
    for (const Saving &s : w.savings) {
        if (s.saves_s <= 0) break;
        double part = s.host_s > 0 ? std::min(1.0, host_s / s.host_s) : 1.0;
        saved += part * s.saves_s;
        host_s -= part * s.host_s;
        if (part < 1) break;
    }
    return saved;
}

// A node that runs on the device in every plan: not an update that may run
// on the host.
bool always_on_device(const Prepared &p, NodeId n) { return !p.host_ok[n]; }
bool device_node(const Prepared &p, NodeId n) { return !p.host_fixed[n]; }

// Positions reachable from `from` along `edges` (from itself included).
std::vector<uint8_t> reach(const std::vector<std::vector<int>> &edges, int from) {
    std::vector<uint8_t> seen(edges.size(), 0);
    std::vector<int> stack{from};
    seen[from] = 1;
    while (!stack.empty()) {
        int i = stack.back();
        stack.pop_back();
        for (int j : edges[i])
            if (!seen[j]) seen[j] = 1, stack.push_back(j);
    }
    return seen;
}

// Activations that may be recomputed (bytes, producer's time), cheapest per
// byte first.
using Recomputable = std::vector<std::pair<double, double>>;

void sort_cheapest_per_byte(Recomputable &r) {
    std::stable_sort(r.begin(), r.end(),
                     [](const auto &a, const auto &b) { return a.second * b.first < b.second * a.first; });
}

// What must be on the device right after the turn node, or come back later.
struct Turn {
    int64_t weight_bytes = 0;      // persistent: read before and after, not written between
    int64_t activation_bytes = 0;  // not persistent: written before and read after
    // The activations among them that may be recomputed: bytes and the
    // producer's time, cheapest per byte first.
    Recomputable recomputable;
    int64_t bytes() const { return weight_bytes + activation_bytes; }
};

// The dependency graph over positions of p.order, both ways, and per buffer
// the position of its first write by a node always on the device.
struct Dag {
    std::vector<std::vector<int>> pred, succ;
    std::vector<int> first_write;
};

Dag dag_of(const Prepared &p) {
    Dag d;
    int n = static_cast<int>(p.order.size());
    d.pred.resize(n);
    d.succ.resize(n);
    for (int i = 0; i < n; i++)
        for (int k = p.pred_begin[i]; k < p.pred_begin[i + 1]; k++) {
            d.pred[i].push_back(p.preds[k]);
            d.succ[p.preds[k]].push_back(i);
        }
    d.first_write.assign(p.bufs.size(), n);
    for (int i = n - 1; i >= 0; i--) {
        NodeId node = p.order[i];
        if (!always_on_device(p, node)) continue;
        for (int k = p.use_begin[node]; k < p.use_begin[node + 1]; k++)
            if (p.uses[k].write) d.first_write[p.uses[k].buf] = i;
    }
    return d;
}

// The turn at position x, counting only nodes always on the device. A read
// of a persistent buffer counts where it reads the step-start value: no write
// before it (reorderings keep a buffer's reads and writes in the given order,
// p.preds, so positions tell). "Before" is x or comes before it in every
// order; "after" comes after it in every order.
Turn turn_at(const Prepared &p, const Dag &d, int x) {
    std::vector<uint8_t> before = reach(d.pred, x), after = reach(d.succ, x);
    after[x] = 0;
    std::vector<uint8_t> read_before(p.bufs.size(), 0), read_after(p.bufs.size(), 0), made_before(p.bufs.size(), 0);
    for (size_t i = 0; i < p.order.size(); i++) {
        NodeId n = p.order[i];
        if ((!before[i] && !after[i]) || !always_on_device(p, n)) continue;
        for (int k = p.use_begin[n]; k < p.use_begin[n + 1]; k++) {
            const Use &u = p.uses[k];
            if (u.write && before[i]) made_before[u.buf] = 1;
            if (u.read && (!p.bufs[u.buf].persistent || static_cast<int>(i) <= d.first_write[u.buf]))
                (before[i] ? read_before : read_after)[u.buf] = 1;
        }
    }
    const std::vector<uint8_t> &recomputable = p.recomputable;
    Turn t;
    for (size_t b = 0; b < p.bufs.size(); b++) {
        const Buffer &bf = p.bufs[b];
        if (bf.persistent && read_before[b] && read_after[b]) t.weight_bytes += bf.raw_bytes;
        if (bf.persistent || !made_before[b] || !read_after[b]) continue;
        t.activation_bytes += bf.raw_bytes;
        if (recomputable[b]) t.recomputable.push_back({static_cast<double>(bf.raw_bytes), p.node_time[bf.producer]});
    }
    sort_cheapest_per_byte(t.recomputable);
    return t;
}

// The positions where the backward pass may start: the first 8 backward
// nodes with no backward node before them.
std::vector<int> turn_candidates(const Prepared &p, const Dag &d) {
    std::vector<int> found;
    for (size_t i = 0; i < p.order.size() && found.size() < 8; i++) {
        if (!p.g->node(p.order[i]).backward) continue;
        bool first = true;
        for (int j : d.pred[i]) first = first && !p.g->node(p.order[j]).backward;
        if (first) found.push_back(static_cast<int>(i));
    }
    return found;
}

// The turn with the most bytes across it.
Turn worst_turn(const Prepared &p, const Dag &d) {
    Turn worst;
    for (int x : turn_candidates(p, d)) {
        Turn t = turn_at(p, d, x);
        if (t.bytes() > worst.bytes()) worst = std::move(t);
    }
    return worst;
}

// Per buffer: the number of device operators that read it and that write it,
// and whether its first access in the order is a read (reorderings keep the
// order of a buffer's reads and writes, p.preds).
struct BufferAccess {
    std::vector<int> readers, writers;
    std::vector<uint8_t> read_first;
};

BufferAccess device_access(const Prepared &p) {
    BufferAccess a;
    a.readers.assign(p.bufs.size(), 0);
    a.writers.assign(p.bufs.size(), 0);
    a.read_first.assign(p.bufs.size(), 0);
    std::vector<uint8_t> seen(p.bufs.size(), 0);
    for (NodeId n : p.order) {
        if (!device_node(p, n)) continue;
        for (int k = p.use_begin[n]; k < p.use_begin[n + 1]; k++) {
            const Use &u = p.uses[k];
            a.readers[u.buf] += u.read;
            a.writers[u.buf] += u.write;
            if (!seen[u.buf]) a.read_first[u.buf] = u.read;  // an in-place update reads the old value
            seen[u.buf] = 1;
        }
    }
    return a;
}

// What running optional update n on the host saves each stream: its compute;
// the swap-in of the persistent buffers only it reads first (its moments);
// the swap-out of the persistent buffers only it writes, less the swap-out of
// the gradients only it reads.
void add_savings(const Prepared &p, const BufferAccess &a, NodeId n, StreamWork &compute, StreamWork &in,
                 StreamWork &out) {
    double host_s = p.host_time[n];
    double in_bytes = 0, out_bytes = 0;
    for (int k = p.use_begin[n]; k < p.use_begin[n + 1]; k++) {
        const Use &u = p.uses[k];
        const Buffer &b = p.bufs[u.buf];
        double bytes = static_cast<double>(b.raw_bytes);
        if (b.persistent && a.read_first[u.buf] && a.readers[u.buf] == 1) in_bytes += bytes;
        if (b.persistent && u.write && a.writers[u.buf] == 1) out_bytes += bytes;
        if (!b.persistent && u.read && !u.write && a.readers[u.buf] == 1) out_bytes -= bytes;
    }
    compute.savings.push_back({host_s, p.node_time[n]});
    in.savings.push_back({host_s, in_bytes / p.h2d});
    out.savings.push_back({host_s, out_bytes / p.d2h});
}

// The streams' work with only the fixed updates on the host, and the turn.
struct Work {
    StreamWork compute, in, out;
    double fixed_host_s = 0;
    Turn turn;
    double turn_excess_bytes = 0;  // what the turn's bytes exceed the budget by
    double in_bytes_per_s = 0;
};

Work stream_work(const Prepared &p, const Dag &d, const BufferAccess &a) {
    Work w;
    double in_bytes = 0, out_bytes = 0;
    std::vector<uint8_t> gradient_out(p.bufs.size(), 0);
    for (size_t b = 0; b < p.bufs.size(); b++) {
        if (!p.bufs[b].persistent) continue;
        if (a.read_first[b]) in_bytes += static_cast<double>(p.bufs[b].raw_bytes);
        if (a.writers[b] > 0) out_bytes += static_cast<double>(p.bufs[b].raw_bytes);
    }
    for (NodeId n : p.order) {
        if (device_node(p, n)) {
            w.compute.base_s += p.node_time[n];
            continue;
        }
        w.fixed_host_s += p.host_time[n];
        // Its gradients leave the device (those no device operator reads).
        for (int k = p.use_begin[n]; k < p.use_begin[n + 1]; k++) {
            const Use &u = p.uses[k];
            if (p.bufs[u.buf].persistent || !u.read || a.readers[u.buf] > 0 || gradient_out[u.buf]) continue;
            gradient_out[u.buf] = 1;
            out_bytes += static_cast<double>(p.bufs[u.buf].raw_bytes);
        }
    }
    double budget = static_cast<double>(p.budget);
    w.in.base_s = (in_bytes - budget) / p.h2d;
    w.out.base_s = (out_bytes - budget) / p.d2h;
    w.turn = worst_turn(p, d);
    w.turn_excess_bytes = std::max(0.0, static_cast<double>(w.turn.bytes()) - budget);
    w.in_bytes_per_s = p.h2d;
    for (NodeId n : p.host_nodes)
        if (!p.host_fixed[n]) add_savings(p, a, n, w.compute, w.in, w.out);
    for (StreamWork *s : {&w.compute, &w.in, &w.out}) sort_savings(*s);
    return w;
}

// The most bytes recomputing `recomputable` (bytes and producer time,
// cheapest per byte first) brings back in `s`.
double recomputed_bytes(const Recomputable &recomputable, double s) {
    double bytes = 0;
    for (const auto &[b, time] : recomputable) {
        if (time > s) return bytes + b * s / time;
        bytes += b;
        s -= time;
    }
    return bytes;
}

// The first stream that cannot fit a step of `t`, or nullptr.
const char *over(const Work &w, double t) {
    double host = t - w.fixed_host_s;
    if (host < 0) return "host";
    double compute_spare = t - (w.compute.base_s - most_saved(w.compute, host));
    double in_spare = t - std::max(0.0, w.in.base_s - most_saved(w.in, host));
    double out_spare = t - std::max(0.0, w.out.base_s - most_saved(w.out, host));
    if (compute_spare < 0) return "compute";
    if (in_spare < 0) return "swap-in";
    if (out_spare < 0) return "swap-out";
    double brought_back = in_spare * w.in_bytes_per_s + recomputed_bytes(w.turn.recomputable, compute_spare);
    if (brought_back < w.turn_excess_bytes) return "turn";
    return nullptr;
}

// The step split at a turn node x (src comment at the top, "phased"). Every
// node before x ends by the time x does, and the work of every node after it
// starts then, so the step is at least (the work before) + (the work after):
//   * before: the compute of the nodes before x, and the swap-in of the
//     step-start values they read, less the budget (what may be resident
//     when the step starts);
//   * after: the compute of the nodes after x and of their recomputations;
//     the swap-in of the step-start values and of the activations made
//     before x that they read, less the budget (what x leaves resident); the
//     swap-out of the persistent buffers they write, less the budget; and
//     the updates run on the host, which read gradients made after x.
// Updates that may run on either side save what only they touch, shared
// equally where several updates touch a buffer.
struct Phases {
    double before_s = 0;
    bool before_by_swap_in = false;
    StreamWork compute, in, out;  // after x; in and out in seconds of link time
    double host_s = 0;            // the fixed host updates after x
    Recomputable recomputable;    // activations across x
    double in_bytes_per_s = 0;
};

// Per buffer, what the nodes after x do with it.
struct AfterAccess {
    std::vector<uint8_t> device_reads, device_writes;  // by nodes always on the device
    std::vector<int> optional_reads, optional_writes;  // by updates that may run on the host
};

// A buffer a node reads as the step started: persistent, and not yet written
// by a node always on the device.
bool start_value(const Prepared &p, const Dag &d, int pos, int buf) {
    return p.bufs[buf].persistent && pos <= d.first_write[buf];
}

// The work before x; `made_before` gets the activations the nodes before x write.
double work_before(const Prepared &p, const Dag &d, const std::vector<uint8_t> &before, int x,
                   std::vector<uint8_t> &made_before, bool &by_swap_in) {
    double compute = 0, in_bytes = 0;
    std::vector<uint8_t> counted(p.bufs.size(), 0);
    for (int i = 0; i <= x; i++) {
        NodeId n = p.order[i];
        if (!before[i] || !always_on_device(p, n)) continue;
        compute += p.node_time[n];
        for (int k = p.use_begin[n]; k < p.use_begin[n + 1]; k++) {
            const Use &u = p.uses[k];
            if (u.write && !p.bufs[u.buf].persistent) made_before[u.buf] = 1;
            if (!u.read || !start_value(p, d, i, u.buf) || counted[u.buf]) continue;
            counted[u.buf] = 1;
            in_bytes += static_cast<double>(p.bufs[u.buf].raw_bytes);
        }
    }
    double in = std::max(0.0, in_bytes - static_cast<double>(p.budget)) / p.h2d;
    by_swap_in = in > compute;
    return std::max(compute, in);
}

AfterAccess access_after(const Prepared &p, const Dag &d, const std::vector<uint8_t> &after) {
    AfterAccess a;
    a.device_reads.assign(p.bufs.size(), 0);
    a.device_writes.assign(p.bufs.size(), 0);
    a.optional_reads.assign(p.bufs.size(), 0);
    a.optional_writes.assign(p.bufs.size(), 0);
    for (size_t i = 0; i < p.order.size(); i++) {
        NodeId n = p.order[i];
        if (!after[i] || p.host_fixed[n]) continue;
        bool always = always_on_device(p, n);
        for (int k = p.use_begin[n]; k < p.use_begin[n + 1]; k++) {
            const Use &u = p.uses[k];
            if (u.read && start_value(p, d, static_cast<int>(i), u.buf))
                always ? a.device_reads[u.buf] = 1 : a.optional_reads[u.buf]++;
            if (u.write && p.bufs[u.buf].persistent) always ? a.device_writes[u.buf] = 1 : a.optional_writes[u.buf]++;
        }
    }
    return a;
}

// What running optional update n (after x) on the host saves each stream
// after x: its compute, its share of what only updates read or write, less
// its gradient's swap-out.
void add_savings_after(const Prepared &p, const BufferAccess &all, const AfterAccess &a, NodeId n, Phases &ph) {
    double in_bytes = 0, out_bytes = 0;
    for (int k = p.use_begin[n]; k < p.use_begin[n + 1]; k++) {
        const Use &u = p.uses[k];
        double bytes = static_cast<double>(p.bufs[u.buf].raw_bytes);
        if (!p.bufs[u.buf].persistent) {
            if (u.read && !u.write && all.readers[u.buf] == 1) out_bytes -= bytes;
            continue;
        }
        if (a.optional_reads[u.buf] > 0 && !a.device_reads[u.buf] && u.read)
            in_bytes += bytes / a.optional_reads[u.buf];
        if (a.optional_writes[u.buf] > 0 && !a.device_writes[u.buf] && u.write)
            out_bytes += bytes / a.optional_writes[u.buf];
    }
    double host_s = p.host_time[n];
    ph.compute.savings.push_back({host_s, p.node_time[n]});
    ph.in.savings.push_back({host_s, in_bytes / p.h2d});
    ph.out.savings.push_back({host_s, out_bytes / p.d2h});
}

Phases phases_at(const Prepared &p, const Dag &d, const BufferAccess &all, int x) {
    std::vector<uint8_t> before = reach(d.pred, x), after = reach(d.succ, x);
    after[x] = 0;
    Phases ph;
    ph.in_bytes_per_s = p.h2d;
    std::vector<uint8_t> made_before(p.bufs.size(), 0);
    ph.before_s = work_before(p, d, before, x, made_before, ph.before_by_swap_in);
    AfterAccess a = access_after(p, d, after);
    double in_bytes = 0, out_bytes = 0;
    std::vector<uint8_t> activation_after(p.bufs.size(), 0), gradient_out(p.bufs.size(), 0);
    for (size_t i = x + 1; i < p.order.size(); i++) {
        NodeId n = p.order[i];
        if (!after[i]) continue;
        if (p.host_fixed[n]) ph.host_s += p.host_time[n];
        else ph.compute.base_s += p.node_time[n];
        for (int k = p.use_begin[n]; k < p.use_begin[n + 1]; k++) {
            const Use &u = p.uses[k];
            if (!u.read || p.bufs[u.buf].persistent) continue;
            // Activations made before x that a device operator reads after it.
            if (always_on_device(p, n) && made_before[u.buf]) activation_after[u.buf] = 1;
            // Gradients that leave the device for an update fixed on the host.
            if (p.host_fixed[n] && all.readers[u.buf] == 0) gradient_out[u.buf] = 1;
        }
        if (!always_on_device(p, n) && !p.host_fixed[n]) add_savings_after(p, all, a, n, ph);
    }
    const std::vector<uint8_t> &recomputable = p.recomputable;
    for (size_t b = 0; b < p.bufs.size(); b++) {
        double bytes = static_cast<double>(p.bufs[b].raw_bytes);
        if (a.device_reads[b] || a.optional_reads[b] || activation_after[b]) in_bytes += bytes;
        if (a.device_writes[b] || a.optional_writes[b] || gradient_out[b]) out_bytes += bytes;
        if (activation_after[b] && recomputable[b]) ph.recomputable.push_back({bytes, p.node_time[p.bufs[b].producer]});
    }
    sort_cheapest_per_byte(ph.recomputable);
    double budget = static_cast<double>(p.budget);
    ph.in.base_s = (in_bytes - budget) / p.h2d;
    ph.out.base_s = (out_bytes - budget) / p.d2h;
    for (StreamWork *s : {&ph.compute, &ph.in, &ph.out}) sort_savings(*s);
    return ph;
}

// The first stream that cannot fit `t` after the turn, or nullptr.
const char *over_after(const Phases &ph, double t) {
    double host = t - ph.host_s;
    if (host < 0) return "host";
    double compute_spare = t - (ph.compute.base_s - most_saved(ph.compute, host));
    if (compute_spare < 0) return "compute";
    double in = ph.in.base_s - most_saved(ph.in, host) -
                recomputed_bytes(ph.recomputable, compute_spare) / ph.in_bytes_per_s;
    if (in > t) return "swap-in";
    if (ph.out.base_s - most_saved(ph.out, host) > t) return "swap-out";
    return nullptr;
}

// The least t that `over(t)` passes, by bisection below `hi` (which passes).
template <typename Over>
double least_passing(double hi, Over over) {
    double lo = 0;
    for (int it = 0; it < 200 && hi - lo > 1e-12 * hi; it++) {
        double mid = 0.5 * (lo + hi);
        (over(mid) ? lo : hi) = mid;
    }
    return lo;
}

// The phased bound at its best turn, and what sets it ("swap-in, then host").
double phased_bound(const Prepared &p, const Dag &d, const BufferAccess &all, std::string &limit) {
    double best = 0;
    for (int x : turn_candidates(p, d)) {
        Phases ph = phases_at(p, d, all, x);
        // Passes: nothing more on the host, every activation swapped in.
        double hi = std::max({ph.compute.base_s, ph.in.base_s, ph.out.base_s, ph.host_s, 1e-30});
        double after = least_passing(hi, [&](double t) { return over_after(ph, t) != nullptr; });
        if (ph.before_s + after <= best) continue;
        best = ph.before_s + after;
        const char *second = over_after(ph, after * (1 - 1e-9));
        limit.clear();
        if (ph.before_s > 0) limit.append(ph.before_by_swap_in ? "swap-in, then " : "compute, then ");
        limit.append(second ? second : "compute");
        if (ph.before_s <= 0) limit.append(" after the turn");
    }
    return best;
}

}  // namespace
}  // namespace swap_detail

SwapBound swap_lower_bound(const SwapProblem &problem, HostUpdates host) {
    using namespace swap_detail;
    Prepared p = prepare(problem, SwapPolicy::Advisor, true, host);
    const Dag d = dag_of(p);
    const BufferAccess access = device_access(p);
    Work w = stream_work(p, d, access);
    // Passes: nothing more on the host, and every turn byte swapped in.
    double hi = std::max({w.compute.base_s, std::max(0.0, w.in.base_s) + w.turn_excess_bytes / p.h2d, w.out.base_s,
                          w.fixed_host_s});
    SwapBound b;
    b.streams_s = least_passing(hi, [&](double t) { return over(w, t) != nullptr; });
    const char *limit = over(w, b.streams_s * (1 - 1e-9));
    b.limit = limit ? limit : "compute";
    std::string phased_limit;
    b.phased_s = phased_bound(p, d, access, phased_limit);
    b.time_s = std::max(b.streams_s, b.phased_s);
    if (b.phased_s > b.streams_s) b.limit = phased_limit;
    b.compute_s = w.compute.base_s;
    b.swap_in_s = std::max(0.0, w.in.base_s);
    b.swap_out_s = std::max(0.0, w.out.base_s);
    b.turn_weight_bytes = w.turn.weight_bytes;
    b.turn_activation_bytes = w.turn.activation_bytes;
    return b;
}

}  // namespace tessera
