// The swap timeline as inline SVG. Two pictures share one time axis:
//   * three lanes, one per stream, each step a box from its simulated start to
//     its end (a <title> names the node or tensor, so hovering explains it);
//   * bytes resident over time against the budget.
// Residency is rebuilt from the steps alone, so the picture shows what the
// plan says rather than what the planner believed: a buffer is resident from
// its arrival (its producer's start, or the start of its swap-in) until the
// last step that touches it before it next arrives (a later compute step, or
// its swap-out). Pinned tensors are resident all the time.
#include "tessera/swap/render.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "tessera/error.h"
#include "tessera/html_page.h"
#include "tessera/text.h"

namespace tessera {
namespace {

constexpr double kWidth = 960;      // the drawing area, in SVG units
constexpr double kLeft = 90;        // room for the lane labels
constexpr double kLaneH = 22;       // one stream lane
constexpr double kMemH = 160;       // the memory plot
constexpr double kAxisH = 18;       // tick labels under a plot

std::string bytes_str(double b) { return format_bytes(static_cast<int64_t>(std::llround(b))); }

// A tick step of 1, 2 or 5 times a power of ten giving about `want` ticks.
double nice_step(double range, int want) {
    if (range <= 0) return 1;
    double raw = range / want;
    double p = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (m * p >= raw) return m * p;
    return 10 * p;
}

void check_refs(const Graph &g, const SwapPlan &plan) {
    for (size_t i = 0; i < plan.steps.size(); ++i) {
        const SwapStep &s = plan.steps[i];
        if (s.kind != SwapStep::Kind::SwapIn && s.kind != SwapStep::Kind::SwapOut)
            TESSERA_CHECK(s.node >= 0 && s.node < g.num_nodes(), "swap plan step ", i, " computes node ", s.node,
                          " but the graph has ", g.num_nodes(), " nodes; was the plan made for another graph?");
        else
            TESSERA_CHECK(s.tensor >= 0 && s.tensor < g.num_tensors(), "swap plan step ", i, " (",
                          swap_step_kind_name(s.kind), ") moves tensor ", s.tensor, " but the graph has ",
                          g.num_tensors(), " tensors; was the plan made for another graph?");
        TESSERA_CHECK(std::isfinite(s.start_s) && std::isfinite(s.end_s) && s.end_s >= s.start_s,
                      "swap plan step ", i, " has simulated times [", s.start_s, ", ", s.end_s,
                      "]; a step must end no earlier than it starts");
    }
}

bool is_pinned(const SwapPlan &plan, TensorId t) {
    return static_cast<size_t>(t) < plan.pinned.size() && plan.pinned[static_cast<size_t>(t)] >= 0;
}

struct Curve {
    std::vector<std::pair<double, double>> points;  // (time, bytes), a step function: bytes hold until the next time
    double peak = 0;
};

Curve resident_curve(const Graph &g, const SwapPlan &plan) {
    // Per storage root, its steps (start, end, kind) in time order.
    struct Touch {
        double start, end;
        bool arrives;  // a swap-in: a new stay begins
    };
    std::map<TensorId, std::vector<Touch>> touches;
    for (const SwapStep &s : plan.steps) {
        if (s.kind == SwapStep::Kind::Compute || s.kind == SwapStep::Kind::Recompute) {
            const Node &n = g.node(s.node);
            if (s.kind == SwapStep::Kind::Recompute) touches[s.tensor].push_back({s.start_s, s.end_s, true});
            for (const auto *list : {&n.inputs, &n.outputs})
                for (TensorId t : *list) {
                    TensorId r = storage_root(g, t);
                    if (!is_pinned(plan, r)) touches[r].push_back({s.start_s, s.end_s, false});
                }
        } else if (s.kind != SwapStep::Kind::HostUpdate && !is_pinned(plan, s.tensor)) {
            touches[s.tensor].push_back({s.start_s, s.end_s, s.kind == SwapStep::Kind::SwapIn});
        }
    }
    double pinned = 0;
    for (TensorId t = 0; t < static_cast<TensorId>(plan.pinned.size()) && t < g.num_tensors(); ++t)
        if (plan.pinned[static_cast<size_t>(t)] >= 0 && storage_root(g, t) == t)
            pinned += static_cast<double>(g.tensor(t).type.bytes());

    std::vector<std::pair<double, double>> deltas;  // (time, +/- bytes)
    for (auto &[t, list] : touches) {
        std::stable_sort(list.begin(), list.end(), [](const Touch &a, const Touch &b) {
            if (a.start != b.start) return a.start < b.start;
            return a.arrives && !b.arrives;  // a swap-in precedes the read it feeds
        });
        double bytes = static_cast<double>(g.tensor(t).type.bytes());
        bool open = false;
        double from = 0, last = 0;
        for (const Touch &x : list) {
            if (x.arrives || !open) {
                if (open) {
                    deltas.push_back({from, bytes});
                    deltas.push_back({last, -bytes});
                }
                open = true;
                from = x.start;
                last = x.end;
            } else {
                last = std::max(last, x.end);
            }
        }
        if (open) {
            deltas.push_back({from, bytes});
            deltas.push_back({last, -bytes});
        }
    }
    // At equal times, frees go first: a buffer freed as another arrives does
    // not count twice.
    std::sort(deltas.begin(), deltas.end(), [](const auto &a, const auto &b) {
        return a.first != b.first ? a.first < b.first : a.second < b.second;
    });
    Curve c;
    double level = pinned;
    c.points.push_back({0, level});
    c.peak = level;
    for (size_t i = 0; i < deltas.size();) {
        double t = deltas[i].first;
        for (; i < deltas.size() && deltas[i].first == t; ++i) {
            level += deltas[i].second;
            c.peak = std::max(c.peak, level);
        }
        c.points.push_back({t, level});
    }
    return c;
}

const char *compute_color(const Node &n) {
    if (n.comm) return "#9c755f";
    if (n.optimizer) return "#59a14f";
    if (n.backward) return "#f28e2b";
    return "#4e79a7";
}

std::string step_label(const Graph &g, const SwapStep &s) {
    if (s.kind == SwapStep::Kind::Compute) {
        const Node &n = g.node(s.node);
        return n.call.name + (n.comm ? " (communication)" : std::string(" (") + op_name(n.call.kind) + ")");
    }
    if (s.kind == SwapStep::Kind::HostUpdate)
        return g.node(s.node).call.name + " (" + op_name(g.node(s.node).call.kind) + " on the host)";
    if (s.kind == SwapStep::Kind::Recompute)
        return g.node(s.node).call.name + " (" + op_name(g.node(s.node).call.kind) + ", recomputing " +
               g.tensor(s.tensor).name + " into slot " + std::to_string(s.offset) + ")";
    return std::string(swap_step_kind_name(s.kind)) + " " + g.tensor(s.tensor).name + ", " +
           bytes_str(static_cast<double>(s.bytes)) + ", slot at " + std::to_string(s.offset);
}

std::string time_axis(double y, double total, double x_of_unit) {
    std::string s;
    double step = nice_step(total, 8);
    for (double t = 0; t <= total * (1 + 1e-9); t += step) {
        double x = kLeft + t * x_of_unit;
        s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#999\"/>", x, y, x,
                         y + 4);
        s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", x, y + 14,
                         t == 0 ? std::string("0") : html_escape(format_duration(t)));
    }
    return s;
}

