// tessera-bench: predicted training steps, for every strategy, from what each
// rank would run (bench_predict.h: partition, lowering, programs, roofline
// operator times, the whole-step simulator).
//
//   scaling --model SPEC --devices 1,2,4,8 | --machine FILE
//       one model over device counts: a row per count and strategy;
//   models --family wresnet|rnn --devices 8 | --machine FILE
//       a model family over its sizes at one machine (Tofu's evaluation): a
//       row per model and strategy, plus one device, and Tofu's step against
//       the best alternative;
//   budgets --model SPEC --ratios 1,2,4
//       one device against its memory budget, every swap policy;
//   measure --model SPEC --devices 1,2 --budgets none,1/4
//       real runs of tessera-train on this machine (bench_measure.h), beside
//       the whole-step simulator's prediction of the same steps.
//
// Exit codes: 0 success, 1 a user error (unknown model, family or strategy, a
// bad device count, an unreadable machine file, an unwritable output), 2 a
// usage error (unknown mode or flag, flags that do not go together), 3 an
// internal error (a bug: please report it).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <span>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli_exit.h"
#include "shared_flags.h"
#include "tessera/atomic_file.h"
#include "tessera/error.h"
#include "tessera/models/zoo.h"
#include "tessera/partition/machine.h"
#include "tessera/pipeline/rank_stages.h"
#include "tessera/pipeline/run_plan.h"
#include "tessera/predict/partition_choice.h"
#include "tessera/predict/roofline.h"
#include "tessera/predict/step_predictor.h"
#include "tessera/progress.h"
#include "tessera/report/bench_measure.h"
#include "tessera/report/bench_report.h"
#include "tessera/report/child_process.h"
#include "tessera/size.h"
#include "tessera/swap/swap_plan.h"
#include "tessera/text.h"

