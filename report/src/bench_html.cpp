// tessera-bench's HTML report of its predictions: one self-contained page
// (tessera/html_page.h, its Compact look) with the throughput plot of the mode
// (against devices, model size or budget), one line per strategy or policy;
// the time breakdown of every row as stacked bars; and the table.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "tessera/html_page.h"
#include "tessera/report/bench_report.h"
#include "tessera/report/bench_svg.h"
#include "tessera/text.h"

namespace tessera {

namespace {

std::vector<std::string> params_of(const std::string &model) {
    const size_t colon = model.find(':');
    return colon == std::string::npos ? std::vector<std::string>{} : split_list(model.substr(colon + 1));
}

// A model's spec without the parameters every model of the rows shares
// ("wresnet:depth=152,width=4" -> "width=4"), for the x axis of models mode.
std::string distinct_params(const std::string &model, const std::vector<BenchRow> &rows) {
    std::vector<std::string> kept;
    for (const std::string &p : params_of(model)) {
        bool shared = true;
        for (const BenchRow &r : rows) {
            const std::vector<std::string> theirs = params_of(r.model);
            shared = shared && std::find(theirs.begin(), theirs.end(), p) != theirs.end();
        }
        if (!shared) kept.push_back(p);
    }
    return kept.empty() ? model : join(kept, ",");
}

// The x position of each row: devices (scaling), model (models), budget (budgets).
std::string x_label(const BenchHeader &h, const BenchRow &r, const std::vector<BenchRow> &rows) {
    if (h.mode == "scaling") return std::to_string(r.devices);
    if (h.mode == "models") return distinct_params(r.model, rows);
    return r.strategy == "unlimited" ? "unlimited" : format_bytes(r.memory_bytes);
}

std::string x_axis_title(const BenchHeader &h) {
    if (h.mode == "scaling") return "devices";
    if (h.mode == "models") return "model";
    return "memory budget";
}

// Throughput against the mode's x (devices, model, budget): a line per strategy or policy.
LineChart throughput_chart(const BenchHeader &h, const std::vector<BenchRow> &rows) {
    LineChart c;
    c.x_title = x_axis_title(h);
    c.y_title = "samples/s";
    c.y_label = samples_rate;
    std::map<std::string, size_t> series;  // strategy -> index in c.series
    for (const BenchRow &r : rows) {
        if (!r.note.empty() || r.throughput <= 0 || (h.mode == "budgets" && r.strategy == "unlimited")) continue;
        const std::string x = x_label(h, r, rows);
        auto at = std::find(c.xs.begin(), c.xs.end(), x);
        if (at == c.xs.end()) at = c.xs.insert(c.xs.end(), x);
        if (!series.count(r.strategy)) {
            series[r.strategy] = c.series.size();
            c.series.push_back({r.strategy, {}, static_cast<int>(c.series.size())});
        }
        c.series[series[r.strategy]].points[static_cast<size_t>(at - c.xs.begin())] = r.throughput;
    }
    return c;
}

// One stacked bar per row: compute, exposed communication, exposed swapping, idle.
std::string svg_breakdown(const BenchHeader &h, const std::vector<BenchRow> &rows) {
    const BarLegend legend{{{"compute", "#2ca02c"}, {"exposed comm", "#d62728"}, {"exposed swap", "#ff7f0e"},
                            {"idle", "#bbbbbb"}},
                           ""};
    std::vector<StackedBar> bars;
    for (const BenchRow &r : rows)
        bars.push_back({x_label(h, r, rows) + " · " + r.strategy,
                        {r.compute_s, r.exposed_comm_s, r.exposed_swap_s, r.idle_s},
                        r.step_s,
                        -1,
                        r.note});
    return svg_stacked_bars(legend, bars);
}

std::string rows_table(const std::vector<BenchRow> &rows) {
    std::string s = "<table><tr><th>model</th><th>devices</th><th>strategy</th><th>step</th><th>samples/s</th>"
                    "<th>speed-up</th><th>comm/step</th><th>mem/device</th></tr>";
    for (const BenchRow &r : rows) {
        if (!r.note.empty()) {
            s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td colspan='5'>{} (budget {})</td></tr>",
                             html_escape(r.model), r.devices, html_escape(r.strategy), html_escape(r.note),
                             format_bytes(r.memory_bytes));
            continue;
        }
        s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2f}x</td><td>{}</td>"
                         "<td>{}</td></tr>",
                         html_escape(r.model), r.devices, html_escape(r.strategy), format_duration(r.step_s),
                         samples_rate(r.throughput), r.speedup, format_bytes(r.comm_bytes), format_bytes(r.memory_bytes));
    }
    return s + "</table>";
}

}  // namespace

std::string bench_html(const BenchHeader &h, const std::vector<BenchRow> &rows) {
    const std::string note = fmt::format("batch {}; machine {} ({}); roofline {}. Predictions from the roofline and an "
                                         "alpha-beta model of the links, not measurements.",
                                         h.batch, html_escape(h.machine), html_escape(h.links), html_escape(h.roofline));
    const std::string body = html_h2("Throughput") + svg_line_chart(throughput_chart(h, rows)) + "\n" +
                             html_h2("Where each step goes") + svg_breakdown(h, rows) + "\n" + html_h2("Rows") +
                             rows_table(rows) + "\n";
    return html_page("tessera-bench " + h.mode, "tessera-bench " + h.mode + ": " + h.model, note, body,
                     PageLook::Compact);
}

}  // namespace tessera