// The summary: the plan's budget, times, bytes and peaks, then its pools.
std::string summary_html(const SwapPlan &plan, const Curve &curve) {
    const double ratio = plan.time_s > 0 ? plan.ideal_time_s / plan.time_s : 0;
    std::string h = html_h2(fmt::format("Swapping ({})", swap_policy_name(plan.policy)));
    h += html_facts({
        {"budget (arena)", bytes_str(static_cast<double>(plan.arena_bytes))},
        {"pinned", bytes_str(static_cast<double>(plan.pinned_bytes))},
        {"pools", std::to_string(plan.pools.size()) + " size classes"},
        {"predicted iteration", format_duration(plan.time_s)},
        {"ideal (no swapping)",
         format_duration(plan.ideal_time_s) + fmt::format(" ({:.1f}% of ideal speed)", 100 * ratio)},
        {"swapped out / in", bytes_str(static_cast<double>(plan.swap_out_bytes)) + " / " +
                                 bytes_str(static_cast<double>(plan.swap_in_bytes))},
        {"peak resident (planner)", bytes_str(static_cast<double>(plan.peak_bytes))},
        {"peak resident (from steps)", bytes_str(curve.peak)},
        {"high water", bytes_str(static_cast<double>(plan.high_water))},
    });
    if (plan.pools.empty()) return h;
    std::vector<std::vector<HtmlCell>> rows;
    for (const SwapPool &p : plan.pools)
        rows.push_back({{bytes_str(static_cast<double>(p.slot_bytes))},
                        {std::to_string(p.slots)},
                        {std::to_string(p.offset)},
                        {bytes_str(static_cast<double>(p.slot_bytes) * p.slots)}});
    return h + html_details("memory pools", html_table({{"slot size"}, {"slots"}, {"offset"}, {"bytes"}}, rows));
}

// The key to the lanes' colours, in the colours step_colour() gives.
constexpr const char *kLegend =
    "<p class=\"legend\">Streams over one iteration:<span style=\"background:#4e79a7\"></span>forward"
    "<span style=\"background:#f28e2b\"></span>backward<span style=\"background:#59a14f\"></span>optimizer (in the "
    "host lane: updated on the host)"
    "<span style=\"background:#9c755f\"></span>communication<span style=\"background:#e15759\"></span>swap-out"
    "<span style=\"background:#b07aa1\"></span>swap-in<span style=\"background:#edc948\"></span>recompute. Hover a "
    "box for its node or tensor.</p>\n";

const char *step_colour(const Graph &g, const SwapStep &s) {
    return s.kind == SwapStep::Kind::Compute      ? compute_color(g.node(s.node))
           : s.kind == SwapStep::Kind::Recompute  ? "#edc948"
           : s.kind == SwapStep::Kind::SwapOut    ? "#e15759"
           : s.kind == SwapStep::Kind::HostUpdate ? "#59a14f"
                                                  : "#b07aa1";
}

