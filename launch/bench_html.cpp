// tessera-bench's HTML report: one self-contained page (inline SVG, no
// scripts, no fetches) with the throughput plot of the mode (against devices,
// model size or budget), one line per strategy or policy; the time breakdown
// of every row as stacked bars; and the table.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "bench_report.h"
#include "tessera/text.h"

namespace tessera {

namespace {

constexpr int kWidth = 720, kHeight = 320, kLeft = 64, kRight = 150, kTop = 30, kBottom = 50;
const char *kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

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

struct Chart {
    std::vector<std::string> xs;                       // in order of first appearance
    std::map<std::string, std::map<size_t, double>> series;  // name -> x index -> throughput
    std::vector<std::string> names;                   // series in order of first appearance
};

Chart chart_of(const BenchHeader &h, const std::vector<BenchRow> &rows) {
    Chart c;
    for (const BenchRow &r : rows) {
        if (!r.note.empty() || r.throughput <= 0 || (h.mode == "budgets" && r.strategy == "unlimited")) continue;
        const std::string x = x_label(h, r, rows);
        auto at = std::find(c.xs.begin(), c.xs.end(), x);
        if (at == c.xs.end()) at = c.xs.insert(c.xs.end(), x);
        if (!c.series.count(r.strategy)) c.names.push_back(r.strategy);
        c.series[r.strategy][static_cast<size_t>(at - c.xs.begin())] = r.throughput;
    }
    return c;
}

std::string svg_lines(const Chart &c, double top, double x0, double dx) {
    std::string s;
    for (size_t k = 0; k < c.names.size(); k++) {
        const char *color = kColors[k % std::size(kColors)];
        std::string points;
        for (const auto &[i, v] : c.series.at(c.names[k])) {
            const double x = x0 + dx * static_cast<double>(i), y = kTop + (kHeight - kTop - kBottom) * (1 - v / top);
            points += fmt::format("{:.1f},{:.1f} ", x, y);
            s += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='3.5' fill='{}'/>", x, y, color);
        }
        s += fmt::format("<polyline points='{}' fill='none' stroke='{}' stroke-width='2'/>", points, color);
        s += fmt::format("<text x='{}' y='{}' fill='{}' font-size='13'>{}</text>", kWidth - kRight + 14,
                         kTop + 18 * static_cast<int>(k + 1), color, html_escape(c.names[k]));
    }
    return s;
}

std::string svg_throughput(const BenchHeader &h, const std::vector<BenchRow> &rows) {
    const Chart c = chart_of(h, rows);
    if (c.xs.empty()) return "<p>No row has a prediction to plot.</p>";
    double top = 0;
    for (const auto &[name, points] : c.series)
        for (const auto &[i, v] : points) top = std::max(top, v);
    top *= 1.1;
    const double x0 = kLeft + 20, x1 = kWidth - kRight - 10;
    const double dx = c.xs.size() > 1 ? (x1 - x0) / static_cast<double>(c.xs.size() - 1) : 0;
    std::string s = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' "
                                "font-family='sans-serif'>",
                                kWidth, kHeight);
    s += fmt::format("<line x1='{0}' y1='{1}' x2='{0}' y2='{2}' stroke='#333'/>", kLeft, kTop, kHeight - kBottom);
    s += fmt::format("<line x1='{0}' y1='{1}' x2='{2}' y2='{1}' stroke='#333'/>", kLeft, kHeight - kBottom,
                     kWidth - kRight);
    for (int t = 0; t <= 4; t++) {
        const double v = top * t / 4, y = kTop + (kHeight - kTop - kBottom) * (1 - static_cast<double>(t) / 4);
        s += fmt::format("<text x='{}' y='{:.1f}' font-size='11' text-anchor='end'>{}</text>", kLeft - 6, y + 4,
                         samples_rate(v));
    }
    for (size_t i = 0; i < c.xs.size(); i++)
        s += fmt::format("<text x='{:.1f}' y='{}' font-size='11' text-anchor='middle'>{}</text>",
                         x0 + dx * static_cast<double>(i), kHeight - kBottom + 16, html_escape(c.xs[i]));
    s += fmt::format("<text x='{}' y='{}' font-size='12' text-anchor='middle'>{}</text>", (kLeft + kWidth - kRight) / 2,
                     kHeight - 12, x_axis_title(h));
    s += fmt::format("<text x='12' y='{}' font-size='12' transform='rotate(-90 12 {})' text-anchor='middle'>"
                     "samples/s</text>",
                     kHeight / 2, kHeight / 2);
    return s + svg_lines(c, top, x0, dx) + "</svg>";
}

// One stacked bar per row: compute, exposed communication, exposed swapping, idle.
std::string svg_breakdown(const BenchHeader &h, const std::vector<BenchRow> &rows) {
    const int bar = 16, gap = 6, label = 300, width = 400;
    const int height = static_cast<int>(rows.size()) * (bar + gap) + 40;
    std::string s = fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' "
                                "font-family='sans-serif' font-size='11'>",
                                label + width + 20, height);
    const std::pair<const char *, const char *> parts[] = {
        {"compute", "#2ca02c"}, {"exposed comm", "#d62728"}, {"exposed swap", "#ff7f0e"}, {"idle", "#bbbbbb"}};
    for (size_t k = 0; k < std::size(parts); k++)
        s += fmt::format("<rect x='{}' y='4' width='12' height='12' fill='{}'/><text x='{}' y='14'>{}</text>",
                         label + 110 * static_cast<int>(k), parts[k].second, label + 110 * static_cast<int>(k) + 16,
                         parts[k].first);
    for (size_t i = 0; i < rows.size(); i++) {
        const BenchRow &r = rows[i];
        const int y = 28 + static_cast<int>(i) * (bar + gap);
        s += fmt::format("<text x='{}' y='{}' text-anchor='end'>{} · {}</text>", label - 6, y + 12,
                         html_escape(x_label(h, r, rows)), html_escape(r.strategy));
        if (!r.note.empty() || r.step_s <= 0) {
            s += fmt::format("<text x='{}' y='{}' fill='#666'>{}</text>", label, y + 12, html_escape(r.note));
            continue;
        }
        double x = label;
        for (size_t k = 0; k < std::size(parts); k++) {
            const double v = k == 0 ? r.compute_s : k == 1 ? r.exposed_comm_s : k == 2 ? r.exposed_swap_s : r.idle_s;
            const double w = width * v / r.step_s;
            s += fmt::format("<rect x='{:.1f}' y='{}' width='{:.1f}' height='{}' fill='{}'/>", x, y, w, bar,
                             parts[k].second);
            x += w;
        }
    }
    return s + "</svg>";
}

std::string html_table(const std::vector<BenchRow> &rows) {
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
    std::string s = "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>tessera-bench " + html_escape(h.mode) +
                    "</title><style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:"
                    "collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
                    "th{background:#f3f3f3}.note{color:#555}</style></head><body>\n";
    s += fmt::format("<h1>tessera-bench {}: {}</h1>\n<p class='note'>batch {}; machine {} ({}); roofline {}. "
                     "Predictions from the roofline and an alpha-beta model of the links, not measurements.</p>\n",
                     html_escape(h.mode), html_escape(h.model), h.batch, html_escape(h.machine), html_escape(h.links),
                     html_escape(h.roofline));
    s += "<h2>Throughput</h2>\n" + svg_throughput(h, rows) + "\n<h2>Where each step goes</h2>\n" +
         svg_breakdown(h, rows) + "\n<h2>Rows</h2>\n" + html_table(rows) + "\n</body></html>\n";
    return s;
}

}  // namespace tessera
