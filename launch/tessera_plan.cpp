// tessera-plan: shows plans without running them.
//
//   --ops                   the operator table, with every operator's partition
//                           strategies as derived by lang/'s analysis;
//   --model SPEC --devices N | --machine FILE
//                           the partition plan of the model's training graph, as a
//                           table, JSON, Graphviz DOT or one HTML page;
//   --compare tofu,data,... several strategies side by side.
//
// Exit codes: 0 success, 1 a user error (unknown model or strategy, a bad value,
// an unreadable machine file, an unwritable output), 2 a usage error (unknown
// flag, flags that do not go together), 3 an internal error (a bug: please
// report it).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tessera/error.h"
#include "tessera/graph/optimizer.h"
#include "tessera/lang/strategy.h"
#include "tessera/models/zoo.h"
#include "tessera/partition/machine.h"
#include "tessera/partition/partition.h"
#include "tessera/partition/render.h"

namespace {

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

// TESSERA_LOG=partition (or all) also prints the plan table to stderr.
bool log_enabled(const char *stage) {
    const char *v = std::getenv("TESSERA_LOG");
    if (!v) return false;
    std::string s = std::string(",") + v + ",";
    return s.find(",all,") != std::string::npos || s.find(std::string(",") + stage + ",") != std::string::npos;
}

std::vector<std::string> split_list(const std::string &text) {
    std::vector<std::string> out;
    size_t start = 0;
    while (true) {
        size_t comma = text.find(',', start);
        std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
        out.push_back(b == std::string::npos ? "" : item.substr(b, e - b + 1));
        if (comma == std::string::npos) return out;
        start = comma + 1;
    }
}

// Write then rename, so that a failure never leaves a half-written file where
// the output should be.
void write_atomically(const std::string &path, const std::string &text) {
    std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary);
        if (!f) tessera::fail("cannot write '", path, "': cannot create '", tmp, "' (does the directory exist?)");
        f << text;
        f.close();
        if (!f) {
            std::remove(tmp.c_str());
            tessera::fail("cannot write '", path, "' (disk full?)");
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        tessera::fail("cannot write '", path, "': cannot rename '", tmp, "' to it");
    }
}

struct PlanRequest {
    std::string model;
    tessera::Machine machine;
    int64_t batch = 32;
    std::string optimizer = "sgd";
    bool coarsen = true, replicate_weights = true, executable = false;
};

// The pipeline, one stage per line: model, training graph, machine, plans.
std::vector<tessera::Plan> make_plans(const PlanRequest &r, const std::vector<tessera::PartitionStrategy> &strategies) {
    using namespace tessera;
    TESSERA_CHECK(r.batch >= 1, "--batch must be at least 1, got ", r.batch);
    const std::string spec = model_spec_str(parse_model_spec(r.model));
    OptimizerConfig opt;
    opt.kind = optimizer_from_name(r.optimizer);
    Model m = build_model(spec, r.batch);
    make_training_graph(m.graph, m.loss, opt);

    std::vector<Plan> plans;
    for (PartitionStrategy s : strategies) {
        if (isatty(STDERR_FILENO))
            std::cerr << "planning " << spec << " for " << r.machine.devices()
                      << (r.machine.devices() == 1 ? " device (" : " devices (") << partition_strategy_name(s) << ")..."
                      << std::endl;
        PartitionOptions o;
        o.strategy = s;
        o.model = spec;
        o.coarsen = r.coarsen;
        o.replicate_weights = r.replicate_weights;
        o.executable = r.executable;
        plans.push_back(partition(m.graph, r.machine, o));
        if (log_enabled("partition")) std::cerr << "---- partition ----\n" << plan_table(plans.back());
    }
    return plans;
}

}  // namespace