// The four stream lanes, and every step a box in its lane from its start to
// its end; `unit` is SVG units per second.
std::string lanes_svg(const Graph &g, const SwapPlan &plan, double unit) {
    std::string h;
    const char *lane_names[] = {"compute", "swap-out", "swap-in", "host"};
    for (int l = 0; l < 4; ++l) {
        double y = l * kLaneH;
        h += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>", kLeft, y,
                         kWidth, kLaneH, l % 2 ? "#f7f7f7" : "#fdfdfd");
        h += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", kLeft - 6,
                         y + kLaneH / 2 + 4, lane_names[l]);
    }
    for (const SwapStep &s : plan.steps) {
        // Lanes follow the step kinds: compute, swap-out, swap-in, host.
        int lane = swap_step_stream(s.kind);
        // Every step stays visible, however short: at least a hairline.
        double w = std::max(0.6, (s.end_s - s.start_s) * unit);
        h += fmt::format("<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\">"
                         "<title>{}: {} to {}</title></rect>\n",
                         kLeft + s.start_s * unit, lane * kLaneH + 2, w, kLaneH - 4, step_colour(g, s),
                         html_escape(step_label(g, s)), html_escape(format_duration(s.start_s)),
                         html_escape(format_duration(s.end_s)));
    }
    return h;
}

// Bytes resident over time as a filled step curve from `mem_top` down, with
// the budget as a dashed line across it.
std::string residency_svg(const SwapPlan &plan, const Curve &curve, double unit, double mem_top) {
    const double top = std::max({static_cast<double>(plan.arena_bytes), curve.peak, 1.0}) * 1.08;
    auto y_of = [&](double bytes) { return mem_top + kMemH - bytes / top * kMemH; };
    std::string h = fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#fafafa\" "
                                "stroke=\"#ddd\"/>\n",
                                kLeft, mem_top, kWidth, kMemH);
    std::string path = fmt::format("M{:.2f},{:.2f}", kLeft, y_of(curve.points.front().second));
    for (size_t i = 1; i < curve.points.size(); ++i) {
        double x = kLeft + curve.points[i].first * unit;
        path += fmt::format(" H{:.2f} V{:.2f}", x, y_of(curve.points[i].second));
    }
    path += fmt::format(" H{:.2f}", kLeft + kWidth);
    h += fmt::format("<path d=\"{} V{:.2f} H{:.2f} Z\" fill=\"#4e79a7\" fill-opacity=\"0.25\" stroke=\"#4e79a7\">"
                     "<title>bytes resident; peak {}</title></path>\n",
                     path, y_of(0), kLeft, html_escape(bytes_str(curve.peak)));
    const std::string budget = html_escape(bytes_str(static_cast<double>(plan.arena_bytes)));
    const double by = y_of(static_cast<double>(plan.arena_bytes));
    h += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.2f}\" x2=\"{:.1f}\" y2=\"{:.2f}\" stroke=\"#e15759\" "
                     "stroke-dasharray=\"6,3\"><title>budget {}</title></line>\n",
                     kLeft, by, kLeft + kWidth, by, budget);
    h += fmt::format("<text x=\"{:.1f}\" y=\"{:.2f}\" text-anchor=\"end\">budget</text>\n", kLeft - 6, by + 4);
    h += fmt::format("<text x=\"{:.1f}\" y=\"{:.2f}\" text-anchor=\"end\">{}</text>\n", kLeft - 6, by + 16, budget);
    h += fmt::format("<text x=\"{:.1f}\" y=\"{:.2f}\" text-anchor=\"end\">0</text>\n", kLeft - 6, y_of(0) + 4);
    return h;
}

}  // namespace

std::string swap_plan_html_section(const Graph &g, const SwapPlan &plan) {
    check_refs(g, plan);
    double total = plan.time_s;
    for (const SwapStep &s : plan.steps) total = std::max(total, s.end_s);
    const Curve curve = resident_curve(g, plan);

    std::string h = "<section class=\"tessera-swap\">\n" + summary_html(plan, curve);
    if (plan.steps.empty() || total <= 0) return h + html_paragraph("The plan has no steps to show.") + "</section>\n";

    const double unit = kWidth / total;  // SVG units per second
    const double lanes_h = 4 * kLaneH;
    const double mem_top = lanes_h + kAxisH + 16;
    const double height = mem_top + kMemH + kAxisH + 6;
    h += kLegend;
    h += fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
                     "viewBox=\"0 0 {:.0f} {:.0f}\">\n",
                     kLeft + kWidth + 20, height, kLeft + kWidth + 20, height);
    h += lanes_svg(g, plan, unit) + time_axis(lanes_h, total, unit);
    h += residency_svg(plan, curve, unit, mem_top) + time_axis(mem_top + kMemH, total, unit);
    return h + "</svg>\n</section>\n";
}

}  // namespace tessera
