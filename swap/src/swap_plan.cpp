// The swap plan as a value: names, JSON, the table, and check_swap_plan, an
// independent replay of a plan that trusts nothing the planner computed.
#include <algorithm>
#include <array>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include <fmt/format.h>

#include "internal.h"
#include "tessera/error.h"
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

const char *swap_step_kind_name(SwapStep::Kind k) {
    switch (k) {
    case SwapStep::Kind::Compute: return "compute";
    case SwapStep::Kind::SwapOut: return "swap-out";
    case SwapStep::Kind::SwapIn: return "swap-in";
    }
    return "?";
}

namespace {

SwapStep::Kind step_kind_from_name(const std::string &name, const std::string &where) {
    for (SwapStep::Kind k : {SwapStep::Kind::Compute, SwapStep::Kind::SwapOut, SwapStep::Kind::SwapIn})
        if (name == swap_step_kind_name(k)) return k;
    fail(where, ": unknown step kind '", name, "'; valid: compute, swap-out, swap-in");
}

int64_t aligned(int64_t b) { return std::max(kSwapAlignment, (b + kSwapAlignment - 1) / kSwapAlignment * kSwapAlignment); }

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
    j["time_s"] = plan.time_s;
    j["ideal_time_s"] = plan.ideal_time_s;
    j["high_water"] = plan.high_water;
    j["peak_bytes"] = plan.peak_bytes;
    j["swap_out_bytes"] = plan.swap_out_bytes;
    j["swap_in_bytes"] = plan.swap_in_bytes;
    j["generations"] = plan.generations;
    j["candidates"] = plan.candidates;
    j["search_s"] = plan.search_s;
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
            fail(source, ": ", where, ": '", key, "' has the wrong type (", v.dump(), ")");
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
    p.time_s = get(j, "time_s", top, 0.0, false);
    p.ideal_time_s = get(j, "ideal_time_s", top, 0.0, false);
    p.high_water = get(j, "high_water", top, int64_t(0), false);
    p.peak_bytes = get(j, "peak_bytes", top, int64_t(0), false);
    p.swap_out_bytes = get(j, "swap_out_bytes", top, int64_t(0), false);
    p.swap_in_bytes = get(j, "swap_in_bytes", top, int64_t(0), false);
    p.generations = get(j, "generations", top, int(0), false);
    p.candidates = get(j, "candidates", top, int64_t(0), false);
    p.search_s = get(j, "search_s", top, 0.0, false);
    return p;
}

// ---------------------------------------------------------------------------
// The checker. It replays the steps in issue order and tracks, for every
// storage root, where it lives and whether its host copy is current, and for
// every step which steps are known to have finished before it starts (a
// vector clock over the three streams: same-stream order plus `after`). A
// slot may be overwritten only when everything that reads its occupant has
// finished and the occupant, if still needed, has reached host memory.

