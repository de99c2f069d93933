// tessera-plan: shows plans without running them.
//
//   --ops                   the operator table, with every operator's partition
//                           strategies as derived by lang/'s analysis;
//   --model SPEC --devices N | --machine FILE
//                           the partition plan of the model's training graph, as a
//                           table, JSON, Graphviz DOT or one HTML page;
//   --compare tofu,data,... several strategies side by side;
//   --device-mem BYTES      the swap plan for one device's share of the graph
//                           under that memory budget (--swap picks the policy,
//                           --swap-compare shows all of them side by side).
//
// Exit codes: 0 success, 1 a user error (unknown model or strategy, a bad value,
// an unreadable machine file, an unwritable output), 2 a usage error (unknown
// flag, flags that do not go together), 3 an internal error (a bug: please
// report it).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_exit.h"
#include "shared_flags.h"
#include "tessera/atomic_file.h"
#include "tessera/error.h"
#include "tessera/graph/optimizer.h"
#include "tessera/host_threads.h"
#include "tessera/lang/strategy.h"
#include "tessera/models/zoo.h"
#include "tessera/partition/lower.h"
#include "tessera/partition/machine.h"
#include "tessera/partition/partition.h"
#include "tessera/partition/render.h"
#include "tessera/pipeline/plan_file.h"
#include "tessera/pipeline/run_plan.h"
#include "tessera/pipeline/stage_log.h"
#include "tessera/predict/roofline.h"
#include "tessera/pipeline/rank_stages.h"
#include "tessera/progress.h"
#include "tessera/size.h"
#include "tessera/swap/render.h"
#include "tessera/swap/swap_plan.h"
#include "tessera/text.h"

