// The four-stream simulator. Compute, swap-out, swap-in and host each run
// their steps in issue order; a step starts when its stream is free and every
// step in its `after` has ended. A swap takes bytes over the bandwidth of its
// direction, a host update its host time. The iteration ends with the last
// step. The executor runs the same
// structure (one instruction per step, one event per `after`), which is what
// makes the prediction worth comparing with a measurement.
#include <algorithm>
#include <map>

#include "internal.h"
#include "tessera/error.h"

namespace tessera {
namespace {


constexpr int kSimStreams = 4;

double node_time_of(const std::vector<double> &times, NodeId n, size_t i, const char *which) {
    TESSERA_CHECK(n >= 0 && n < static_cast<int>(times.size()), "swap plan: step ", i, " runs node ", n, ", but only ",
                  times.size(), " ", which, " were given");
    return times[n];
}

// Fills start_s/end_s when `fill`; returns the iteration time.
double run_streams(std::vector<SwapStep> &steps, const std::vector<double> &node_time,
                   const std::vector<double> &host_time, double h2d, double d2h, bool fill, std::vector<double> &end) {
    end.assign(steps.size(), 0);
    double free_at[kSimStreams] = {0, 0, 0, 0}, last = 0;
    for (size_t i = 0; i < steps.size(); i++) {
        SwapStep &s = steps[i];
        int st = swap_step_stream(s.kind);
        double start = free_at[st];
        for (int d : s.after) {
            TESSERA_CHECK(d >= 0 && d < static_cast<int>(i), "swap plan: step ", i, " waits for step ", d,
                          ", which is not an earlier step");
            start = std::max(start, end[d]);
        }
        double dur = 0;
        switch (s.kind) {
        case SwapStep::Kind::Compute:
        case SwapStep::Kind::Recompute: dur = node_time_of(node_time, s.node, i, "node times"); break;
        case SwapStep::Kind::HostUpdate: dur = node_time_of(host_time, s.node, i, "host node times"); break;
        case SwapStep::Kind::SwapOut: dur = d2h > 0 ? static_cast<double>(s.bytes) / d2h : 0; break;
        case SwapStep::Kind::SwapIn: dur = h2d > 0 ? static_cast<double>(s.bytes) / h2d : 0; break;
        }
        end[i] = start + dur;
        free_at[st] = end[i];
        last = std::max(last, end[i]);
        if (fill) {
            s.start_s = start;
            s.end_s = end[i];
        }
    }
    return last;
}

}  // namespace

double simulate_swap_plan(const SwapPlan &plan, const std::vector<double> &node_time_s, double h2d_bytes_per_s,
                          double d2h_bytes_per_s) {
    std::vector<SwapStep> steps = plan.steps;
    std::vector<double> end;
    return run_streams(steps, node_time_s, plan.host_node_time_s, h2d_bytes_per_s, d2h_bytes_per_s, false, end);
}

namespace swap_detail {

double simulate_schedule(const Prepared &p, Schedule &s, std::vector<double> &end) {
    end.resize(s.steps.size());
    double free_at[kSimStreams] = {0, 0, 0, 0}, last = 0;
    for (int g : s.issue) {
        const IStep &st = s.steps[g];
        int k = swap_step_stream(st.kind);
        double start = free_at[k];
        for (int d = st.dep_begin; d < st.dep_end; d++) start = std::max(start, end[s.deps[d]]);
        double dur;
        if (st.kind == SwapStep::Kind::Compute || st.kind == SwapStep::Kind::Recompute) dur = p.node_time[st.node];
        else if (st.kind == SwapStep::Kind::HostUpdate) dur = p.host_time[st.node];
        else if (st.kind == SwapStep::Kind::SwapIn) dur = static_cast<double>(p.bufs[st.buf].raw_bytes) / p.h2d;
        else dur = static_cast<double>(p.bufs[st.buf].raw_bytes) / p.d2h;
        end[g] = start + dur;
        free_at[k] = end[g];
        last = std::max(last, end[g]);
    }
    return last;
}

SwapPlan make_plan(const Prepared &p, const std::vector<NodeId> &order, const Classes &c, const Layout &layout,
                   SwapPolicy policy, const Schedule &s) {
    const Graph &g = *p.g;
    SwapPlan plan;
    plan.policy = policy;
    plan.order = order;
    plan.pinned_bytes = layout.pinned_bytes;
    int64_t top = layout.pinned_bytes;
    // Pools in arena order (the largest class first), empty ones left out.
    for (int k = static_cast<int>(c.bytes.size()) - 1; k >= 0; k--) {
        if (layout.slots[k] == 0) continue;
        plan.pools.push_back(SwapPool{c.bytes[k], layout.slots[k], s.pool_offset[k]});
        top = std::max(top, s.pool_offset[k] + layout.slots[k] * c.bytes[k]);
    }
    plan.arena_bytes = policy == SwapPolicy::Ideal ? top : p.budget;
    int nt = g.num_tensors();
    plan.pinned.assign(nt, -1);
    plan.produce_at.assign(nt, -1);
    plan.swapped.assign(nt, 0);
    for (size_t b = 0; b < p.bufs.size(); b++) {
        TensorId r = p.bufs[b].root;
        plan.pinned[r] = layout.pin[b];
        plan.produce_at[r] = s.produce_at[b];
        plan.swapped[r] = s.moved[b] || (p.bufs[b].persistent && layout.pin[b] < 0);
    }
    std::vector<int> index_of(s.steps.size(), -1);
    for (size_t i = 0; i < s.issue.size(); i++) index_of[s.issue[i]] = static_cast<int>(i);
    plan.steps.reserve(s.issue.size());
    for (int gi : s.issue) {
        const IStep &st = s.steps[gi];
        SwapStep out;
        out.kind = st.kind;
        if (st.kind == SwapStep::Kind::Recompute) {
            out.node = st.node;
            out.tensor = p.bufs[st.buf].root;
            out.offset = st.offset;
        } else if (st.kind == SwapStep::Kind::Compute || st.kind == SwapStep::Kind::HostUpdate) {
            out.node = st.node;
        } else {
            out.tensor = p.bufs[st.buf].root;
            out.offset = st.offset;
            out.bytes = p.bufs[st.buf].raw_bytes;
        }
        for (int d = st.dep_begin; d < st.dep_end; d++) {
            int di = index_of[s.deps[d]];
            TESSERA_INTERNAL_ASSERT(di >= 0 && di < static_cast<int>(plan.steps.size()),
                                    "a swap step waits for a later one");
            if (swap_step_stream(s.steps[s.deps[d]].kind) == swap_step_stream(st.kind)) continue;  // same stream
            out.after.push_back(di);
        }
        std::sort(out.after.begin(), out.after.end());
        out.after.erase(std::unique(out.after.begin(), out.after.end()), out.after.end());
        if (st.kind == SwapStep::Kind::HostUpdate) {
            plan.host_node_time_s.resize(p.host_time.size(), 0.0);
            plan.host_node_time_s[st.node] = p.host_time[st.node];
        }
        plan.steps.push_back(std::move(out));
    }
    finalize_plan(g, plan, p.node_time, p.h2d, p.d2h);
    plan.ideal_time_s = p.ideal_time;
    return plan;
}

namespace {

// The plan's residencies, replayed in step order: a buffer is resident from
// its swap-in's (or producer's) start until its last use or swap-out ends,
// whichever is later. `high` is the largest offset + raw bytes touched (the
// device's high water); peak() the most aligned bytes resident at once.
class Residencies {
public:
    Residencies(const Graph &g, const SwapPlan &plan) : g_(g), plan_(plan) {
        const int nt = g.num_tensors();
        bytes_.assign(nt, 0);
        raw_.assign(nt, 0);
        for (TensorId t = 0; t < nt; t++) {
            TensorId r = storage_root(g, t);
            bytes_[r] = std::max(bytes_[r], buffer_bytes(g.tensor(t).type.bytes()));
            raw_[r] = std::max(raw_[r], g.tensor(t).type.bytes());
        }
        loc_.assign(nt, -1);
        start_.assign(nt, 0);
        end_.assign(nt, 0);
    }