void check_swap_plan(const Graph &g, const SwapPlan &plan, const std::string &source) {
    const int nt = g.num_tensors(), nn = g.num_nodes();
    auto name = [&](TensorId t) { return "'" + g.tensor(t).name + "'"; };
    TESSERA_CHECK(static_cast<int>(plan.pinned.size()) == nt && static_cast<int>(plan.produce_at.size()) == nt &&
                      static_cast<int>(plan.swapped.size()) == nt,
                  source, ": pinned, produce_at and swapped need one entry per tensor (", nt, "), got ",
                  plan.pinned.size(), ", ", plan.produce_at.size(), ", ", plan.swapped.size());
    TESSERA_CHECK(plan.pinned_bytes >= 0 && plan.pinned_bytes <= plan.arena_bytes, source, ": pinned_bytes ",
                  plan.pinned_bytes, " is outside the arena of ", plan.arena_bytes, " bytes");

    std::vector<bool> persist = persistent_tensors(g);
    std::vector<TensorId> root(nt);
    std::vector<int64_t> raw(nt, 0), bytes(nt, 0);
    for (TensorId t = 0; t < nt; t++) {
        root[t] = storage_root(g, t);
        raw[root[t]] = std::max(raw[root[t]], g.tensor(t).type.bytes());
    }
    for (TensorId t = 0; t < nt; t++) bytes[t] = aligned(raw[t]);

    // Pools: inside the arena, above the pinned area, apart from each other.
    std::vector<std::pair<int64_t, int64_t>> areas;
    for (size_t k = 0; k < plan.pools.size(); k++) {
        const SwapPool &p = plan.pools[k];
        TESSERA_CHECK(p.slot_bytes > 0 && p.slot_bytes % kSwapAlignment == 0 && p.slots >= 0, source, ": pool ", k,
                      " has slot_bytes ", p.slot_bytes, " and ", p.slots, " slots; slots must be a positive multiple of ",
                      kSwapAlignment, " bytes");
        int64_t end = p.offset + p.slots * p.slot_bytes;
        TESSERA_CHECK(p.offset >= plan.pinned_bytes && end <= plan.arena_bytes, source, ": pool ", k, " spans [",
                      p.offset, ", ", end, "), outside [pinned_bytes ", plan.pinned_bytes, ", arena ", plan.arena_bytes,
                      ")");
        areas.push_back({p.offset, end});
    }
    std::sort(areas.begin(), areas.end());
    for (size_t k = 1; k < areas.size(); k++)
        TESSERA_CHECK(areas[k].first >= areas[k - 1].second, source, ": two pools overlap at offset ", areas[k].first);
    auto slot_ok = [&](int64_t off, int64_t need) {
        for (const SwapPool &p : plan.pools)
            if (off >= p.offset && off < p.offset + p.slots * p.slot_bytes)
                return (off - p.offset) % p.slot_bytes == 0 && need <= p.slot_bytes;
        return false;
    };

    // Pinned tensors: persistent roots, inside [0, pinned_bytes), apart.
    std::vector<std::pair<int64_t, TensorId>> pins;
    for (TensorId t = 0; t < nt; t++) {
        if (plan.pinned[t] < 0) continue;
        TESSERA_CHECK(root[t] == t && persist[t], source, ": ", name(t),
                      " is pinned but is not a persistent storage root");
        TESSERA_CHECK(plan.pinned[t] + bytes[t] <= plan.pinned_bytes, source, ": pinned ", name(t), " at offset ",
                      plan.pinned[t], " ends beyond pinned_bytes ", plan.pinned_bytes);
        pins.push_back({plan.pinned[t], t});
    }
    std::sort(pins.begin(), pins.end());
    for (size_t k = 1; k < pins.size(); k++)
        TESSERA_CHECK(pins[k].first >= pins[k - 1].first + bytes[pins[k - 1].second], source, ": pinned ",
                      name(pins[k - 1].second), " and ", name(pins[k].second), " overlap");
    for (TensorId t = 0; t < nt; t++)
        if (root[t] == t && persist[t] && plan.pinned[t] < 0)
            TESSERA_CHECK(plan.swapped[t], source, ": ", name(t),
                          " is persistent and not pinned, so it lives in host memory, but swapped is 0");

    // The order, and how often each root is used (to know what is still needed).
    std::vector<int> seen(nn, 0), remaining(nt, 0);
    for (NodeId n : plan.order) {
        TESSERA_CHECK(n >= 0 && n < nn && !seen[n], source, ": the order holds node ", n,
                      " twice or it is not a node of the graph");
        seen[n] = 1;
        for (TensorId t : g.node(n).inputs) remaining[root[t]]++;
        for (TensorId t : g.node(n).outputs) remaining[root[t]]++;
    }

    const int ns = static_cast<int>(plan.steps.size());
    std::vector<std::array<int, 3>> vc(ns);
    std::vector<int> stream_pos(ns);
    std::array<int, 3> count{0, 0, 0}, last{-1, -1, -1};
    auto hb = [&](int a, int b) {  // step a finishes before step b starts
        return stream_pos[a] < vc[b][static_cast<int>(plan.steps[a].kind)];
    };
    std::vector<int64_t> loc(nt, -1);
    std::vector<int> placed_by(nt, -1), last_compute(nt, -1), last_write(nt, -1), resid_out(nt, -1), last_out(nt, -1);
    std::vector<uint8_t> host_valid(nt, 0), has_value(nt, 0);
    for (TensorId t = 0; t < nt; t++) host_valid[t] = has_value[t] = g.tensor(t).producer == kNoNode;
    std::map<int64_t, TensorId> resident;  // offset -> root, non-overlapping
    size_t next_compute = 0;

    for (int i = 0; i < ns; i++) {
        const SwapStep &s = plan.steps[i];
        int st = static_cast<int>(s.kind);
        // Built only when a check fails.
        auto who = [&]() {
            std::string w = source;
            w.append(": step ").append(std::to_string(i)).append(" (").append(swap_step_kind_name(s.kind));
            if (s.kind == SwapStep::Kind::Compute && s.node >= 0 && s.node < nn)
                w.append(" '").append(g.node(s.node).call.name).append("'");
            if (s.kind != SwapStep::Kind::Compute && s.tensor >= 0 && s.tensor < nt) w.append(" ").append(name(s.tensor));
            return w.append(")");
        };
        stream_pos[i] = count[st]++;
        vc[i] = last[st] >= 0 ? vc[last[st]] : std::array<int, 3>{0, 0, 0};
        vc[i][st] = stream_pos[i];
        for (int a : s.after) {
            TESSERA_CHECK(a >= 0 && a < i, who(), ": waits for step ", a, ", which is not an earlier step");
            int sa = static_cast<int>(plan.steps[a].kind);
            for (int k = 0; k < 3; k++) vc[i][k] = std::max(vc[i][k], vc[a][k]);
            vc[i][sa] = std::max(vc[i][sa], stream_pos[a] + 1);
        }
        last[st] = i;

        // Takes [off, off + size) for root r: every other resident there must be
        // done with, and saved to host memory when still needed.
        auto place = [&](TensorId r, int64_t off, int64_t size) {
            if (loc[r] >= 0) {
                resident.erase(loc[r]);
                loc[r] = -1;
            }
            auto it = resident.lower_bound(off);
            if (it != resident.begin()) --it;
            while (it != resident.end() && it->first < off + size) {
                TensorId v = it->second;
                if (it->first + bytes[v] <= off) {
                    ++it;
                    continue;
                }
                TESSERA_CHECK(last_compute[v] < 0 || hb(last_compute[v], i), who(), ": overwrites ", name(v),
                              " before step ", last_compute[v], ", which uses it, is known to be done");
                TESSERA_CHECK(placed_by[v] < 0 || hb(placed_by[v], i), who(), ": overwrites ", name(v),
                              " while its arrival (step ", placed_by[v], ") may still be in flight");
                if (resid_out[v] >= 0 && !hb(resid_out[v], i)) host_valid[v] = 0;
                bool needed = remaining[v] > 0 || (persist[v] && plan.pinned[v] < 0 && has_value[v]);
                TESSERA_CHECK(!needed || host_valid[v], who(), ": overwrites ", name(v),
                              ", which is still needed and whose host copy is not complete");
                loc[v] = -1;
                it = resident.erase(it);
            }
            loc[r] = off;
            resident[off] = r;
            placed_by[r] = i;
            last_compute[r] = -1;
            resid_out[r] = -1;
        };

        if (s.kind == SwapStep::Kind::SwapIn || s.kind == SwapStep::Kind::SwapOut) {
            TESSERA_CHECK(s.tensor >= 0 && s.tensor < nt && root[s.tensor] == s.tensor, who(), ": tensor ", s.tensor,
                          " is not a storage root of the graph");
            TensorId r = s.tensor;
            TESSERA_CHECK(plan.pinned[r] < 0, who(), ": moves ", name(r), ", which is pinned");
            TESSERA_CHECK(s.bytes == raw[r], who(), ": moves ", s.bytes, " bytes, but ", name(r), " has ", raw[r]);
            TESSERA_CHECK(plan.swapped[r], who(), ": moves ", name(r), ", but its swapped flag is 0");
            if (s.kind == SwapStep::Kind::SwapIn) {
                TESSERA_CHECK(slot_ok(s.offset, bytes[r]), who(), ": offset ", s.offset, " is not a slot of a pool that holds ",
                              bytes[r], " bytes");
                TESSERA_CHECK(has_value[r] && host_valid[r], who(), ": ", name(r), " has no current copy in host memory");
                TESSERA_CHECK(last_out[r] < 0 || hb(last_out[r], i), who(), ": reads host memory that swap-out step ",
                              last_out[r], " may still be writing");
                place(r, s.offset, bytes[r]);
            } else {
                TESSERA_CHECK(loc[r] >= 0 && loc[r] == s.offset, who(), ": ", name(r), " is not on the device at offset ",
                              s.offset);
                TESSERA_CHECK(placed_by[r] < 0 || hb(placed_by[r], i), who(), ": reads ", name(r),
                              " before its arrival (step ", placed_by[r], ") is known to be done");
                TESSERA_CHECK(last_write[r] < 0 || hb(last_write[r], i), who(), ": reads ", name(r),
                              " before its last write (step ", last_write[r], ") is known to be done");
                host_valid[r] = 1;
                resid_out[r] = last_out[r] = i;
            }
            continue;
        }

        TESSERA_CHECK(s.node >= 0 && s.node < nn, who(), ": node ", s.node, " is not a node of the graph");
        TESSERA_CHECK(next_compute < plan.order.size() && plan.order[next_compute] == s.node, who(),
                      ": computes out of the plan's order (expected position ", next_compute, ")");
        next_compute++;
        const Node &node = g.node(s.node);
        std::vector<std::pair<TensorId, bool>> touched;  // root, written
        for (TensorId t : node.inputs) touched.push_back({root[t], false});
        for (TensorId t : node.outputs) touched.push_back({root[t], true});
        for (auto &[r, w] : touched) {
            if (plan.pinned[r] >= 0) continue;
            bool reads = false;
            for (TensorId t : node.inputs) reads |= root[t] == r;
            if (loc[r] < 0) {
                TESSERA_CHECK(w && !reads, who(), ": ", name(r), " is not on the device");
                int64_t off = plan.produce_at[r];
                TESSERA_CHECK(off >= 0 && slot_ok(off, bytes[r]), who(), ": produces ", name(r),
                              " but its produce_at (", off, ") is not a slot that holds ", bytes[r], " bytes");
                place(r, off, bytes[r]);
                placed_by[r] = -1;
            }
            TESSERA_CHECK(placed_by[r] < 0 || hb(placed_by[r], i), who(), ": uses ", name(r),
                          " before its swap-in (step ", placed_by[r], ") is known to be done");
        }
        for (auto &[r, w] : touched) {
            if (w) {
                TESSERA_CHECK(resid_out[r] < 0 || hb(resid_out[r], i), who(), ": writes ", name(r),
                              " while swap-out step ", resid_out[r], " may still be reading it");
                host_valid[r] = 0;
                has_value[r] = 1;
                last_write[r] = i;
                resid_out[r] = -1;
            }
            last_compute[r] = i;
            remaining[r]--;
        }
    }
    TESSERA_CHECK(next_compute == plan.order.size(), source, ": the steps compute ", next_compute, " of the ",
                  plan.order.size(), " nodes of the order");
    for (TensorId r = 0; r < nt; r++) {
        if (root[r] != r || !persist[r] || plan.pinned[r] >= 0 || !has_value[r]) continue;
        TESSERA_CHECK(host_valid[r], source, ": ", name(r),
                      " lives in host memory but the step ends without its latest value there (no swap-out after its "
                      "last write)");
    }
}

