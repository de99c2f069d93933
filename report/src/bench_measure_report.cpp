// The measure mode's reports: a table, JSON, and a page with plots. The
// measured steps and the prediction sit in the same row, and the error is the
// prediction's against the measurement.
#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tessera/html_page.h"
#include "tessera/report/bench_measure.h"
#include "tessera/report/bench_report.h"
#include "tessera/report/bench_svg.h"
#include "tessera/text.h"

namespace tessera {

namespace {

const char *kPrediction =
    "the whole-step simulator, fed with the operator times measured inside each step (--simulate-steps)";

std::string share(double part, double step) { return step > 0 ? fmt::format("{:.0f}%", 100 * part / step) : "-"; }

std::string what_ran(const MeasureHeader &h) {
    return fmt::format("batch {}, {} steps (medians over steps 2 to {}), Adam, {} per rank, {} here", h.batch, h.steps,
                       h.steps, count_of(h.threads, "thread"), count_of(h.cores, "core"));
}

size_t model_width(const std::vector<MeasureRow> &rows) {
    size_t w = 5;
    for (const MeasureRow &r : rows) w = std::max(w, r.model.size());
    return w;
}

std::string budget_text(const MeasureRow &r) {
    return r.budget_bytes > 0 ? format_bytes(r.budget_bytes) : std::string("-");
}

std::string table_row(const MeasureRow &r, size_t w) {
    std::string s = fmt::format("{:<{}} {:<9} {:>2} {:>6} ", r.model, w, r.strategy, r.devices, r.budget);
    if (!r.error.empty()) return s + "failed: " + r.error + "\n";
    const MeasuredTimes &t = r.measured;
    return s + fmt::format("{:>10} {:>10} {:>+7.1f}% {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} | {:>6} {:>6} {:>6}\n",
                           format_duration(t.step_s), format_duration(t.predicted_step_s), t.error_pct,
                           samples_rate(t.samples_per_s), samples_rate(t.predicted_samples_per_s),
                           format_bytes(r.footprint_bytes), budget_text(r), format_bytes(r.comm_bytes),
                           format_bytes(t.swap_bytes), share(t.predicted_compute_idle_s, t.predicted_step_s),
                           share(t.predicted_exposed_comm_s, t.predicted_step_s),
                           share(t.predicted_exposed_swap_s, t.predicted_step_s));
}

nlohmann::json measured_json(const MeasuredTimes &t) {
    return {{"step_s", t.step_s},
            {"samples_per_s", t.samples_per_s},
            {"predicted_step_s", t.predicted_step_s},
            {"predicted_samples_per_s", t.predicted_samples_per_s},
            {"error_pct", t.error_pct},
            {"predicted_compute_idle_s", t.predicted_compute_idle_s},
            {"predicted_exposed_comm_s", t.predicted_exposed_comm_s},
            {"predicted_exposed_swap_s", t.predicted_exposed_swap_s},
            {"swap_bytes", t.swap_bytes}};
}

// The x of a row in its model's plot, and its line: N = 1 ("single") starts
// every strategy's line, as in the scaling mode.
std::vector<std::string> strategies_of(const std::vector<MeasureRow> &rows) {
    std::vector<std::string> out;
    for (const MeasureRow &r : rows)
        if (r.strategy != "single" && std::find(out.begin(), out.end(), r.strategy) == out.end())
            out.push_back(r.strategy);
    if (out.empty()) out.push_back("single");
    return out;
}

// One model's steps against N: per strategy and budget a solid line measured
// and a dashed one predicted, in one colour.
LineChart step_chart(const std::string &model, const std::vector<MeasureRow> &rows) {
    LineChart c;
    c.x_title = "ranks (N)";
    c.y_title = "";  // the heading says what is plotted; a title here would cover the tick labels
    c.y_label = format_duration;
    std::map<std::string, size_t> lines;  // "strategy budget measured|predicted" -> index in c.series
    auto point = [&](const std::string &name, int color, bool dashed, size_t x, double v) {
        if (!lines.count(name)) {
            lines[name] = c.series.size();
            c.series.push_back({name, {}, color, dashed});
        }
        c.series[lines[name]].points[x] = v;
    };
    const std::vector<std::string> strategies = strategies_of(rows);
    std::map<std::string, int> colors;  // "strategy budget" -> colour
    for (const MeasureRow &r : rows) {
        if (r.model != model || !r.error.empty()) continue;
        const std::string n = std::to_string(r.devices);
        auto at = std::find(c.xs.begin(), c.xs.end(), n);
        if (at == c.xs.end()) at = c.xs.insert(c.xs.end(), n);
        const size_t x = static_cast<size_t>(at - c.xs.begin());
        for (const std::string &s : strategies) {
            if (r.strategy != "single" && r.strategy != s) continue;
            const std::string key = s + " " + r.budget;
            const int color = colors.emplace(key, static_cast<int>(colors.size())).first->second;
            point(key + " measured", color, false, x, r.measured.step_s);
            point(key + " predicted", color, true, x, r.measured.predicted_step_s);
        }
    }
    return c;
}

// One model's rows: per row the predicted step's parts, and a tick at the measured step.
std::string svg_rows(const std::string &model, const std::vector<MeasureRow> &rows) {
    const BarLegend legend{{{"compute + idle", "#2ca02c"}, {"exposed comm", "#d62728"}, {"exposed swap", "#ff7f0e"}},
                           "measured step"};
    std::vector<StackedBar> bars;
    for (const MeasureRow &r : rows) {
        if (r.model != model) continue;
        const MeasuredTimes &t = r.measured;
        const std::string label = fmt::format("N={} · {} · budget {}", r.devices, r.strategy, r.budget);
        if (!r.error.empty()) {
            bars.push_back({label, {}, 0, -1, "failed: " + r.error});
            continue;
        }
        bars.push_back({label,
                        {t.predicted_compute_idle_s, t.predicted_exposed_comm_s, t.predicted_exposed_swap_s},
                        std::max(t.step_s, t.predicted_step_s),
                        t.step_s,
                        ""});
    }
    return svg_stacked_bars(legend, bars);
}

std::string html_rows_table(const std::vector<MeasureRow> &rows) {
    std::string s = "<table><tr><th>model</th><th>strategy</th><th>N</th><th>budget</th><th>measured</th>"
                    "<th>predicted</th><th>error</th><th>samples/s measured</th><th>samples/s predicted</th>"
                    "<th>footprint</th><th>device-mem</th><th>comm/step</th><th>swap/step</th></tr>";
    for (const MeasureRow &r : rows) {
        s += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td>", html_escape(r.model),
                         html_escape(r.strategy), r.devices, html_escape(r.budget));
        if (!r.error.empty()) {
            s += fmt::format("<td colspan='9' style='text-align:left'>failed: {}</td></tr>", html_escape(r.error));
            continue;
        }
        const MeasuredTimes &t = r.measured;
        s += fmt::format("<td>{}</td><td>{}</td><td>{:+.1f}%</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                         "<td>{}</td><td>{}</td></tr>",
                         format_duration(t.step_s), format_duration(t.predicted_step_s), t.error_pct,
                         samples_rate(t.samples_per_s), samples_rate(t.predicted_samples_per_s),
                         format_bytes(r.footprint_bytes), budget_text(r), format_bytes(r.comm_bytes),
                         format_bytes(t.swap_bytes));
    }
    return s + "</table>";
}

}  // namespace

