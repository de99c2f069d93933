#include "tessera/report/bench_report.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tessera/text.h"

namespace tessera {

namespace {

// "1.23 GB/step"-style columns read best in the shared formatters; a share of
// the step is a percentage of the slowest rank's step.
std::string share(double part, double step) {
    if (step <= 0) return "-";
    return fmt::format("{:.0f}%", 100 * part / step);
}

std::string header_text(const BenchHeader &h) {
    const std::string memory =
        h.device_mem > 0 ? fmt::format("memory    {} per device; a rank over it swaps, recomputes and updates on the "
                                       "host to fit (the swap planner)\n",
                                       format_bytes(h.device_mem))
                         : "";
    return fmt::format("tessera-bench {}: {}, batch {}, {}\n"
                       "machine   {} ({})\n"
                       "{}"
                       "roofline  {}; predictions from the roofline and an alpha-beta model of the links, "
                       "not measurements\n\n",
                       h.mode, h.model, h.batch, h.precision, h.machine, h.links, memory, h.roofline);
}

std::string advantage_text(const std::vector<TofuAdvantage> &adv) {
    if (adv.empty()) return "";
    std::string s = "\nTofu over the best alternative (its step over Tofu's; > 1: Tofu is faster):\n";
    for (const TofuAdvantage &a : adv)
        s += fmt::format("  {:<36} {:.2f}x  (best alternative: {})\n", a.model, a.ratio, a.best_alternative);
    return s;
}

}  // namespace

std::string samples_rate(double samples_per_s) {
    if (samples_per_s >= 1e6) return fmt::format("{:.3g}M", samples_per_s / 1e6);
    if (samples_per_s >= 1e4) return fmt::format("{:.3g}K", samples_per_s / 1e3);
    return fmt::format("{:.4g}", samples_per_s);
}

std::vector<TofuAdvantage> tofu_advantages(const std::vector<BenchRow> &rows) {
    std::vector<TofuAdvantage> out;
    std::vector<std::string> models;
    for (const BenchRow &r : rows)
        if (std::find(models.begin(), models.end(), r.model) == models.end()) models.push_back(r.model);
    for (const std::string &m : models) {
        const BenchRow *tofu = nullptr, *best = nullptr;
        for (const BenchRow &r : rows) {
            if (r.model != m || r.strategy == "single") continue;
            if (r.strategy == "tofu") tofu = &r;
            else if (!best || r.step_s < best->step_s) best = &r;
        }
        if (tofu && best && tofu->step_s > 0) out.push_back({m, best->strategy, best->step_s / tofu->step_s});
    }
    return out;
}

std::string bench_table(const BenchHeader &h, const std::vector<BenchRow> &rows) {
    const bool many_models = h.mode == "models";
    std::string s = header_text(h);
    if (many_models) s += fmt::format("{:<36} ", "model");
    s += fmt::format("{:>7} {:<10} {:>9} {:>10} {:>8} {:>6} {:>11} {:>11} | {:>8} {:>8} {:>6} {:>6} {:>6}\n",
                     "devices", "strategy", "step", "samples/s", "speed-up", "eff.", "comm/step", "mem/device",
                     "slowest", "compute", "comm", "swap", "idle");
    for (const BenchRow &r : rows) {
        if (many_models) s += fmt::format("{:<36} ", r.model);
        if (!r.note.empty()) {
            s += fmt::format("{:>7} {:<10} {} (budget {})\n", r.devices, r.strategy, r.note, format_bytes(r.memory_bytes));
            continue;
        }
        s += fmt::format("{:>7} {:<10} {:>9} {:>10} {:>7.2f}x {:>5.0f}% {:>11} {:>11} | {:>8} {:>8} {:>6} {:>6} {:>6}\n",
                         r.devices, r.strategy, format_duration(r.step_s), samples_rate(r.throughput), r.speedup,
                         100 * r.efficiency, format_bytes(r.comm_bytes), format_bytes(r.memory_bytes),
                         fmt::format("rank {}", r.slowest_rank), share(r.compute_s, r.step_s),
                         share(r.exposed_comm_s, r.step_s), share(r.exposed_swap_s, r.step_s),
                         share(r.idle_s, r.step_s));
    }
    if (h.mode == "budgets")
        s += "\nstrategy: the swap policy; speed-up: the share of the unlimited step's throughput; comm/step: bytes\n"
             "swapped per step, in and out; mem/device: the budget; compute, comm, swap, idle: the step as the\n"
             "compute stream spends it (exposed swapping).\n";
    else
        s += fmt::format("\nspeed-up: against the same model on one device; eff.: speed-up / devices; comm/step: bytes "
                         "all ranks\nsend per step; mem/device: {}; compute, comm, swap, idle:\n"
                         "the slowest rank's step as its compute stream spends it (exposed communication and "
                         "swapping).\n",
                         h.device_mem > 0 ? "the budget where a rank swaps, else its arena"
                                          : "the largest rank's arena without swapping");
    return s + advantage_text(many_models ? tofu_advantages(rows) : std::vector<TofuAdvantage>{});
}

std::string bench_json(const BenchHeader &h, const std::vector<BenchRow> &rows) {
    nlohmann::json j;
    j["format"] = "tessera-bench";
    j["mode"] = h.mode;
    j[h.mode == "models" ? "family" : "model"] = h.model;
    j["batch"] = h.batch;
    j["precision"] = h.precision;
    if (h.device_mem > 0) j["device_mem"] = h.device_mem;
    j["machine"] = h.machine;
    j["links"] = h.links;
    j["roofline"] = h.roofline;
    j["prediction"] = "roofline operator times and an alpha-beta model of the links; not measured";
    nlohmann::json out = nlohmann::json::array();
    for (const BenchRow &r : rows)
        out.push_back({{"model", r.model},
                       {"devices", r.devices},
                       {"strategy", r.strategy},
                       {"step_s", r.step_s},
                       {"throughput", r.throughput},
                       {"speedup", r.speedup},
                       {"efficiency", r.efficiency},
                       {"comm_bytes", r.comm_bytes},
                       {"memory_bytes", r.memory_bytes},
                       {"slowest_rank", r.slowest_rank},
                       {"compute_s", r.compute_s},
                       {"exposed_comm_s", r.exposed_comm_s},
                       {"exposed_swap_s", r.exposed_swap_s},
                       {"idle_s", r.idle_s},
                       {"note", r.note}});
    j["rows"] = out;
    if (h.mode == "models") {
        nlohmann::json adv = nlohmann::json::array();
        for (const TofuAdvantage &a : tofu_advantages(rows))
            adv.push_back({{"model", a.model}, {"best_alternative", a.best_alternative}, {"tofu_over_best", a.ratio}});
        j["tofu_over_best"] = adv;
    }
    return j.dump(2) + "\n";
}

}  // namespace tessera