namespace {

using tessera::UsageError;


// Every flag of every mode.
struct BenchArgs {
    std::string model, family, devices_text, machine_path, roofline = "cpu", strategies, sizes, format = "table",
                                                                           out_path;
    int64_t batch = 128;
    std::string ratios = "1,2,4,8,16", policies = "advisor,lru,vdnn,ideal";  // budgets
    double per_weight_s = 0;  // scaling, models: the per-weight search after the strategies (partition_choice.h)
    double search_s = 5;                                                    // budgets, measure: advisor's search
    std::vector<std::string> models;                                        // measure: --model, repeatable
    std::string budgets = "none", metrics_dir;                              // measure
    int64_t steps = 8;
    int threads = 1;
    double timeout_s = 600;
    bool oversubscribe = false;
    std::string device_mem;  // scaling, models: per-device memory; empty: unlimited
    std::string precision = "fp32";  // scaling, models, budgets: the step's precision (graph/precision.h)
    std::string grad_reduce = "fp32";  // with a 16-bit precision: the weight gradients' sums (GradReduce)
    double bucket_mb = 25;   // scaling, models: fused all-reduces' bucket (PartitionOptions::bucket_bytes)
};

// A positive integer up to 65536 for `flag`, which names what it counts in
// its error ("a device count").
int parse_positive(const std::string &text, const std::string &flag, const std::string &what) {
    size_t used = 0;
    long v = 0;
    try {
        v = std::stol(text, &used);
    } catch (const std::exception &) {
        used = 0;
    }
    TESSERA_CHECK(used == text.size() && !text.empty() && v >= 1 && v <= 65536, flag, ": '", text,
                  "' is not ", what, " (a positive integer up to 65536)");
    return static_cast<int>(v);
}

std::vector<tessera::PartitionStrategy> parse_strategies(const std::string &text) {
    std::vector<tessera::PartitionStrategy> out;
    for (const std::string &name : tessera::split_list(text)) {
        TESSERA_CHECK(name != "brute", "--strategies: brute tries every assignment and is for small graphs only; "
                                       "give tofu, data, owt or equalchop");
        try {
            out.push_back(tessera::partition_strategy_from_name(name));
        } catch (const tessera::Error &e) {
            tessera::fail("--strategies: ", e.what());
        }
    }
    return out;
}

tessera::RooflineDevice read_roofline(const std::string &name) {
    try {
        return tessera::roofline_device(name);
    } catch (const tessera::Error &e) {
        tessera::fail("--roofline: ", e.what());
    }
}

// Progress on stderr once the work has taken a second: on a terminal one line
// redrawn in place, elsewhere a line every 5 s.
class BenchProgress {
public:
    BenchProgress()
        : line_(tessera::stderr_is_terminal(), tessera::stderr_is_terminal() ? 0.2 : 5.0, std::cerr),
          start_(std::chrono::steady_clock::now()) {}
    void operator()(const std::string &text) {
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
        if (elapsed >= 1) line_.show(fmt::format("tessera-bench: {} ({:.0f} s)", text, elapsed));
    }

private:
    tessera::ProgressLine line_;
    std::chrono::steady_clock::time_point start_;
};

tessera::BenchHeader header_for(const std::string &mode, const std::string &what, const tessera::Machine &m,
                                const BenchArgs &a) {
    return {mode,
            what,
            tessera::machine_str(m),
            tessera::machine_links_str(m),
            a.roofline,
            a.batch,
            tessera::precision_name(tessera::read_precision(a.precision)),
            a.device_mem.empty() ? 0 : tessera::parse_size(a.device_mem, "--device-mem")};
}

// The training graph every mode predicts, at --batch, --precision and --grad-reduce-dtype.
tessera::Graph training_graph(const BenchArgs &a, const std::string &model) {
    return tessera::build_training_graph(model, a.batch, {}, tessera::read_precision(a.precision),
                                         tessera::read_grad_reduce(a.grad_reduce));
}

std::string report(const BenchArgs &a, const tessera::BenchHeader &h, const std::vector<tessera::BenchRow> &rows) {
    if (a.format == "json") return tessera::bench_json(h, rows);
    return a.format == "html" ? tessera::bench_html(h, rows) : tessera::bench_table(h, rows);
}

// The predictions' shared context; --device-mem and --search-time make ranks
// over the budget swap.
tessera::BenchContext bench_context(const BenchArgs &a, BenchProgress &progress) {
    tessera::BenchContext ctx{tessera::with_precision(read_roofline(a.roofline), tessera::read_precision(a.precision)),
                              a.batch, std::ref(progress)};
    if (!a.device_mem.empty()) ctx.device_mem = tessera::parse_size(a.device_mem, "--device-mem");
    ctx.search_s = a.search_s;
    ctx.bucket_bytes = std::llround(a.bucket_mb * double(int64_t{1} << 20));
    return ctx;
}

// ---- scaling ----

// The machines of the scaling rows: flat ones for --devices alone; the file's
// with --machine alone; the file's speeds at each count of --devices with both.
std::vector<tessera::Machine> scaling_machines(const BenchArgs &a) {
    std::vector<int> counts;
    if (!a.devices_text.empty())
        for (const std::string &item : tessera::split_list(a.devices_text))
            counts.push_back(parse_positive(item, "--devices", "a device count"));
    if (a.machine_path.empty()) {
        std::vector<tessera::Machine> out;
        for (int n : counts) out.push_back(tessera::flat_machine(n));
        return out;
    }
    const tessera::Machine like = tessera::load_machine(a.machine_path);
    if (counts.empty()) return {like};
    std::vector<tessera::Machine> out;
    for (int n : counts) out.push_back(tessera::machine_scaled_to(like, n));
    return out;
}

// The per-weight search (partition_choice.h) on machine m from the best of
// its strategies' rows `these`; a row saying so when none works.
tessera::BenchRow per_weight_row(const BenchArgs &a, const tessera::BenchContext &ctx, const tessera::Graph &training,
                                 const tessera::Machine &m, std::span<const tessera::BenchRow> these) {
    const tessera::BenchRow *best = nullptr;
    for (const tessera::BenchRow &r : these)
        if (r.note.empty() && (!best || r.step_s < best->step_s)) best = &r;
    if (!best) return tessera::BenchRow{.model = these[0].model, .devices = m.devices(), .strategy = "per-weight",
                                        .note = "cannot work: no strategy works to start from"};
    tessera::PartitionQuestion q;
    q.model = best->model;
    q.batch = a.batch;
    q.machine = m;
    q.budget = ctx.device_mem;
    q.device = ctx.device;
    q.search_s = ctx.search_s;
    q.bucket_bytes = ctx.bucket_bytes;
    q.weights_s = a.per_weight_s;
    q.progress = ctx.progress;
    return tessera::choose_weights(q, training, tessera::partition_strategy_from_name(best->strategy), *best).second;
}

std::string run_scaling(const BenchArgs &a) {
    if (a.model.empty()) throw UsageError{"scaling needs --model SPEC"};
    if (a.devices_text.empty() && a.machine_path.empty())
        throw UsageError{"scaling needs --devices N,N,... or --machine FILE (or both)"};
    if (!a.sizes.empty() || !a.family.empty()) throw UsageError{"--family and --sizes belong to the models mode"};
    const std::vector<tessera::Machine> machines = scaling_machines(a);
    const auto strategies = parse_strategies(a.strategies.empty() ? "tofu,data,owt,equalchop" : a.strategies);
    BenchProgress progress;
    tessera::BenchContext ctx = bench_context(a, progress);
    const std::string model = tessera::model_spec_str(tessera::parse_model_spec(a.model));
    const tessera::Graph training = training_graph(a, a.model);
    const tessera::BenchRow single = tessera::predict_single(model, training, ctx);
    std::vector<tessera::BenchRow> rows;
    for (const tessera::Machine &m : machines) {
        for (tessera::PartitionStrategy s : strategies) {
            // One device is the same prediction for every strategy: no partition.
            tessera::BenchRow row = m.devices() == 1 ? single : tessera::predict_partitioned(model, training, m, s, ctx);
            row.strategy = tessera::partition_strategy_name(s);
            rows.push_back(row);
        }
        if (a.per_weight_s > 0 && m.devices() > 1)
            rows.push_back(per_weight_row(a, ctx, training, m, std::span(rows).last(strategies.size())));
    }
    tessera::fill_speedups(rows, single);
    tessera::BenchHeader h = header_for("scaling", model, machines.back(), a);
    if (machines.size() > 1) h.machine += a.machine_path.empty() ? " at the largest count; each count flat"
                                                                  : " at the largest count; each count scaled alike";
    return report(a, h, rows);
}

// ---- models ----

// The family's model specs: Tofu's sizes, or --sizes; parameters given after
// the family's name (wresnet:depth=18) replace the family's own.
std::vector<std::string> family_models(const std::string &family_text, const std::string &sizes) {
    tessera::ModelSpec given = tessera::parse_model_spec(family_text);
    const bool wresnet = given.name == "wresnet", rnn = given.name == "rnn" || given.name == "lstm";
    TESSERA_CHECK(wresnet || rnn, "--family: unknown family '", given.name, "'; give wresnet or rnn");
    std::vector<std::string> items =
        tessera::split_list(!sizes.empty() ? sizes : wresnet ? "4,6,8,10" : "6x4096,6x6144,6x8192,8x4096,8x6144,8x8192,"
                                                                   "10x4096,10x6144,10x8192");
    std::vector<std::string> out;
    for (const std::string &item : items) {
        tessera::ModelSpec spec{wresnet ? "wresnet" : "lstm", {}};
        if (wresnet) {
            const int width = parse_positive(item, "--sizes", "a WResNet width");
            spec.params = {{"depth", "152"}, {"width", std::to_string(width)}};
        } else {
            size_t x = item.find('x');
            TESSERA_CHECK(x != std::string::npos, "--sizes: '", item, "' is not LAYERSxHIDDEN (e.g. 6x4096)");
            spec.params = {{"layers", std::to_string(parse_positive(item.substr(0, x), "--sizes", "a layer count"))},
                           {"hidden", std::to_string(parse_positive(item.substr(x + 1), "--sizes", "a hidden size"))}};
        }
        for (const auto &[k, v] : given.params) spec.params[k] = v;
        out.push_back(tessera::model_spec_str(spec));
    }
    return out;
}

tessera::Machine models_machine(const BenchArgs &a) {
    if (a.machine_path.empty())
        return tessera::flat_machine(parse_positive(a.devices_text, "--devices", "a device count"));
    tessera::Machine m = tessera::load_machine(a.machine_path);
    if (!a.devices_text.empty() && parse_positive(a.devices_text, "--devices", "a device count") != m.devices())
        throw UsageError{fmt::format("--devices {} disagrees with --machine {}, which has {} devices; omit "
                                     "--devices or make them agree",
                                     a.devices_text, a.machine_path, m.devices())};
    return m;
}

std::string run_models(const BenchArgs &a) {
    if (a.family.empty()) throw UsageError{"models needs --family wresnet or rnn"};
    if (!a.model.empty()) throw UsageError{"models runs a family (--family); --model belongs to the scaling mode"};
    if (a.devices_text.empty() && a.machine_path.empty()) throw UsageError{"models needs --devices N or --machine FILE"};
    const tessera::Machine machine = models_machine(a);
    const auto strategies = parse_strategies(a.strategies.empty() ? "tofu,data,owt" : a.strategies);
    const std::vector<std::string> models = family_models(a.family, a.sizes);
    BenchProgress progress;
    tessera::BenchContext ctx = bench_context(a, progress);
    std::vector<tessera::BenchRow> rows;
    for (const std::string &model : models) {
        const tessera::Graph training = training_graph(a, model);
        const tessera::BenchRow single = tessera::predict_single(model, training, ctx);
        std::vector<tessera::BenchRow> these;
        for (tessera::PartitionStrategy s : strategies)
            these.push_back(tessera::predict_partitioned(model, training, machine, s, ctx));
        if (a.per_weight_s > 0 && machine.devices() > 1) these.push_back(per_weight_row(a, ctx, training, machine, these));
        these.push_back(single);
        tessera::fill_speedups(these, single);
        rows.insert(rows.end(), these.begin(), these.end());
    }
    return report(a, header_for("models", a.family, machine, a), rows);
}

// ---- budgets ----

std::vector<tessera::SwapPolicy> parse_policies(const std::string &text) {
    std::vector<tessera::SwapPolicy> out;
    for (const std::string &name : tessera::split_list(text)) out.push_back(tessera::swap_policy_from_name(name));
    return out;
}

// One device at 1/r of its footprint for each ratio r, every policy; the
// unconstrained step is the reference (speed-up: the share of its throughput).
std::string run_budgets(const BenchArgs &a) {
    if (a.model.empty()) throw UsageError{"budgets needs --model SPEC"};
    if (!a.devices_text.empty() || !a.machine_path.empty() || !a.family.empty() || !a.strategies.empty())
        throw UsageError{"budgets runs one device: --devices, --machine, --family and --strategies belong to the "
                         "other modes"};
    const auto policies = parse_policies(a.policies);
    std::vector<int> ratios;
    for (const std::string &item : tessera::split_list(a.ratios))
        ratios.push_back(parse_positive(item, "--ratios", "a budget ratio"));
    BenchProgress progress;
    tessera::BenchContext ctx = bench_context(a, progress);
    const std::string model = tessera::model_spec_str(tessera::parse_model_spec(a.model));
    const tessera::Graph training = training_graph(a, a.model);
    const int64_t footprint = tessera::plan_rank_memory(training).memory.arena_bytes;
    tessera::BenchRow single = tessera::predict_single(model, training, ctx);
    single.strategy = "unlimited";
    std::vector<tessera::BenchRow> rows{single};
    for (int r : ratios)
        for (tessera::SwapPolicy p : policies)
            rows.push_back(tessera::predict_swapped(model, training, footprint / r / 64 * 64, p, a.search_s, ctx));
    tessera::fill_speedups(rows, single);
    return report(a, header_for("budgets", model, tessera::flat_machine(1), a), rows);
}

// ---- measure ----

// --devices for real runs: default 1 and 2 (1 alone on one core); more ranks
// than this process's cores only with --oversubscribe, and then with a warning,
// since ranks sharing a core time each other's work.
std::vector<int> measure_devices(const BenchArgs &a, int cores) {
    std::vector<int> out;
    for (const std::string &item : tessera::split_list(a.devices_text.empty() ? cores > 1 ? "1,2" : "1" : a.devices_text))
        out.push_back(parse_positive(item, "--devices", "a device count"));
    const int most = *std::max_element(out.begin(), out.end());
    TESSERA_CHECK(most <= cores || a.oversubscribe, "--devices: ", most, " ranks need ", most,
                  " cores, one each, and this process may use ", tessera::count_of(cores, "core"), "; give at most ",
                  cores, ", or add --oversubscribe to let ranks share cores (the measurements then mean little)");
    if (most > cores)
        std::cerr << fmt::format("tessera-bench: warning: {} ranks on {}: ranks share cores, so their steps time "
                                 "each other's work as well\n",
                                 most, tessera::count_of(cores, "core"));
    return out;
}

// tessera-train beside this program, and mpirun on PATH when a count needs it.
tessera::MeasureOptions measure_options(const BenchArgs &a, const std::vector<int> &devices) {
    tessera::MeasureOptions o;
    o.train_path = tessera::own_directory() + "/tessera-train";
    TESSERA_CHECK(tessera::is_executable(o.train_path), "measure runs tessera-train, which is not beside tessera-bench (",
                  o.train_path, " is missing or not executable); build it (cmake --build build --target "
                  "tessera-train) or install both programs in one directory");
    const int most = *std::max_element(devices.begin(), devices.end());
    if (most > 1) {
        o.mpirun_path = tessera::find_on_path("mpirun");
        TESSERA_CHECK(!o.mpirun_path.empty(), "--devices ", most, " needs mpirun on PATH to start ", most,
                      " ranks, and there is none; install OpenMPI (Debian: openmpi-bin), or measure --devices 1");
    }
    o.batch = a.batch;
    o.steps = a.steps;
    o.threads = a.threads;
    o.search_s = a.search_s;
    o.timeout_s = a.timeout_s;
    o.oversubscribe = a.oversubscribe;
    o.as_root = geteuid() == 0;
    o.metrics_dir = a.metrics_dir;
    if (!o.metrics_dir.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(o.metrics_dir, ec);
        TESSERA_CHECK(!ec, "--metrics-dir: cannot make '", o.metrics_dir, "': ", ec.message());
    }
    o.progress = [](const std::string &line) { std::cerr << "tessera-bench: " << line << std::endl; };
    return o;
}

// Each model's canonical spec; an unknown model or parameter fails here, before any run.
std::vector<std::string> measure_models(const BenchArgs &a) {
    std::vector<std::string> out;
    for (const std::string &text : a.models) {
        tessera::build_model(text, a.batch);
        out.push_back(tessera::model_spec_str(tessera::parse_model_spec(text)));
    }
    return out;
}

std::string run_measure(const BenchArgs &a) {
    if (a.models.empty()) throw UsageError{"measure needs --model SPEC (give it again for more models)"};
    const int cores = tessera::usable_cores();
    const std::vector<int> devices = measure_devices(a, cores);
    std::vector<std::string> strategies;
    for (tessera::PartitionStrategy s : parse_strategies(a.strategies.empty() ? "tofu" : a.strategies))
        strategies.push_back(tessera::partition_strategy_name(s));
    std::vector<tessera::MeasureBudget> budgets;
    for (const std::string &item : tessera::split_list(a.budgets)) budgets.push_back(tessera::parse_measure_budget(item));
    const std::vector<std::string> models = measure_models(a);
    const tessera::MeasureOptions options = measure_options(a, devices);
    std::vector<tessera::MeasureRow> rows;
    int runs = 0;
    for (const std::string &model : models) {
        const auto these = tessera::measure_model(model, strategies, devices, budgets, options, runs);
        rows.insert(rows.end(), these.begin(), these.end());
    }
    const tessera::MeasureHeader h{models, a.batch, a.steps, a.threads, cores};
    if (a.format == "json") return tessera::measure_json(h, rows);
    return a.format == "html" ? tessera::measure_html(h, rows) : tessera::measure_table(h, rows);
}

// ---- the program ----

const char *kFooter =
    "\nExamples:\n"
    "  tessera-bench scaling --model mlp --devices 1,2,4,8\n"
    "  tessera-bench scaling --model wresnet:depth=152,width=4 --devices 1,2,4,8,16,32,64 \\\n"
    "      --machine configs/machines/2x8-nvlink.json --roofline h100\n"
    "  tessera-bench models --family wresnet --machine configs/machines/8-nvlink.json --roofline h100\n"
    "  tessera-bench models --family rnn:seq=8 --sizes 2x256,4x256 --devices 4 --format json -o rnn.json\n"
    "  tessera-bench budgets --model transformer --ratios 1,4,8,12 --roofline h100\n"
    "  tessera-bench measure --model mlp:layers=8,hidden=512,input=256,classes=8 --model cnn --batch 32 \\\n"
    "      --devices 1,2 --budgets none,1/4 --format html -o measured.html\n"
    "\nWith --machine and --devices, scaling keeps the file's link speeds and fills its inner levels up\n"
    "to their counts, the outermost level taking the rest (2x8-nvlink at 4 devices: one node of 4 GPUs;\n"
    "at 64: 8 nodes of 8). Every number is a prediction: roofline operator times, an alpha-beta model\n"
    "of the links, no swapping; measure is the exception: it runs tessera-train.";

void add_flags(CLI::App &app, BenchArgs &a) {
    app.add_option("--model", a.model, "scaling: the model spec, e.g. mlp or wresnet:depth=152,width=4");
    app.add_option("--family", a.family,
                   "models: wresnet (depth 152, widths 4,6,8,10) or rnn (lstm, layers 6,8,10 x hidden 4096,6144,"
                   "8192); parameters after a colon replace the family's (rnn:seq=8)");
    app.add_option("--sizes", a.sizes, "models: the sizes instead of Tofu's: widths (4,6) or LAYERSxHIDDEN (6x4096)");
    app.add_option("--devices", a.devices_text, "scaling: device counts (1,2,4,8); models: one count");
    app.add_option("--machine", a.machine_path, "Machine description (JSON: levels of links, outermost first)");
    app.add_option("--batch", a.batch, "Global batch size (samples per step of the whole job)")
        ->check(tessera::positive_number())
        ->capture_default_str();
    app.add_option("--roofline", a.roofline, "Roofline preset for operator times and the host link: cpu or h100")
        ->capture_default_str();
    tessera::add_precision_flag(app, a.precision);
    tessera::add_grad_reduce_flag(app, a.grad_reduce);
    app.add_option("--per-weight", a.per_weight_s,
                   "scaling, models: after the strategies, seconds for the per-weight search from the best of them "
                   "(that strategy with each of its largest weights fixed replicated or split, as tessera-train "
                   "--partition auto searches under a budget); 0: none")
        ->check(tessera::non_negative_number());
    app.add_option("--strategies", a.strategies,
                   "Partition strategies, comma separated (scaling: tofu,data,owt,equalchop; models: tofu,data,owt)");
    app.add_option("--format", a.format, "Output format: table, json or html (a page with plots)")
        ->check(CLI::IsMember({"table", "json", "html"}))
        ->capture_default_str();
    app.add_option("-o,--output", a.out_path, "Write to this file (atomically) instead of standard output");
}

// scaling and models: strategies compared under a per-device memory budget.
void add_memory_flags(CLI::App &app, BenchArgs &a) {
    app.add_option("--device-mem", a.device_mem,
                   "Memory per device (e.g. 16GiB): a rank that needs more swaps, recomputes and updates on the "
                   "host to fit (the swap planner), and the strategies compare on their steps under it");
    app.add_option("--search-time", a.search_s, "With --device-mem: seconds the swap planner may search, per rank")
        ->check(tessera::positive_number())
        ->capture_default_str();
    app.add_option("--bucket-mb", a.bucket_mb,
                   "Fuse each device's all-reduces into buckets of this many MiB (as tessera-train --bucket-mb); 0: "
                   "one collective per tensor")
        ->check(CLI::Range(0.0, 1e6))
        ->capture_default_str();
}

void add_budget_flags(CLI::App &app, BenchArgs &a) {
    app.add_option("--ratios", a.ratios, "budgets: the footprint over each budget (1,2,4,8,16: 1/1 to 1/16)")
        ->capture_default_str();
    app.add_option("--policies", a.policies, "budgets: swap policies, comma separated (advisor, lru, vdnn, ideal)")
        ->capture_default_str();
    app.add_option("--search-time", a.search_s, "budgets: seconds the advisor's genetic search may take per budget")
        ->check(tessera::positive_number())
        ->capture_default_str();
}


// measure's flags: what to run, and how.
void add_measure_flags(CLI::App &app, BenchArgs &a) {
    app.add_option("--model", a.models, "The model spec; give --model again for more models")
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    app.add_option("--devices", a.devices_text, "Rank counts, one run each (default 1,2, at most this process's cores)");
    app.add_option("--strategies", a.strategies, "Partition strategies for N > 1, comma separated (default tofu)");
    app.add_option("--budgets", a.budgets,
                   "Memory budgets per rank: none, or fractions of the footprint of the run without one (1/4, 0.3)")
        ->capture_default_str();
    app.add_option("--batch", a.batch, "Global batch size (samples per step of the whole job)")
        ->check(tessera::positive_number())
        ->capture_default_str();
    app.add_option("--steps", a.steps, "Steps per run; the medians are over the steps after the first")
        ->check(CLI::Range(int64_t{2}, int64_t{1000000}))
        ->capture_default_str();
    app.add_option("--threads", a.threads, "CPU threads per rank")->check(tessera::positive_number())->capture_default_str();
    app.add_option("--search-time", a.search_s, "Seconds the swap planner may search, per run under a budget")
        ->check(tessera::positive_number())
        ->capture_default_str();
    app.add_option("--timeout", a.timeout_s, "Seconds a run may take before it is ended (and is a row saying so)")
        ->check(tessera::positive_number())
        ->capture_default_str();
    app.add_flag("--oversubscribe", a.oversubscribe, "Allow more ranks than cores (unbound; with a warning)");
    app.add_option("--metrics-dir", a.metrics_dir, "Keep each run's metrics lines there, as run-NN.jsonl");
    app.add_option("--format", a.format, "Output format: table, json or html (a page with plots)")
        ->check(CLI::IsMember({"table", "json", "html"}))
        ->capture_default_str();
    app.add_option("-o,--output", a.out_path, "Write to this file (atomically) instead of standard output");
}

}  // namespace

