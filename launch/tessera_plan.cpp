// tessera-plan: shows plans without running them. For now: the operator table
// (--ops), with every operator's partition strategies as derived by the analysis.
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tessera/error.h"
#include "tessera/lang/strategy.h"

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

}  // namespace

int main(int argc, char **argv) {
    CLI::App app{"tessera-plan: inspect partition and swap plans without running them"};
    bool ops = false, all_variants = false;
    std::string format = "table", out_path;
    app.add_flag("--ops", ops, "List the operators and the partition strategies of each");
    app.add_flag("--all-variants", all_variants, "With --ops: every analysed variant (ranks, axes, transposes)");
    app.add_option("--format", format, "Output format: table or json")->check(CLI::IsMember({"table", "json"}));
    app.add_option("-o,--output", out_path, "Write to this file instead of standard output");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        return app.exit(e) == 0 ? 0 : 2;  // --help is success; any usage error exits 2
    }
    try {
        if (!ops) {
            std::cerr << "tessera-plan: nothing to show; use --ops (model plans arrive with the partitioner)\n";
            return 2;
        }
        std::string text;
        if (format == "json") {
            std::vector<const tessera::OpStrategies *> entries;
            if (all_variants)
                for (const auto &e : tessera::all_strategies()) entries.push_back(&e);
            else
                entries = canonical_entries();
            // The documented shape: a list of {"name", "strategies": [...]}.
            nlohmann::json j = nlohmann::json::parse(tessera::strategies_json(entries, -1));
            for (auto &e : j) e["name"] = e["variant"].get<std::string>().substr(0, e["variant"].get<std::string>().find('['));
            text = j.dump(2) + "\n";
        } else {
            text = ops_table(all_variants);
        }
        if (out_path.empty()) {
            std::cout << text;
        } else {
            // Write then rename, so that a failure never leaves a half-written file.
            std::string tmp = out_path + ".tmp";
            {
                std::ofstream f(tmp);
                if (!(f << text)) throw tessera::Error("cannot write '" + tmp + "'");
            }
            if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
                std::remove(tmp.c_str());
                throw tessera::Error("cannot rename '" + tmp + "' to '" + out_path + "'");
            }
        }
        return 0;
    } catch (const tessera::Error &e) {
        std::cerr << "tessera-plan: error: " << e.what() << "\n";
        return 1;
    } catch (const std::exception &e) {
        std::cerr << "tessera-plan: internal error: " << e.what() << "\n";
        return 3;
    }
}