int main(int argc, char **argv) {
    CLI::App app{"tessera-plan: inspect partition plans without running them"};
    app.footer(tessera::models_help() +
               "\nExamples:\n"
               "  tessera-plan --model mlp --devices 4\n"
               "  tessera-plan --model wresnet:depth=50 --machine cluster.json --format html -o plan.html\n"
               "  tessera-plan --model mlp --devices 8 --compare tofu,data,owt\n"
               "\nA machine file lists its levels of links, outermost (slowest) first:\n"
               "  {\"name\": \"cluster\", \"levels\": [\n"
               "    {\"name\": \"node\", \"count\": 2, \"bandwidth_gbps\": 12.5, \"latency_us\": 10},\n"
               "    {\"name\": \"gpu\", \"count\": 8, \"bandwidth_gbps\": 300, \"latency_us\": 2}]}\n"
               "\nSet TESSERA_LOG=partition (or all) to print each plan's table to stderr too.");
    bool ops = false, all_variants = false;
    std::string format = "table", out_path, strategy = "tofu", compare, machine_path;
    std::optional<int> devices;
    PlanRequest req;
    bool no_coarsen = false, no_replicate_weights = false, executable = false;
    app.add_flag("--ops", ops, "List the operators and the partition strategies of each");
    app.add_flag("--all-variants", all_variants, "With --ops: every analysed variant (ranks, axes, transposes)");
    app.add_option("--model", req.model, "Model spec to plan, e.g. mlp or wresnet:depth=50,width=2");
    auto *devices_opt = app.add_option("--devices", devices, "Number of devices (a flat machine of N devices)");
    auto *machine_opt =
        app.add_option("--machine", machine_path, "Machine description (JSON: levels of links, outermost first)");
    app.add_option("--batch", req.batch, "Global batch size")->capture_default_str();
    app.add_option("--optimizer", req.optimizer, "sgd or adam: the optimizer whose state the plan holds")
        ->capture_default_str();
    auto *strategy_opt = app.add_option("--strategy", strategy,
                                        "tofu (the search), data, owt (one weird trick), equalchop, or brute")
                             ->capture_default_str();
    app.add_option("--compare", compare, "Plan with each of these strategies (comma separated) and compare them")
        ->excludes(strategy_opt);
    app.add_option("--format", format, "Output format: table, json, dot or html")
        ->check(CLI::IsMember({"table", "json", "dot", "html"}))
        ->capture_default_str();
    app.add_option("-o,--output", out_path, "Write to this file instead of standard output");
    app.add_flag("--executable", executable,
                 "Only strategies tessera-train can run (no halos, no reductions inside an operator), and "
                 "each rank's exact bytes once lowered: the plan mpirun ... tessera-train --partition runs");
    app.add_flag("--no-coarsen", no_coarsen, "Search every tensor and operator on its own (slower)");
    app.add_flag("--no-replicate-weights", no_replicate_weights,
                 "Do not let the search replicate weights (excludes data parallelism from Tofu's space)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        return app.exit(e) == 0 ? 0 : 2;  // --help is success; any usage error exits 2
    }

    // Combinations CLI11 cannot express: usage errors.
    auto usage = [](const std::string &msg) {
        std::cerr << "tessera-plan: " << msg << "\nRun with --help for more information.\n";
        return 2;
    };
    bool planning = !req.model.empty();
    if (ops && planning) return usage("--ops and --model show different things; give one of them");
    if (!ops && !planning)
        return usage("nothing to show; use --ops, or --model SPEC with --devices N or --machine FILE");
    if (ops && (format == "dot" || format == "html"))
        return usage("--format " + format + " applies to model plans; --ops prints table or json");
    if (planning && devices_opt->count() == 0 && machine_opt->count() == 0)
        return usage("--model needs --devices N or --machine FILE");
    if (!compare.empty() && (format == "dot" || format == "html"))
        return usage("--compare prints a table or json, not --format " + format);

    try {
        std::string text;
        if (ops) {
            text = ops_text(all_variants, format);
        } else {
            if (devices) TESSERA_CHECK(*devices >= 1, "--devices must be at least 1, got ", *devices);
            req.machine = machine_path.empty() ? tessera::flat_machine(*devices) : tessera::load_machine(machine_path);
            if (devices && req.machine.devices() != *devices)
                return usage(fmt::format("--devices {} disagrees with --machine {}, which has {} devices; "
                                         "omit --devices or make them agree",
                                         *devices, machine_path, req.machine.devices()));
            req.coarsen = !no_coarsen;
            req.replicate_weights = !no_replicate_weights;
            req.executable = executable;
            std::vector<tessera::PartitionStrategy> strategies;
            for (const std::string &name : compare.empty() ? std::vector<std::string>{strategy} : split_list(compare)) {
                try {
                    strategies.push_back(tessera::partition_strategy_from_name(name));
                } catch (const tessera::Error &e) {
                    tessera::fail(compare.empty() ? "--strategy: " : "--compare: ", e.what());
                }
            }
            std::vector<tessera::Plan> plans = make_plans(req, strategies);
            if (!compare.empty())
                text = format == "json" ? tessera::compare_json(plans) + "\n" : tessera::compare_table(plans);
            else if (format == "json")
                text = tessera::plan_to_json(plans[0]) + "\n";
            else if (format == "dot")
                text = tessera::plan_dot(plans[0]);
            else if (format == "html")
                text = tessera::plan_html(plans[0]);
            else
                text = tessera::plan_table(plans[0]);
        }
        if (out_path.empty())
            std::cout << text << std::flush;
        else
            write_atomically(out_path, text);
        return 0;
    } catch (const tessera::Error &e) {
        std::cerr << "tessera-plan: error: " << e.what() << "\n";
        return 1;
    } catch (const tessera::InternalError &e) {
        std::cerr << "tessera-plan: internal error: " << e.what() << "\n";
        return 3;
    } catch (const std::bad_alloc &) {
        std::cerr << "tessera-plan: out of host memory\n";
        return 1;
    } catch (const std::exception &e) {
        std::cerr << "tessera-plan: internal error: " << e.what() << "\n";
        return 3;
    }
}