int main(int argc, char **argv) {
    CLI::App app{"tessera-bench: predicted training steps against device count and model size, for every strategy, "
                 "and measured beside the prediction"};
    app.footer(tessera::models_help() + kFooter);
    BenchArgs a;
    CLI::App *scaling = app.add_subcommand("scaling", "One model over device counts");
    CLI::App *models = app.add_subcommand("models", "A model family over its sizes at one machine");
    CLI::App *budgets = app.add_subcommand("budgets", "One model on one device against its memory budget");
    CLI::App *measure = app.add_subcommand("measure", "Real runs of tessera-train on this machine beside the prediction");
    add_flags(*scaling, a);
    add_flags(*models, a);
    add_memory_flags(*scaling, a);
    add_memory_flags(*models, a);
    add_flags(*budgets, a);
    add_budget_flags(*budgets, a);
    add_measure_flags(*measure, a);
    app.require_subcommand(1);
    const std::string mode = argc > 1 ? argv[1] : "";
    if (argc > 1 && argv[1][0] != '-' && mode != "scaling" && mode != "models" && mode != "budgets" &&
        mode != "measure") {
        std::cerr << "tessera-bench: unknown mode '" << argv[1]
                  << "'; give scaling, models, budgets or measure\nRun with --help for more information.\n";
        return 2;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        return app.exit(e) == 0 ? 0 : 2;  // --help is success; any usage error exits 2
    }
    return tessera::exit_code_of("tessera-bench", [&] {
        // Opened before any work: an unwritable -o fails at once, not after
        // every measurement has run.
        std::optional<tessera::AtomicFile> out;
        if (!a.out_path.empty()) out.emplace(a.out_path, "");
        const std::string text = scaling->parsed()  ? run_scaling(a)
                                 : models->parsed() ? run_models(a)
                                 : measure->parsed() ? run_measure(a)
                                                     : run_budgets(a);
        if (!out) return tessera::write_output("", text);
        out->write(text);
        out->commit();
    });
}
