#include "tessera/report/bench_measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tessera/atomic_file.h"
#include "tessera/error.h"
#include "tessera/report/child_process.h"
#include "tessera/text.h"

namespace tessera {

namespace {

// One run's configuration.
struct RunConfig {
    std::string model, strategy;
    int devices = 1;
    MeasureBudget budget;
    int64_t budget_bytes = 0;
};

// What one run left: its step lines, or why there are none.
struct RunResult {
    std::vector<nlohmann::json> steps;
    std::string error;
    double wall_s = 0;
};

// The median as Python's statistics.median takes it: the mean of the middle two of an even count.
double median(std::vector<double> v) {
    TESSERA_INTERNAL_ASSERT(!v.empty(), "median of nothing");
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

std::string read_text(const std::string &path) {
    std::ifstream in(path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// The metrics lines that describe a step ({"step": ...}), in order; evaluation lines are skipped.
std::vector<nlohmann::json> step_lines(const std::string &text) {
    std::vector<nlohmann::json> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        if (line.empty()) continue;
        nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_discarded() && j.contains("step")) out.push_back(std::move(j));
    }
    return out;
}

// The rank an error line names ("tessera-train: rank 3: error: ..."), -1 for none.
int rank_named(const std::string &line) {
    const size_t at = line.find(": rank ");
    if (at == std::string::npos || at > line.find("error:")) return -1;
    return std::atoi(line.c_str() + at + 7);
}

// "tessera-train: rank 1: error: budget ..." -> "budget ...". Ranks and
// mpirun share one output file, so mpirun's abort banner ("-----...") may
// follow a rank's message on the same line: it is cut off.
std::string message_after_error(const std::string &line) {
    size_t at = line.find("error:") + 6;
    while (at < line.size() && line[at] == ' ') at++;
    return line.substr(at, line.find("-----", at) - at);
}

// Why a run failed, in one line: tessera-train's message (what follows
// "error: " on the line that says so), of the lowest rank that printed one;
// else the output's last line; else how the run ended. The message leaves out
// which rank printed it: when every rank fails alike, the first to abort the
// job is a race, and the others may be ended before they print.
std::string failure_of(const std::string &output, const ChildExit &e, double timeout_s) {
    if (e.timed_out) return fmt::format("the run took longer than {:g} s (--timeout) and was ended", timeout_s);
    std::istringstream in(output);
    std::string first_error, last;
    for (std::string line; std::getline(in, line);) {
        if (line.find("error:") != std::string::npos &&
            (first_error.empty() || rank_named(line) < rank_named(first_error)))
            first_error = line;
        if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
    }
    if (!first_error.empty()) return message_after_error(first_error);
    if (!last.empty()) return last;
    return e.signal ? fmt::format("the run ended on signal {}", e.signal) : fmt::format("the run exited {}", e.code);
}

std::vector<std::string> train_argv(const RunConfig &c, const MeasureOptions &o, const std::string &metrics) {
    std::vector<std::string> a{o.train_path, "--model", c.model, "--data", "synthetic", "--synthetic-size",
                               std::to_string(o.batch * o.steps), "--batch", std::to_string(o.batch), "--steps",
                               std::to_string(o.steps), "--optimizer", "adam", "--threads", std::to_string(o.threads),
                               "--progress", "none", "--no-eval", "--simulate-steps", "--swap-time-limit",
                               fmt::format("{:g}", o.search_s), "--metrics", metrics};
    if (c.devices > 1) a.insert(a.end(), {"--partition", c.strategy});
    if (c.budget_bytes > 0) a.insert(a.end(), {"--device-mem", std::to_string(c.budget_bytes)});
    if (c.devices == 1) return a;
    // One rank per core, as a device would be; more ranks than cores share them unbound.
    std::vector<std::string> mpi{o.mpirun_path, "-np", std::to_string(c.devices)};
    if (o.oversubscribe) mpi.insert(mpi.end(), {"--oversubscribe", "--bind-to", "none"});
    else mpi.insert(mpi.end(), {"--bind-to", "core"});
    if (o.as_root) mpi.push_back("--allow-run-as-root");
    mpi.insert(mpi.end(), a.begin(), a.end());
    return mpi;
}

// Runs the configuration once; keeps its metrics in options.metrics_dir when asked.
RunResult run_once(const RunConfig &c, const MeasureOptions &o, int run) {
    TempDir dir("tessera-bench-measure");
    const std::string metrics = dir.path() + "/metrics.jsonl", out = dir.path() + "/output";
    const auto start = std::chrono::steady_clock::now();
    const ChildExit e = run_child(train_argv(c, o, metrics), out, o.timeout_s);
    RunResult r;
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string lines = read_text(metrics);
    if (!o.metrics_dir.empty())
        write_file_atomically(fmt::format("{}/run-{:02d}.jsonl", o.metrics_dir, run), lines, "metrics file");
    if (!e.ok()) {
        r.error = failure_of(read_text(out), e, o.timeout_s);
        return r;
    }
    r.steps = step_lines(lines);
    if (r.steps.size() < 2)
        r.error = fmt::format("the run wrote {} step lines to its metrics; the medians need at least 2",
                              r.steps.size());
    return r;
}

int64_t integer_field(const nlohmann::json &line, const char *key) {
    return line.contains(key) ? line[key].get<int64_t>() : 0;
}

// Medians over the steps after the first.
MeasuredTimes times_of(const std::vector<nlohmann::json> &steps, int64_t batch) {
    std::vector<double> measured, predicted, comm, swap, rest, swapped;
    for (size_t i = 1; i < steps.size(); i++) {
        const nlohmann::json &s = steps[i];
        const double p = s.at("simulated_step_time_s"), c = s.at("simulated_exposed_comm_s"),
                     w = s.at("simulated_exposed_swap_s");
        measured.push_back(s.at("job_step_time_s"));  // the slowest rank's, as the prediction
        predicted.push_back(p);
        comm.push_back(c);
        swap.push_back(w);
        rest.push_back(p - c - w);
        swapped.push_back(static_cast<double>(integer_field(s, "swap_in_bytes") + integer_field(s, "swap_out_bytes")));
    }
    MeasuredTimes t;
    t.step_s = median(measured);
    t.predicted_step_s = median(predicted);
    t.samples_per_s = t.step_s > 0 ? static_cast<double>(batch) / t.step_s : 0;
    t.predicted_samples_per_s = t.predicted_step_s > 0 ? static_cast<double>(batch) / t.predicted_step_s : 0;
    t.error_pct = t.step_s > 0 ? (t.predicted_step_s - t.step_s) / t.step_s * 100 : 0;
    t.predicted_compute_idle_s = median(rest);
    t.predicted_exposed_comm_s = median(comm);
    t.predicted_exposed_swap_s = median(swap);
    t.swap_bytes = static_cast<int64_t>(median(swapped));
    return t;
}

MeasureRow row_of(const RunConfig &c, const RunResult &r, int run, int64_t batch) {
    MeasureRow row;
    row.model = c.model;
    row.strategy = c.strategy;
    row.devices = c.devices;
    row.budget = c.budget.label;
    row.budget_bytes = c.budget_bytes;
    row.run = run;
    row.error = r.error;
    if (!r.error.empty()) return row;
    try {
        row.footprint_bytes = integer_field(r.steps.front(), "footprint_bytes");
        row.comm_bytes = integer_field(r.steps.back(), "comm_bytes");
        row.steps = static_cast<int>(r.steps.size()) - 1;
        row.measured = times_of(r.steps, batch);
    } catch (const nlohmann::json::exception &e) {
        row.footprint_bytes = row.comm_bytes = 0;
        row.steps = 0;
        row.measured = {};
        row.error = fmt::format("its metrics lines lack what the medians need ({}); was it run with --simulate-steps?",
                                e.what());
    }
    return row;
}

void report_progress(const MeasureOptions &o, const MeasureRow &row, double wall_s) {
    if (!o.progress) return;
    const std::string what = fmt::format("run {}: {} {} N={} budget {}", row.run, row.model, row.strategy,
                                         row.devices, row.budget);
    if (!row.error.empty()) {
        o.progress(fmt::format("{}: failed: {}", what, row.error));
        return;
    }
    const MeasuredTimes &t = row.measured;
    o.progress(fmt::format("{}: {} measured, {} predicted ({:+.1f}%) in {:.1f} s", what, format_duration(t.step_s),
                           format_duration(t.predicted_step_s), t.error_pct, wall_s));
}

// The rows of one strategy at one N: unconstrained first, then each budget
// as a fraction of that run's footprint.
std::vector<MeasureRow> measure_at(const std::string &model, const std::string &strategy, int devices,
                                   const std::vector<MeasureBudget> &budgets, const MeasureOptions &o, int &run) {
    RunConfig plain{model, strategy, devices, MeasureBudget{"none", 0}, 0};
    const int plain_run = ++run;
    const RunResult first = run_once(plain, o, plain_run);
    const MeasureRow unconstrained = row_of(plain, first, plain_run, o.batch);
    report_progress(o, unconstrained, first.wall_s);
    std::vector<MeasureRow> rows;
    for (const MeasureBudget &b : budgets) {
        if (b.fraction == 0) {
            rows.push_back(unconstrained);
            continue;
        }
        RunConfig c = plain;
        c.budget = b;
        if (!unconstrained.error.empty()) {
            rows.push_back(row_of(c, RunResult{{}, "not run: the run without a budget failed, so there is no "
                                                     "footprint to take a fraction of"},
                                  0, o.batch));
            continue;
        }
        c.budget_bytes = static_cast<int64_t>(std::floor(static_cast<double>(unconstrained.footprint_bytes) *
                                                         b.fraction / 64)) * 64;
        if (c.budget_bytes <= 0) {  // a budget of 0 would be no budget at all, under a row that names one
            rows.push_back(row_of(c, RunResult{{}, fmt::format("not run: {} of the footprint ({}) is below 64 "
                                                               "bytes, the smallest budget",
                                                               b.label, format_bytes(unconstrained.footprint_bytes))},
                                  0, o.batch));
            rows.back().footprint_bytes = unconstrained.footprint_bytes;
            continue;
        }
        const int this_run = ++run;
        const RunResult r = run_once(c, o, this_run);
        rows.push_back(row_of(c, r, this_run, o.batch));
        rows.back().footprint_bytes = unconstrained.footprint_bytes;
        report_progress(o, rows.back(), r.wall_s);
    }
    return rows;
}

}  // namespace

MeasureBudget parse_measure_budget(const std::string &text) {
    if (text == "none") return {"none", 0};
    double fraction = 0;
    size_t used = 0;
    try {
        if (text.rfind("1/", 0) == 0) {
            const long k = std::stol(text.substr(2), &used);
            used += 2;
            fraction = k >= 1 ? 1.0 / static_cast<double>(k) : 0;
        } else {
            fraction = std::stod(text, &used);
        }
    } catch (const std::exception &) {
        used = 0;
    }
    TESSERA_CHECK(used == text.size() && !text.empty() && fraction > 0 && fraction <= 1, "--budgets: '", text,
                  "' is not a budget; give none, 1/K (a fraction of the footprint of the run without a budget, "
                  "K a positive integer) or a fraction in (0, 1], e.g. none,1/4");
    return {text, fraction};
}

std::vector<MeasureRow> measure_model(const std::string &model, const std::vector<std::string> &strategies,
                                      const std::vector<int> &devices, const std::vector<MeasureBudget> &budgets,
                                      const MeasureOptions &options, int &run) {
    std::vector<MeasureRow> rows;
    auto add = [&](const std::vector<MeasureRow> &more) { rows.insert(rows.end(), more.begin(), more.end()); };
    // One rank has no partition: the same run for every strategy.
    if (std::find(devices.begin(), devices.end(), 1) != devices.end())
        add(measure_at(model, "single", 1, budgets, options, run));
    for (const std::string &s : strategies)
        for (int n : devices)
            if (n > 1) add(measure_at(model, s, n, budgets, options, run));
    return rows;
}

}  // namespace tessera