    void swap_in(const SwapStep &s) {
        open(s.tensor, s.offset, s.start_s);
        end_[s.tensor] = s.end_s;
        high = std::max(high, s.offset + raw_[s.tensor]);
    }
    void swap_out(const SwapStep &s) {
        end_[s.tensor] = std::max(end_[s.tensor], s.end_s);
        high = std::max(high, s.offset + raw_[s.tensor]);
    }
    // A compute or recomputation step (a recomputation's output: a new stay).
    void compute(const SwapStep &s) {
        const Node &n = g_.node(s.node);
        if (s.kind == SwapStep::Kind::Recompute) open(s.tensor, s.offset, s.start_s);
        for (TensorId t : n.inputs) touch(t, s);
        for (TensorId t : n.outputs) {
            // An output written over an input (hand_over_slot): the input's
            // bytes become the output's when the step starts.
            const TensorId r = storage_root(g_, t);
            auto it = loc_[r] < 0 && plan_.pinned[r] < 0 ? occ_.find(plan_.produce_at[r]) : occ_.end();
            if (it != occ_.end() && std::any_of(n.inputs.begin(), n.inputs.end(),
                                                [&](TensorId x) { return storage_root(g_, x) == it->second; }))
                end_[it->second] = s.start_s;
            touch(t, s);
        }
    }
    int64_t peak() {
        for (TensorId r = 0; r < g_.num_tensors(); r++) close(r);
        std::sort(events_.begin(), events_.end(), [](const auto &a, const auto &b) {
            return a.first != b.first ? a.first < b.first : a.second < b.second;
        });
        int64_t cur = 0, most = 0;
        for (const auto &e : events_) {
            cur += e.second;
            most = std::max(most, cur);
        }
        return most;
    }