namespace {

using tessera::UsageError;

// The canonical variant shown for each operator: the first analysed one, or where
// ranks vary the last rank-2 one (for axis operators, the innermost axis).
std::vector<const tessera::OpStrategies *> canonical_entries() {
    std::vector<const tessera::OpStrategies *> out;
    for (const tessera::OpInfo &o : tessera::all_ops()) {
        const tessera::OpStrategies *pick = nullptr;
        for (const auto &s : tessera::all_strategies()) {
            if (s.variant.substr(0, s.variant.find('[')) != o.name) continue;
            bool rank2 = s.variant.find("rank=2") != std::string::npos;
            if (!pick || rank2) pick = &s;
        }
        if (pick) out.push_back(pick);
    }
    return out;
}

std::string ops_table(bool all) {
    std::string s;
    auto entries = all ? std::vector<const tessera::OpStrategies *>{} : canonical_entries();
    if (all)
        for (const auto &e : tessera::all_strategies()) entries.push_back(&e);
    for (const auto *e : entries) {
        s += fmt::format("{}{}\n", e->variant, e->opaque ? "  (opaque: data-dependent indexing)" : "");
        for (const auto &st : e->strategies) s += "    " + tessera::strategy_str(st) + "\n";
        for (const auto &[var, why] : e->rejected) s += fmt::format("    cannot split {}: {}\n", var, why);
    }
    return s;
}

std::string ops_text(bool all_variants, const std::string &format) {
    if (format != "json") return ops_table(all_variants);
    std::vector<const tessera::OpStrategies *> entries;
    if (all_variants)
        for (const auto &e : tessera::all_strategies()) entries.push_back(&e);
    else
        entries = canonical_entries();
    // The documented shape: a list of {"name", "strategies": [...]}.
    nlohmann::json j = nlohmann::json::parse(tessera::strategies_json(entries, -1));
    for (auto &e : j) e["name"] = e["variant"].get<std::string>().substr(0, e["variant"].get<std::string>().find('['));
    return j.dump(2) + "\n";
}

struct PlanRequest {
    std::string model;
    tessera::Machine machine;
    int64_t batch = tessera::RunSpec{}.batch;  // tessera-train's default too
    std::string optimizer = "sgd";
    std::string precision = "fp32";  // --precision, checked by read_precision
    std::string grad_reduce = "fp32";  // --grad-reduce-dtype, checked by read_grad_reduce
    bool coarsen = true, executable = false;
    tessera::PartitionFlags partition;  // --force, --no-staged-reductions, --no-replicate-weights
};

struct TrainingGraph {
    std::string spec;  // canonical
    tessera::Graph graph;
};


// ---- swapping ----

// Swap options whose search scores candidates on the cores of this machine
// (at most 8): tessera-plan runs alone, where tessera-train's ranks share
// them (SwapOptions::threads).
tessera::SwapOptions with_search_threads() {
    tessera::SwapOptions o;
    o.threads = tessera::host_planning_threads();
    return o;
}

struct SwapRequest {
    std::string device_mem;  // empty: no swap planning
    std::string policy;      // advisor, lru, vdnn, ideal or none
    bool compare = false;
    std::string device = "cpu";
    std::string host_bandwidth;  // empty: the roofline device's
    std::string host_updates = "off";  // --host-updates, into options.host_updates
    std::string recompute = "auto";    // --recompute, into options.recompute
    int rank = 0;
    bool all_ranks = false;      // --rank all: the plan file holds every rank's swap plans
    tessera::SwapOptions options = with_search_threads();  // options.host_updates: --host-updates
};

// The pipeline's spec for the plans below, as tessera-train would make it.
tessera::RunSpec run_spec(const PlanRequest &r, const SwapRequest &s, tessera::PartitionStrategy strategy) {
    tessera::RunSpec spec;
    spec.model = r.model;
    spec.batch = r.batch;
    spec.optimizer.kind = tessera::optimizer_from_name(r.optimizer);
    spec.precision = tessera::read_precision(r.precision);
    spec.grad_reduce = tessera::read_grad_reduce(r.grad_reduce);
    spec.machine = r.machine;
    spec.partition.strategy = strategy;
    spec.partition.coarsen = r.coarsen;
    spec.partition.executable = r.executable;
    r.partition.apply(spec.partition);
    if (!s.device_mem.empty()) spec.budget = tessera::parse_size(s.device_mem, "--device-mem");
    spec.swap.search = s.options;
    if (!s.policy.empty())  // empty: no swap planning asked for (the partition views)
        tessera::read_swap_choice(s.policy, spec.swap.when, spec.swap.search.policy);
    return spec;
}

// The training graph and one partition plan per strategy (the pipeline's
// first stages); what every view below shows.
std::vector<tessera::Plan> make_plans(const PlanRequest &r, const SwapRequest &swap,
                                      const std::vector<tessera::PartitionStrategy> &strategies, TrainingGraph &tg) {
    using namespace tessera;
    tg.spec = model_spec_str(parse_model_spec(r.model));
    PartitionPlans p = plan_partitions(run_spec(r, swap, strategies.at(0)), strategies, [&](PartitionStrategy s) {
        if (isatty(STDERR_FILENO))
            std::cerr << "planning " << tg.spec << " for " << r.machine.devices()
                      << (r.machine.devices() == 1 ? " device (" : " devices (") << partition_strategy_name(s) << ")..."
                      << std::endl;
    });
    tg.graph = std::move(p.model.graph);
    return std::move(p.plans);
}


struct SwapResult {
    int rank = 0, devices = 1;
    tessera::RooflineDevice device;
    double host_bytes_per_s = 0;
    int64_t budget = 0;
    int64_t footprint = 0;  // plan_memory of the default order: what the graph needs without swapping
    tessera::Graph graph;   // what was planned: the rank's lowered graph, or the training graph
    bool none = false;      // --swap none: no plan, only the footprint against the budget
    std::vector<tessera::SwapPlan> plans;  // the policy's plan; with --swap-compare ideal, lru, vdnn, advisor
    // For one policy that runs (advisor, lru, vdnn): the pipeline's plans of
    // the training step and the evaluation pass, for --rank (or every rank with
    // --rank all). plans holds the training plan of --rank. What tessera-train
    // --plan reads.
    std::map<int, tessera::SwapPlans> ranks;
};

// "12.5GB/s", "25e9" or "1.5GiB": bytes per second.
double parse_bandwidth(const std::string &text) {
    std::string t = text;
    if (t.size() > 2 && (t.compare(t.size() - 2, 2, "/s") == 0 || t.compare(t.size() - 2, 2, "ps") == 0))
        t.resize(t.size() - 2);
    char *end = nullptr;
    double plain = std::strtod(t.c_str(), &end);
    if (!t.empty() && end == t.c_str() + t.size() && plain > 0 && std::isfinite(plain)) return plain;
    try {
        return static_cast<double>(tessera::parse_size(t, "--host-bandwidth"));
    } catch (const tessera::Error &) {
        tessera::fail("--host-bandwidth: cannot read '", text,
                      "' as bytes per second; write e.g. 25GB/s, 12.5GiB or 25e9");
    }
}

// The GA's progress on stderr once it has run a second: on a terminal one
// line rewritten in place (at most every 0.2 s), elsewhere a line every 5 s.
class ProgressPrinter {
public:
    explicit ProgressPrinter(std::string label)
        : label_(std::move(label)), out_(tessera::stderr_is_terminal(), tessera::stderr_is_terminal() ? 0.2 : 5.0,
                                         std::cerr) {}
    void operator()(const tessera::SwapProgress &p) {
        if (p.elapsed_s < 1) return;
        out_.show(fmt::format("swap search ({}): generation {}/{}, {} schedules, best {}, {:.1f} s", label_,
                              p.generation, p.generations, p.candidates, tessera::format_duration(p.best_time_s),
                              p.elapsed_s));
    }

private:
    std::string label_;
    tessera::ProgressLine out_;
};

// One policy that runs, through the pipeline (as tessera-train plans it, with
// the roofline model's times): --rank's plans, or every rank's with --rank all.
void plan_swapping_with_pipeline(const SwapRequest &s, const tessera::RunSpec &base,
                                 const tessera::Plan &partition_plan, SwapResult &r) {
    using namespace tessera;
    RooflineDevice linked = r.device;
    linked.host_bytes_per_s = r.host_bytes_per_s;
    const OpTimer roofline = roofline_timer(linked, HostUpdates::Auto);
    for (int rank = 0; rank < r.devices; rank++) {
        if (!s.all_ranks && rank != r.rank) continue;
        RunSpec spec = base;
        spec.rank = rank;
        spec.log_stages = false;
        if (r.devices > 1) spec.given_partition = partition_plan;
        ProgressPrinter printer(s.policy);
        if (rank == r.rank) spec.swap.search.progress = [&printer](const SwapProgress &p) { printer(p); };
        RunPlan run = plan_run(spec, roofline);
        r.ranks[rank] = *run.swaps;
        if (rank != r.rank) continue;
        r.graph = run.graph();
        r.footprint = run.footprint;
        r.plans = {run.swaps->train};
        log_stage("swap", "(" + s.policy + ")\n" + swap_plan_table(r.graph, r.plans.back()));
    }
}

// The swap plans of one device's share: the graph it runs, its operator times
// from the roofline model, its footprint, the plans.
SwapResult plan_swapping(const SwapRequest &s, const tessera::RunSpec &base, const TrainingGraph &tg,
                         const tessera::Plan &partition_plan) {
    using namespace tessera;
    SwapResult r;
    r.devices = partition_plan.devices;
    r.rank = s.rank;
    TESSERA_CHECK(s.rank >= 0 && s.rank < r.devices, "--rank ", s.rank, " is not a rank of ", r.devices,
                  r.devices == 1 ? " device" : " devices", "; give 0 to ", r.devices - 1);
    try {
        r.device = with_precision(roofline_device(s.device), base.precision);
    } catch (const Error &e) {
        fail("--device: ", e.what());
    }
    r.host_bytes_per_s = s.host_bandwidth.empty() ? r.device.host_bytes_per_s : parse_bandwidth(s.host_bandwidth);
    r.budget = parse_size(s.device_mem, "--device-mem");
    if (!s.compare && s.policy != "none" && s.policy != "ideal") {
        plan_swapping_with_pipeline(s, base, partition_plan, r);
        return r;
    }
    // --swap none, ideal, or --swap-compare: the planner alone, on this rank's graph.
    r.graph = r.devices > 1 ? lower(tg.graph, partition_plan, s.rank).graph : tg.graph;
    OpTimes times = roofline_op_times(r.graph, r.device, s.options.host_updates);
    times.h2d_bytes_per_s = times.d2h_bytes_per_s = r.host_bytes_per_s;
    const RankMemory memory = plan_rank_memory(r.graph);
    r.footprint = memory.memory.arena_bytes;
    const SwapProblem problem = make_swap_problem(r.graph, memory.order, times, r.budget, s.options.host_updates);
    if (s.policy == "none") {
        r.none = true;
        if (r.footprint > r.budget)
            fail(tg.spec, (r.devices > 1 ? fmt::format(" (rank {} of {})", r.rank, r.devices) : std::string()),
                 " needs ", format_bytes(r.footprint), " without swapping but --device-mem is ", format_bytes(r.budget),
                 "; swap with --swap advisor (or lru, vdnn), or give --device-mem ", size_flag_at_least(r.footprint));
        return r;
    }
    std::vector<SwapPolicy> policies = {SwapPolicy::Ideal, SwapPolicy::Lru, SwapPolicy::Vdnn, SwapPolicy::Advisor};
    if (!s.compare) policies = {swap_policy_from_name(s.policy)};
    for (SwapPolicy p : policies) {
        SwapOptions o = s.options;
        o.policy = p;
        ProgressPrinter printer(swap_policy_name(p));
        o.progress = [&printer](const SwapProgress &pr) { printer(pr); };
        r.plans.push_back(plan_swaps(problem, o));
        log_stage("swap", std::string("(") + swap_policy_name(p) + ")\n" + swap_plan_table(r.graph, r.plans.back()));
    }
    return r;
}

std::string swap_heading(const SwapResult &r) {
    std::string who = r.devices > 1 ? fmt::format("rank {} of {} (its lowered graph; other ranks are planned alike "
                                                  "with --rank)",
                                                  r.rank, r.devices)
                                    : std::string("one device");
    auto rate = [](double v, const char *unit) {
        return v >= 1e12 ? fmt::format("{:.3g} T{}", v / 1e12, unit) : fmt::format("{:.3g} G{}", v / 1e9, unit);
    };
    return fmt::format("swapping      {}\n"
                       "device        {} roofline: {}, {} memory; host link {}\n"
                       "memory        {} without swapping (plan_memory, default order); budget {}: "
                       "{:.2f}x the budget\n",
                       who, r.device.name, rate(r.device.flops_per_s, "FLOP/s"), rate(r.device.bytes_per_s, "B/s"),
                       rate(r.host_bytes_per_s, "B/s"), tessera::format_bytes(r.footprint),
                       tessera::format_bytes(r.budget), static_cast<double>(r.footprint) / static_cast<double>(r.budget));
}

std::string swap_compare_table(const SwapResult &r) {
    double ideal = r.plans.front().time_s;
    std::string s = fmt::format("{:<9} {:>13} {:>9} {:>10} {:>13} {:>13}\n", "policy", "predicted", "vs ideal",
                                "of ideal", "swapped out", "swapped in");
    for (const tessera::SwapPlan &p : r.plans)
        s += fmt::format("{:<9} {:>13} {:>8.3f}x {:>9.1f}% {:>13} {:>13}\n", tessera::swap_policy_name(p.policy),
                         tessera::format_duration(p.time_s), p.time_s / ideal, 100 * ideal / p.time_s,
                         tessera::format_bytes(p.swap_out_bytes), tessera::format_bytes(p.swap_in_bytes));
    return s;
}

std::string swap_text(const SwapResult &r) {
    std::string s = "\n" + swap_heading(r);
    if (r.none) return s + "fits          no swapping needed (--swap none)\n";
    if (r.plans.size() > 1) return s + "\n" + swap_compare_table(r);
    const tessera::SwapPlan &p = r.plans.front();
    s += fmt::format("after         arena {} = the budget; pinned {}; high water {}; peak resident {}\n",
                     tessera::format_bytes(p.arena_bytes), tessera::format_bytes(p.pinned_bytes),
                     tessera::format_bytes(p.high_water), tessera::format_bytes(p.peak_bytes));
    auto planned = r.ranks.find(r.rank);
    if (planned != r.ranks.end() && planned->second.bound)
        s += "bound         " + tessera::describe_swap_bound(*planned->second.bound, p.ideal_time_s) +
             " (swap_lower_bound)\n";
    return s + "\n" + tessera::swap_plan_table(r.graph, p);
}

void add_swap_json(nlohmann::json &j, const SwapResult &r) {
    j["swap_context"] = {{"rank", r.rank},
                         {"devices", r.devices},
                         {"device", r.device.name},
                         {"host_bytes_per_s", r.host_bytes_per_s},
                         {"budget", r.budget},
                         {"footprint_bytes", r.footprint}};
    if (r.none) {
        j["swap"] = nullptr;
        return;
    }
    // "swap" is the chosen plan (with --swap-compare, the advisor's): exactly
    // swap_plan_to_json, so swap_plan_from_json reads it back.
    j["swap"] = tessera::swap_plan_to_json(r.plans.back());
    if (r.plans.size() > 1) {
        nlohmann::json rows = nlohmann::json::array();
        double ideal = r.plans.front().time_s;
        for (const tessera::SwapPlan &p : r.plans)
            rows.push_back({{"policy", tessera::swap_policy_name(p.policy)},
                            {"time_s", p.time_s},
                            {"ratio_to_ideal", p.time_s / ideal},
                            {"swap_out_bytes", p.swap_out_bytes},
                            {"swap_in_bytes", p.swap_in_bytes},
                            {"plan", tessera::swap_plan_to_json(p)}});
        j["swap_compare"] = rows;
    }
}

std::string add_swap_html(const std::string &page, const SwapResult &r) {
    std::string s = "<h2>Memory before and after swapping</h2>\n<pre>" + swap_heading(r) + "</pre>\n";
    if (r.none) s += "<p>The graph fits the budget: no swapping (--swap none).</p>\n";
    if (r.plans.size() > 1) s += "<pre>" + swap_compare_table(r) + "</pre>\n";
    for (const tessera::SwapPlan &p : r.plans) s += tessera::swap_plan_html_section(r.graph, p);
    size_t at = page.rfind("</body>");
    TESSERA_INTERNAL_ASSERT(at != std::string::npos, "plan_html produced no </body>");
    return page.substr(0, at) + s + page.substr(at);
}

int parse_rank(const std::string &text) {
    size_t used = 0;
    int r = -1;
    try {
        r = std::stoi(text, &used);
    } catch (const std::exception &) {
        used = 0;
    }
    TESSERA_CHECK(used == text.size() && r >= 0, "--rank: '", text, "' is not a rank (0, 1, ...) or 'all'");
    return r;
}

// The JSON tessera-train --plan reads: the plan, what it was made for, and
// (under a budget, for a policy that runs) the ranks' swap plans.
std::string plan_file_json(const PlanRequest &req, const SwapRequest &swap, const tessera::Plan &plan,
                           const std::optional<SwapResult> &swapped) {
    nlohmann::json j = nlohmann::json::parse(tessera::plan_to_json(plan));
    const tessera::RunSpec spec = run_spec(req, swap, tessera::partition_strategy_from_name(plan.strategy));
    j["run"] = tessera::run_identity(spec);
    if (swapped) {
        add_swap_json(j, *swapped);
        if (!swapped->ranks.empty()) j["swap_ranks"] = tessera::swap_ranks_json(swapped->ranks);
    }
    return j.dump(2) + "\n";
}

// Every flag's value, and the options whose use needs --device-mem.
struct PlanArgs {
    bool ops = false, all_variants = false, no_coarsen = false, executable = false;
    std::string format = "table", out_path, strategy = "tofu", compare, machine_path, rank_text = "0";
    std::optional<int> devices;
    PlanRequest req;
    SwapRequest swap;
    CLI::Option *devices_opt = nullptr, *machine_opt = nullptr, *mem_opt = nullptr, *format_opt = nullptr;
    std::vector<CLI::Option *> swap_only;
    bool planning() const { return !req.model.empty(); }
    bool swapping() const { return mem_opt->count() > 0; }
};


const char *kFooter =
    "\nExamples:\n"
    "  tessera-plan --model mlp --devices 4\n"
    "  tessera-plan --model wresnet:depth=50 --machine cluster.json --format html -o plan.html\n"
    "  tessera-plan --model mlp --devices 8 --compare tofu,data,owt\n"
    "  tessera-plan --model transformer --devices 1 --device-mem 64MiB --swap-compare\n"
    "  tessera-plan --model mlp --devices 4 --device-mem 16MiB --roofline h100 --format html -o swap.html\n"
    "  tessera-plan --model cnn --devices 4 --device-mem 1MiB --rank all --format json -o plan.json\n"
    "      (then: mpirun -np 4 tessera-train --model cnn --device-mem 1MiB --plan plan.json)\n"
    "\nA machine file lists its levels of links, outermost (slowest) first:\n"
    "  {\"name\": \"cluster\", \"levels\": [\n"
    "    {\"name\": \"node\", \"count\": 2, \"bandwidth_gbps\": 12.5, \"latency_us\": 10},\n"
    "    {\"name\": \"gpu\", \"count\": 8, \"bandwidth_gbps\": 300, \"latency_us\": 2}]}\n"
    "\nWith --device-mem and more than one device, the partition plan is made --executable and "
    "lowered,\nand the swap plan is for one rank's lowered graph (--rank, default 0).\n"
    "\nSet TESSERA_LOG=partition,swap (or all) to print each plan's table to stderr too.";

void add_plan_flags(CLI::App &app, PlanArgs &a) {
    app.add_flag("--ops", a.ops, "List the operators and the partition strategies of each");
    app.add_flag("--all-variants", a.all_variants, "With --ops: every analysed variant (ranks, axes, transposes)");
    app.add_option("--model", a.req.model, "Model spec to plan, e.g. mlp or wresnet:depth=50,width=2");
    a.devices_opt = app.add_option("--devices", a.devices, "Number of devices (a flat machine of N devices)");
    a.machine_opt =
        app.add_option("--machine", a.machine_path, "Machine description (JSON: levels of links, outermost first)");
    app.add_option("--batch", a.req.batch, "Global batch size")->capture_default_str();
    app.add_option("--optimizer", a.req.optimizer, "sgd or adam: the optimizer whose state the plan holds")
        ->capture_default_str();
    tessera::add_precision_flag(app, a.req.precision);
    tessera::add_grad_reduce_flag(app, a.req.grad_reduce);
    auto *strategy_opt = app.add_option("--strategy", a.strategy,
                                        "tofu (the search), data, ddp (data with batch norm per device, as PyTorch DDP), fsdp (ddp with "
                                        "weights, gradients and optimizer state sharded, as FSDP), owt (one weird "
                                        "trick), equalchop, or brute")
                             ->capture_default_str();
    app.add_option("--compare", a.compare, "Plan with each of these strategies (comma separated) and compare them")
        ->excludes(strategy_opt);
    a.format_opt = app.add_option("--format", a.format,
                                  "Output format: table, json, dot or html (default: from -o's extension, .json, "
                                  ".html, .dot or .txt, else table)")
                       ->check(CLI::IsMember({"table", "json", "dot", "html"}))
                       ->capture_default_str();
    app.add_option("-o,--output", a.out_path, "Write to this file instead of standard output");
    app.add_flag("--executable", a.executable,
                 "The plan mpirun ... tessera-train --partition runs (no dropout blocks, no partial maxima), "
                 "with each rank's exact bytes once lowered");
    tessera::add_partition_flags(app, a.req.partition, "");
    app.add_flag("--no-coarsen", a.no_coarsen, "Search every tensor and operator on its own (slower)");
}

void add_swap_flags(CLI::App &app, PlanArgs &a) {
    SwapRequest &swap = a.swap;
    a.mem_opt = app.add_option("--device-mem", swap.device_mem,
                               "Device memory budget (e.g. 512MiB, 1.5GB): plan swaps to fit one device in it");
    auto *swap_opt =
        app.add_option("--swap", swap.policy, "Swap policy: advisor (default), lru, vdnn, ideal, or none (no swapping)");
    a.swap_only = {swap_opt};
    a.swap_only.push_back(
        app.add_flag("--swap-compare", swap.compare, "Plan ideal, lru, vdnn and advisor and compare them")
            ->excludes(swap_opt));
    a.swap_only.push_back(app.add_option("--roofline,--device", swap.device,
                                         "Roofline preset for operator times: cpu or h100 (--device is the older "
                                         "name; in tessera-train --device is the hardware)")
                              ->capture_default_str());
    a.swap_only.push_back(app.add_option("--host-bandwidth", swap.host_bandwidth,
                                         "Host-device copy bandwidth (e.g. 25GB/s), instead of the device's"));
    a.swap_only.push_back(app.add_option("--rank", a.rank_text,
                                         "With several devices: the rank whose graph to swap, or 'all' (the JSON then "
                                         "holds every rank's swap plans, for tessera-train --plan under mpirun)")
                              ->capture_default_str());
    // The swap search's flags and defaults are tessera-train's (SwapOptions').
    for (CLI::Option *o : tessera::add_swap_search_flags(app, swap.options.population, swap.options.generations,
                                                         swap.options.patience, swap.options.time_limit_s))
        a.swap_only.push_back(o);
    a.swap_only.push_back(
        app.add_option("--seed", swap.options.seed, "Swap search: random seed")->capture_default_str());
    a.swap_only.push_back(tessera::add_host_updates_flag(app, swap.host_updates));
    a.swap_only.push_back(tessera::add_recompute_flag(app, swap.recompute));
}

// The format -o's extension names: json, html, dot or table (.txt); "" for
// any other extension, or none.
std::string format_of_extension(const std::string &path) {
    const std::string ext = std::filesystem::path(path).extension().string();
    if (ext == ".json") return "json";
    if (ext == ".html" || ext == ".htm") return "html";
    if (ext == ".dot" || ext == ".gv") return "dot";
    if (ext == ".txt") return "table";
    return "";
}

// Without --format, -o's extension chooses it; with it, a known extension must
// agree (a table in plan.json is a file tessera-train --plan cannot read).
void resolve_format(PlanArgs &a) {
    const std::string named = format_of_extension(a.out_path);
    if (named.empty()) return;
    if (a.format_opt->count() == 0) {
        a.format = named;
        return;
    }
    if (a.format != named)
        throw UsageError{"-o " + a.out_path + " names " + named + " by its extension, but --format is " + a.format +
                         "; drop --format or make them agree"};
}

// Combinations CLI11 cannot express.
void check_usage(const PlanArgs &a) {
    auto usage = [](const std::string &msg) { throw UsageError{msg}; };
    const bool planning = a.planning(), swapping = a.swapping();
    const std::string &format = a.format;
    if (a.ops && planning) usage("--ops and --model show different things; give one of them");
    if (!a.ops && !planning) usage("nothing to show; use --ops, or --model SPEC with --devices N or --machine FILE");
    if (a.ops && (format == "dot" || format == "html"))
        usage("--format " + format + " applies to model plans; --ops prints table or json");
    if (planning && a.devices_opt->count() == 0 && a.machine_opt->count() == 0)
        usage("--model needs --devices N or --machine FILE");
    if (!a.compare.empty() && (format == "dot" || format == "html"))
        usage("--compare prints a table or json, not --format " + format);
    for (CLI::Option *o : a.swap_only)
        if (o->count() > 0 && !swapping) usage(o->get_name() + " plans swaps; give --device-mem BYTES too");
    if (swapping && a.ops) usage("--device-mem plans swaps for a model; give --model, not --ops");
    if (swapping && !a.compare.empty())
        usage("--device-mem plans swaps for one partition plan; give --strategy, not --compare");
    if (swapping && format == "dot")
        usage("--format dot shows the partition only; swap plans print as table, json or html");
}

// The swap flags' values fail before any planning starts.
void check_swap_values(PlanArgs &a) {
    SwapRequest &swap = a.swap;
    if (swap.policy.empty()) swap.policy = "advisor";
    swap.options.host_updates = tessera::host_updates_from_name(swap.host_updates);
    swap.options.recompute = swap.recompute == "auto";
    if (swap.policy != "none") {
        try {
            tessera::swap_policy_from_name(swap.policy);
        } catch (const tessera::Error &e) {
            tessera::fail("--swap: ", e.what(), " or none");
        }
    }
    tessera::parse_size(swap.device_mem, "--device-mem");
    swap.all_ranks = a.rank_text == "all";
    if (!swap.all_ranks) swap.rank = parse_rank(a.rank_text);
    if (!swap.host_bandwidth.empty()) parse_bandwidth(swap.host_bandwidth);
}

// The most devices tessera-plan plans for: an --executable plan lowers every
// rank's graph, so its time grows with the device count (docs/cli.md).
constexpr int kMaxPlanDevices = 4096;

// The machine of --devices or --machine, and the strategies to plan with.
std::vector<tessera::PartitionStrategy> read_machine_and_strategies(PlanArgs &a) {
    if (a.devices)
        TESSERA_CHECK(*a.devices >= 1 && *a.devices <= kMaxPlanDevices, "--devices must be in [1, ", kMaxPlanDevices,
                      "], got ", *a.devices);
    PlanRequest &req = a.req;
    req.machine = a.machine_path.empty() ? tessera::flat_machine(*a.devices) : tessera::load_machine(a.machine_path);
    TESSERA_CHECK(req.machine.devices() <= kMaxPlanDevices, "--machine ", a.machine_path, " has ",
                  req.machine.devices(), " devices; tessera-plan plans for at most ", kMaxPlanDevices);
    if (a.devices && req.machine.devices() != *a.devices)
        throw UsageError{fmt::format("--devices {} disagrees with --machine {}, which has {} devices; "
                                     "omit --devices or make them agree",
                                     *a.devices, a.machine_path, req.machine.devices())};
    req.coarsen = !a.no_coarsen;
    // Swapping plans one rank's lowered graph, and only executable plans lower.
    req.executable = a.executable || (a.swapping() && req.machine.devices() > 1);
    std::vector<tessera::PartitionStrategy> strategies;
    const std::vector<std::string> names =
        a.compare.empty() ? std::vector<std::string>{a.strategy} : tessera::split_list(a.compare);
    for (const std::string &name : names) {
        try {
            strategies.push_back(tessera::partition_strategy_from_name(name));
        } catch (const tessera::Error &e) {
            tessera::fail(a.compare.empty() ? "--strategy: " : "--compare: ", e.what());
        }
        TESSERA_CHECK(std::count(strategies.begin(), strategies.end(), strategies.back()) == 1, "--compare: '", name,
                      "' is given twice; name each strategy once");
    }
    return strategies;
}

// The model's plans in the asked format.
std::string model_plan_text(PlanArgs &a) {
    const std::vector<tessera::PartitionStrategy> strategies = read_machine_and_strategies(a);
    if (a.swapping()) check_swap_values(a);
    TrainingGraph tg;
    std::vector<tessera::Plan> plans = make_plans(a.req, a.swap, strategies, tg);
    std::optional<SwapResult> swapped;
    if (a.swapping())
        swapped = plan_swapping(a.swap, run_spec(a.req, a.swap, strategies[0]), tg, plans[0]);
    if (!a.compare.empty())
        return a.format == "json" ? tessera::compare_json(plans) + "\n" : tessera::compare_table(plans);
    if (a.format == "json") return plan_file_json(a.req, a.swap, plans[0], swapped);
    if (a.format == "dot") return tessera::plan_dot(plans[0]);
    if (a.format == "html") {
        std::string text = tessera::plan_html(plans[0]);
        return swapped ? add_swap_html(text, *swapped) : text;
    }
    return tessera::plan_table(plans[0]) + (swapped ? swap_text(*swapped) : std::string());
}


}  // namespace

int main(int argc, char **argv) {
    CLI::App app{"tessera-plan: inspect partition and swap plans without running them"};
    app.footer(tessera::models_help() + kFooter);
    PlanArgs a;
    add_plan_flags(app, a);
    add_swap_flags(app, a);
    try {
        app.parse(argc, argv);
        tessera::refuse_empty_values(app);
    } catch (const CLI::ParseError &e) {
        return app.exit(e) == 0 ? 0 : 2;  // --help is success; any usage error exits 2
    }
    return tessera::exit_code_of("tessera-plan", [&] {
        resolve_format(a);
        check_usage(a);
        const std::string text = a.ops ? ops_text(a.all_variants, a.format) : model_plan_text(a);
        tessera::write_output(a.out_path, text);
    });
}
