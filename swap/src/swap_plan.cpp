// The swap plan as a value: names, JSON and the table. check_swap_plan is in
// check_plan.cpp.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include <fmt/format.h>

#include "internal.h"
#include "tessera/error.h"
#include "tessera/json_input.h"
#include "tessera/swap/swap_plan.h"
#include "tessera/text.h"

namespace tessera {

const char *swap_policy_name(SwapPolicy p) {
    switch (p) {
    case SwapPolicy::Advisor: return "advisor";
    case SwapPolicy::Lru: return "lru";
    case SwapPolicy::Vdnn: return "vdnn";
    case SwapPolicy::Ideal: return "ideal";
    }
    return "?";
}

SwapPolicy swap_policy_from_name(const std::string &name) {
    for (SwapPolicy p : {SwapPolicy::Advisor, SwapPolicy::Lru, SwapPolicy::Vdnn, SwapPolicy::Ideal})
        if (name == swap_policy_name(p)) return p;
    fail("unknown swap policy '", name, "'; valid: advisor, lru, vdnn, ideal");
}

const char *host_updates_name(HostUpdates h) {
    switch (h) {
    case HostUpdates::Off: return "off";
    case HostUpdates::Auto: return "auto";
    case HostUpdates::All: return "all";
    }
    return "?";
}

HostUpdates host_updates_from_name(const std::string &name) {
    for (HostUpdates h : {HostUpdates::Off, HostUpdates::Auto, HostUpdates::All})
        if (name == host_updates_name(h)) return h;
    fail("unknown host-updates setting '", name, "'; valid: off, auto, all");
}

const char *swap_step_kind_name(SwapStep::Kind k) {
    switch (k) {
    case SwapStep::Kind::Compute: return "compute";
    case SwapStep::Kind::SwapOut: return "swap-out";
    case SwapStep::Kind::SwapIn: return "swap-in";
    case SwapStep::Kind::HostUpdate: return "host-update";
    case SwapStep::Kind::Recompute: return "recompute";
    }
    return "?";
}

int swap_step_stream(SwapStep::Kind k) {
    switch (k) {
    case SwapStep::Kind::Compute:
    case SwapStep::Kind::Recompute: return 0;
    case SwapStep::Kind::SwapOut: return 1;
    case SwapStep::Kind::SwapIn: return 2;
    case SwapStep::Kind::HostUpdate: return 3;
    }
    return 0;
}

namespace {

SwapStep::Kind step_kind_from_name(const std::string &name, const std::string &where) {
    for (SwapStep::Kind k : {SwapStep::Kind::Compute, SwapStep::Kind::SwapOut, SwapStep::Kind::SwapIn,
                             SwapStep::Kind::HostUpdate, SwapStep::Kind::Recompute})
        if (name == swap_step_kind_name(k)) return k;
    fail(where, ": unknown step kind '", name, "'; valid: compute, swap-out, swap-in, host-update, recompute");
}


}  // namespace

// ---------------------------------------------------------------------------
// JSON.

nlohmann::json swap_plan_to_json(const SwapPlan &plan) {
    nlohmann::json j;
    j["policy"] = swap_policy_name(plan.policy);
    j["order"] = plan.order;
    j["arena_bytes"] = plan.arena_bytes;
    j["pinned_bytes"] = plan.pinned_bytes;
    nlohmann::json pools = nlohmann::json::array();
    for (const SwapPool &p : plan.pools)
        pools.push_back({{"slot_bytes", p.slot_bytes}, {"slots", p.slots}, {"offset", p.offset}});
    j["pools"] = pools;
    j["pinned"] = plan.pinned;
    j["produce_at"] = plan.produce_at;
    j["swapped"] = plan.swapped;
    nlohmann::json steps = nlohmann::json::array();
    for (const SwapStep &s : plan.steps) {
        nlohmann::json o;
        o["kind"] = swap_step_kind_name(s.kind);
        if (s.node != kNoNode) o["node"] = s.node;
        if (s.tensor != kNoTensor) o["tensor"] = s.tensor;
        if (s.offset != -1) o["offset"] = s.offset;
        if (s.bytes != 0) o["bytes"] = s.bytes;
        if (!s.after.empty()) o["after"] = s.after;
        o["start_s"] = s.start_s;
        o["end_s"] = s.end_s;
        steps.push_back(std::move(o));
    }
    j["steps"] = steps;
    if (!plan.host_node_time_s.empty()) j["host_node_time_s"] = plan.host_node_time_s;
    j["time_s"] = plan.time_s;
    j["ideal_time_s"] = plan.ideal_time_s;
    j["high_water"] = plan.high_water;
    j["peak_bytes"] = plan.peak_bytes;
    j["swap_out_bytes"] = plan.swap_out_bytes;
    j["swap_in_bytes"] = plan.swap_in_bytes;
    j["generations"] = plan.generations;
    j["candidates"] = plan.candidates;
    j["search_s"] = plan.search_s;
    if (!plan.stopped_by.empty()) j["stopped_by"] = plan.stopped_by;
    return j;
}

SwapPlan swap_plan_from_json(const nlohmann::json &j, const std::string &source) {
    auto at = [&](const nlohmann::json &o, const char *key, const std::string &where) -> const nlohmann::json & {
        TESSERA_CHECK(o.is_object(), source, ": ", where, " must be an object");
        auto it = o.find(key);
        TESSERA_CHECK(it != o.end(), source, ": ", where, " has no '", key, "'");
        return *it;
    };
    auto get = [&](const nlohmann::json &o, const char *key, const std::string &where, auto fallback,
                   bool required) {
        using T = decltype(fallback);
        if (!required && (!o.is_object() || !o.contains(key))) return fallback;
        const nlohmann::json &v = at(o, key, where);
        try {
            return v.get<T>();
        } catch (const nlohmann::json::exception &) {
            fail(source, ": ", where, ": '", key, "' has the wrong type (", json_preview(v), ")");
        }
    };
    SwapPlan p;
    const std::string top = "the plan";
    p.policy = swap_policy_from_name(get(j, "policy", top, std::string(), true));
    p.order = get(j, "order", top, std::vector<NodeId>(), true);
    p.arena_bytes = get(j, "arena_bytes", top, int64_t(0), true);
    p.pinned_bytes = get(j, "pinned_bytes", top, int64_t(0), true);
    const nlohmann::json &pools = at(j, "pools", top);
    TESSERA_CHECK(pools.is_array(), source, ": 'pools' must be an array");
    for (size_t i = 0; i < pools.size(); i++) {
        std::string w = "pools[" + std::to_string(i) + "]";
        p.pools.push_back(SwapPool{get(pools[i], "slot_bytes", w, int64_t(0), true),
                                   get(pools[i], "slots", w, int(0), true), get(pools[i], "offset", w, int64_t(0), true)});
    }
    p.pinned = get(j, "pinned", top, std::vector<int64_t>(), true);
    p.produce_at = get(j, "produce_at", top, std::vector<int64_t>(), true);
    p.swapped = get(j, "swapped", top, std::vector<uint8_t>(), true);
    const nlohmann::json &steps = at(j, "steps", top);
    TESSERA_CHECK(steps.is_array(), source, ": 'steps' must be an array");
    for (size_t i = 0; i < steps.size(); i++) {
        std::string w = "steps[" + std::to_string(i) + "]";
        SwapStep s;
        s.kind = step_kind_from_name(get(steps[i], "kind", w, std::string(), true), source + ": " + w);
        s.node = get(steps[i], "node", w, NodeId(kNoNode), false);
        s.tensor = get(steps[i], "tensor", w, TensorId(kNoTensor), false);
        s.offset = get(steps[i], "offset", w, int64_t(-1), false);
        s.bytes = get(steps[i], "bytes", w, int64_t(0), false);
        s.after = get(steps[i], "after", w, std::vector<int>(), false);
        s.start_s = get(steps[i], "start_s", w, 0.0, false);
        s.end_s = get(steps[i], "end_s", w, 0.0, false);
        p.steps.push_back(std::move(s));
    }
    p.host_node_time_s = get(j, "host_node_time_s", top, std::vector<double>(), false);
    p.time_s = get(j, "time_s", top, 0.0, false);
    p.ideal_time_s = get(j, "ideal_time_s", top, 0.0, false);
    p.high_water = get(j, "high_water", top, int64_t(0), false);
    p.peak_bytes = get(j, "peak_bytes", top, int64_t(0), false);
    p.swap_out_bytes = get(j, "swap_out_bytes", top, int64_t(0), false);
    p.swap_in_bytes = get(j, "swap_in_bytes", top, int64_t(0), false);
    p.generations = get(j, "generations", top, int(0), false);
    p.candidates = get(j, "candidates", top, int64_t(0), false);
    p.search_s = get(j, "search_s", top, 0.0, false);
    p.stopped_by = get(j, "stopped_by", top, std::string(), false);
    return p;
}

// ---------------------------------------------------------------------------
// The table.

namespace {

// Per storage root the plan keeps or moves: pinned (kept in the arena),
// swapped (with its swaps each way), host-homed, and updated on the host.
std::string tensor_table(const Graph &g, const SwapPlan &plan) {
    const int nt = g.num_tensors();
    std::vector<int> ins(nt, 0), outs(nt, 0), again(nt, 0);
    std::vector<std::string> host_update(nt);
    for (const SwapStep &s : plan.steps) {
        if (s.kind == SwapStep::Kind::SwapIn) ins[s.tensor]++;
        if (s.kind == SwapStep::Kind::SwapOut) outs[s.tensor]++;
        if (s.kind == SwapStep::Kind::Recompute) again[s.tensor]++;
        if (s.kind != SwapStep::Kind::HostUpdate) continue;
        for (TensorId t : g.node(s.node).outputs) host_update[storage_root(g, t)] = g.node(s.node).call.name;
    }
    const std::vector<bool> persistent = persistent_tensors(g);
    std::ostringstream os;
    os << fmt::format("{:<32}  {:>10}  {}\n", "tensor", "bytes", "where");
    for (TensorId r = 0; r < nt && r < static_cast<TensorId>(plan.pinned.size()); r++) {
        if (storage_root(g, r) != r || (plan.pinned[r] < 0 && !plan.swapped[r] && again[r] == 0)) continue;
        std::string where;
        if (plan.pinned[r] >= 0) where = fmt::format("kept: pinned at {}", plan.pinned[r]);
        else where = persistent[r] ? "host-homed" : plan.swapped[r] ? "swapped" : "dropped";
        if (ins[r] + outs[r] > 0) where += fmt::format(", {} in, {} out", ins[r], outs[r]);
        if (again[r] > 0) where += ", recomputed " + count_of(again[r], "time");
        if (!host_update[r].empty()) where += ", updated on the host by " + host_update[r];
        std::string name = g.tensor(r).name;
        if (name.size() > 32) name = name.substr(0, 29) + "...";
        os << fmt::format("{:<32}  {:>10}  {}\n", name, format_bytes(g.tensor(r).type.bytes()), where);
    }
    return os.str();
}

// Where the predicted step goes: each stream's busy time and its share of
// the step, recomputations apart from the rest of the compute stream, and
// when the backward pass starts (its first node on the compute stream).
std::string stream_busy_line(const Graph &g, const SwapPlan &plan) {
    double compute = 0, again = 0, out = 0, in = 0, host = 0, backward_from = -1;
    for (const SwapStep &s : plan.steps) {
        const double d = s.end_s - s.start_s;
        switch (s.kind) {
        case SwapStep::Kind::Compute:
            compute += d;
            if (backward_from < 0 && s.node >= 0 && s.node < g.num_nodes() && g.node(s.node).backward)
                backward_from = s.start_s;
            break;
        case SwapStep::Kind::Recompute: again += d; break;
        case SwapStep::Kind::SwapOut: out += d; break;
        case SwapStep::Kind::SwapIn: in += d; break;
        case SwapStep::Kind::HostUpdate: host += d; break;
        }
    }
    auto busy = [&](const char *what, double t) {
        return fmt::format("{} {:.3f} ms ({:.0f}%)", what, t * 1e3, plan.time_s > 0 ? 100 * t / plan.time_s : 0.0);
    };
    std::string line = "busy: " + busy("compute", compute + again);
    if (again > 0) line += fmt::format(" of which recomputing {:.3f} ms", again * 1e3);
    line += ", " + busy("swap-out", out) + ", " + busy("swap-in", in) + ", " + busy("host", host);
    if (backward_from >= 0) line += fmt::format("; the backward pass starts at {:.3f} ms", backward_from * 1e3);
    return line + "\n";
}

}  // namespace

std::string describe_swap_bound(const SwapBound &bound, double ideal_time_s) {
    return fmt::format("no plan can beat {:.3f} ms ({:.1f}% of ideal), set by {}", bound.time_s * 1e3,
                       bound.time_s > 0 ? 100 * ideal_time_s / bound.time_s : 100.0, bound.limit);
}

std::string swap_plan_table(const Graph &g, const SwapPlan &plan) {
    auto mib = [](int64_t b) { return format_bytes(b); };
    std::ostringstream os;
    int ins = 0, outs = 0, host = 0, again = 0;
    for (const SwapStep &s : plan.steps) {
        ins += s.kind == SwapStep::Kind::SwapIn;
        outs += s.kind == SwapStep::Kind::SwapOut;
        host += s.kind == SwapStep::Kind::HostUpdate;
        again += s.kind == SwapStep::Kind::Recompute;
    }
    os << fmt::format("swap plan ({}): {} operators, arena {}, pinned {}, high water {}, peak {}\n",
                      swap_policy_name(plan.policy), plan.order.size(), mib(plan.arena_bytes), mib(plan.pinned_bytes),
                      mib(plan.high_water), mib(plan.peak_bytes));
    os << fmt::format("predicted {:.3f} ms per iteration; ideal {:.3f} ms ({:.1f}% of ideal)\n", plan.time_s * 1e3,
                      plan.ideal_time_s * 1e3, plan.time_s > 0 ? 100 * plan.ideal_time_s / plan.time_s : 100.0);
    os << fmt::format("swaps: {} in ({}), {} out ({}); {} on the host; {}", ins, mib(plan.swap_in_bytes), outs,
                      mib(plan.swap_out_bytes), count_of(host, "optimizer update"), count_of(again, "recomputation"));
    if (plan.candidates > 0)
        os << fmt::format("; search: {} generations, {} candidates, {:.2f} s{}", plan.generations, plan.candidates,
                          plan.search_s, plan.stopped_by.empty() ? "" : " (stopped by " + plan.stopped_by + ")");
    os << "\n" << stream_busy_line(g, plan);
    os << "pools:";
    if (plan.pools.empty()) os << " none";
    for (const SwapPool &p : plan.pools) os << fmt::format(" {} x {} @ {};", p.slots, mib(p.slot_bytes), p.offset);
    os << "\n";
    if (ins + outs + host + again == 0) return os.str();
    os << tensor_table(g, plan);
    os << fmt::format("{:>6}  {:<11}  {:<32}  {:>10}  {:>12}  {:>10}  {:>10}\n", "step", "stream", "tensor", "bytes",
                      "slot", "start ms", "end ms");
    for (size_t i = 0; i < plan.steps.size(); i++) {
        const SwapStep &s = plan.steps[i];
        if (s.kind == SwapStep::Kind::Compute) continue;
        std::string t = s.kind == SwapStep::Kind::HostUpdate
                            ? (s.node >= 0 && s.node < g.num_nodes() ? g.node(s.node).call.name : "?")
                            : s.tensor >= 0 && s.tensor < g.num_tensors() ? g.tensor(s.tensor).name : "?";
        if (s.kind == SwapStep::Kind::Recompute) t += " (recomputed)";
        if (t.size() > 32) t = t.substr(0, 29) + "...";
        const bool on_host = s.kind == SwapStep::Kind::HostUpdate;
        os << fmt::format("{:>6}  {:<11}  {:<32}  {:>10}  {:>12}  {:>10.3f}  {:>10.3f}\n", i,
                          swap_step_kind_name(s.kind), t, on_host ? "-" : mib(s.bytes),
                          on_host ? "host" : std::to_string(s.offset), s.start_s * 1e3, s.end_s * 1e3);
    }
    return os.str();
}

}  // namespace tessera