    int64_t high = 0;

private:
    void close(TensorId r) {
        if (loc_[r] < 0) return;
        events_.push_back({start_[r], bytes_[r]});
        events_.push_back({end_[r], -bytes_[r]});
        auto it = occ_.find(loc_[r]);
        if (it != occ_.end() && it->second == r) occ_.erase(it);
        loc_[r] = -1;
    }
    void open(TensorId r, int64_t off, double start) {
        auto it = occ_.find(off);
        if (it != occ_.end()) close(it->second);
        close(r);
        loc_[r] = off;
        occ_[off] = r;
        start_[r] = end_[r] = start;
    }
    void touch(TensorId t, const SwapStep &s) {
        TensorId r = storage_root(g_, t);
        if (plan_.pinned[r] >= 0) {
            high = std::max(high, plan_.pinned[r] + raw_[r]);
            return;
        }
        if (loc_[r] < 0) {
            if (plan_.produce_at[r] < 0) return;  // malformed; check_swap_plan says why
            open(r, plan_.produce_at[r], s.start_s);
        }
        end_[r] = std::max(end_[r], s.end_s);
        high = std::max(high, loc_[r] + raw_[r]);
    }

    const Graph &g_;
    const SwapPlan &plan_;
    // bytes_: what a buffer occupies (aligned); raw_: what kernels and copies
    // touch, which is what the device measures as its high water.
    std::vector<int64_t> bytes_, raw_, loc_;
    std::vector<double> start_, end_;
    std::map<int64_t, TensorId> occ_;
    std::vector<std::pair<double, int64_t>> events_;
};

}  // namespace

void finalize_plan(const Graph &g, SwapPlan &plan, const std::vector<double> &node_time, double h2d, double d2h) {
    std::vector<double> end;
    plan.time_s = run_streams(plan.steps, node_time, plan.host_node_time_s, h2d, d2h, true, end);
    plan.swap_in_bytes = plan.swap_out_bytes = 0;
    Residencies res(g, plan);
    for (const SwapStep &s : plan.steps) {
        if (s.kind == SwapStep::Kind::SwapIn) {
            plan.swap_in_bytes += s.bytes;
            res.swap_in(s);
        } else if (s.kind == SwapStep::Kind::SwapOut) {
            plan.swap_out_bytes += s.bytes;
            res.swap_out(s);
        } else if (s.kind == SwapStep::Kind::Compute || s.kind == SwapStep::Kind::Recompute) {
            res.compute(s);
        }
    }
    plan.peak_bytes = plan.pinned_bytes + res.peak();
    plan.high_water = res.high;
}

}  // namespace swap_detail
}  // namespace tessera