std::string measure_table(const MeasureHeader &h, const std::vector<MeasureRow> &rows) {
    const size_t w = model_width(rows);
    std::string s = fmt::format("tessera-bench measure: {}\n{}\nmeasured on this machine; predicted: {}\n\n",
                                join(h.models, " "), what_ran(h), kPrediction);
    s += fmt::format("{:<{}} {:<9} {:>2} {:>6} {:>10} {:>10} {:>8} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} | {:>6} "
                     "{:>6} {:>6}\n",
                     "model", w, "strategy", "N", "budget", "measured", "predicted", "error", "meas/s", "pred/s",
                     "footprint", "device-mem", "comm/step", "swap/step", "cmp+id", "comm", "swap");
    for (const MeasureRow &r : rows) s += table_row(r, w);
    return s + "\nmeasured, predicted: the step, medians over the steps after the first; error: predicted against\n"
               "measured; meas/s, pred/s: samples per second; footprint: rank 0's arena without a budget; device-mem:\n"
               "each rank's budget (the footprint times the budget's fraction); comm/step, swap/step: rank 0's bytes\n"
               "sent and swapped per step; cmp+id, comm, swap: the predicted step of the slowest rank as its compute\n"
               "stream spends it (compute and idle, exposed communication, exposed swapping).\n";
}

std::string measure_json(const MeasureHeader &h, const std::vector<MeasureRow> &rows) {
    nlohmann::json j;
    j["format"] = "tessera-bench";
    j["mode"] = "measure";
    j["models"] = h.models;
    j["batch"] = h.batch;
    j["steps"] = h.steps;
    j["threads_per_rank"] = h.threads;
    j["cores"] = h.cores;
    j["optimizer"] = "adam";
    j["prediction"] = kPrediction;
    j["measured_fields"] = "each row's \"measured\" holds everything timed; the rest is the same on every run";
    nlohmann::json out = nlohmann::json::array();
    for (const MeasureRow &r : rows)
        out.push_back({{"model", r.model},
                       {"strategy", r.strategy},
                       {"devices", r.devices},
                       {"budget", r.budget},
                       {"budget_bytes", r.budget_bytes},
                       {"footprint_bytes", r.footprint_bytes},
                       {"comm_bytes", r.comm_bytes},
                       {"steps", r.steps},
                       {"run", r.run},
                       {"error", r.error},
                       {"measured", r.error.empty() ? measured_json(r.measured) : nlohmann::json(nullptr)}});
    j["rows"] = out;
    return j.dump(2) + "\n";
}

std::string measure_html(const MeasureHeader &h, const std::vector<MeasureRow> &rows) {
    std::string body;
    for (const std::string &model : h.models)
        body += html_h2(model) + "<h3>Step against N</h3>\n" + svg_line_chart(step_chart(model, rows)) +
                "\n<h3>Where each predicted step goes, and the measured step</h3>\n" + svg_rows(model, rows) + "\n";
    body += html_h2("Rows") + html_rows_table(rows) + "\n";
    const std::string note = html_escape(what_ran(h)) + ". Measured on this machine; predicted: " +
                             html_escape(kPrediction) + ". Solid lines are measured, dashed predicted.";
    return html_page("tessera-bench measure", "tessera-bench measure: " + join(h.models, " "), note, body,
                     PageLook::Compact);
}

}  // namespace tessera