// ---------------------------------------------------------------------------
// The table.

std::string swap_plan_table(const Graph &g, const SwapPlan &plan) {
    auto mib = [](int64_t b) { return format_bytes(b); };
    std::ostringstream os;
    int ins = 0, outs = 0;
    for (const SwapStep &s : plan.steps) {
        ins += s.kind == SwapStep::Kind::SwapIn;
        outs += s.kind == SwapStep::Kind::SwapOut;
    }
    os << fmt::format("swap plan ({}): {} operators, arena {}, pinned {}, high water {}, peak {}\n",
                      swap_policy_name(plan.policy), plan.order.size(), mib(plan.arena_bytes), mib(plan.pinned_bytes),
                      mib(plan.high_water), mib(plan.peak_bytes));
    os << fmt::format("predicted {:.3f} ms per iteration; ideal {:.3f} ms ({:.1f}% of ideal)\n", plan.time_s * 1e3,
                      plan.ideal_time_s * 1e3, plan.time_s > 0 ? 100 * plan.ideal_time_s / plan.time_s : 100.0);
    os << fmt::format("swaps: {} in ({}), {} out ({})", ins, mib(plan.swap_in_bytes), outs, mib(plan.swap_out_bytes));
    if (plan.candidates > 0)
        os << fmt::format("; search: {} generations, {} candidates, {:.2f} s", plan.generations, plan.candidates,
                          plan.search_s);
    os << "\npools:";
    if (plan.pools.empty()) os << " none";
    for (const SwapPool &p : plan.pools) os << fmt::format(" {} x {} @ {};", p.slots, mib(p.slot_bytes), p.offset);
    os << "\n";
    if (ins + outs == 0) return os.str();
    os << fmt::format("{:>6}  {:<8}  {:<32}  {:>10}  {:>12}  {:>10}  {:>10}\n", "step", "stream", "tensor", "bytes",
                      "slot", "start ms", "end ms");
    for (size_t i = 0; i < plan.steps.size(); i++) {
        const SwapStep &s = plan.steps[i];
        if (s.kind == SwapStep::Kind::Compute) continue;
        std::string t = s.tensor >= 0 && s.tensor < g.num_tensors() ? g.tensor(s.tensor).name : "?";
        if (t.size() > 32) t = t.substr(0, 29) + "...";
        os << fmt::format("{:>6}  {:<8}  {:<32}  {:>10}  {:>12}  {:>10.3f}  {:>10.3f}\n", i,
                          swap_step_kind_name(s.kind), t, mib(s.bytes), s.offset, s.start_s * 1e3, s.end_s * 1e3);
    }
    return os.str();
}

}  // namespace tessera
