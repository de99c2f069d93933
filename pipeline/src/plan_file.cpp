#include "tessera/pipeline/plan_file.h"

#include <fstream>
#include <sstream>

#include "tessera/error.h"
#include "tessera/input_file.h"
#include "tessera/json_input.h"
#include "tessera/size.h"

namespace tessera {

namespace {

std::string budget_text(const nlohmann::json &budget) {
    if (budget.is_null()) return "no --device-mem";
    return "--device-mem " + (budget.is_number_integer() ? format_bytes(budget.get<int64_t>()) : json_preview(budget));
}

// "batch 32", "model mlp:hidden=64", ...: one field of an identity, as the error says it.
std::string field_text(const std::string &key, const nlohmann::json &v) {
    if (key == "budget") return budget_text(v);
    return key + " " + (v.is_string() ? v.get<std::string>() : json_preview(v));
}

// The machine's shape: its levels' counts, outermost first. The plan's cuts
// follow it; link speeds only price them.
std::vector<int> level_counts(const Machine &m) {
    std::vector<int> counts;
    for (const LinkLevel &l : m.levels) counts.push_back(l.count);
    return counts;
}

SwapPlans swap_plans_from_json(const nlohmann::json &e, const std::string &source) {
    SwapPlans s;
    TESSERA_CHECK(e.contains("train") && e.contains("forward"), source, ": a \"swap_ranks\" entry needs "
                  "\"train\" and \"forward\"");
    s.train = swap_plan_from_json(e.at("train"), source + " (swap_ranks, train)");
    s.forward = swap_plan_from_json(e.at("forward"), source + " (swap_ranks, forward)");
    return s;
}

}  // namespace

nlohmann::json run_identity(const RunSpec &spec) {
    return {{"model", model_spec_str(parse_model_spec(spec.model))},
            {"batch", spec.batch},
            {"optimizer", optimizer_name(spec.optimizer.kind)},
            {"precision", precision_name(spec.precision)},
            {"grad_reduce_dtype", grad_reduce_name(spec.grad_reduce)},
            {"devices", spec.machine.devices()},
            {"budget", spec.budget ? nlohmann::json(*spec.budget) : nlohmann::json(nullptr)}};
}

nlohmann::json swap_ranks_json(const std::map<int, SwapPlans> &swaps) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto &[rank, s] : swaps)
        a.push_back({{"rank", rank}, {"train", swap_plan_to_json(s.train)}, {"forward", swap_plan_to_json(s.forward)}});
    return a;
}

PlanFile read_plan_file(const std::string &path) {
    const std::string text = read_input_file(path, "the --plan file", kMaxJsonFileBytes);
    PlanFile f;
    f.path = path;
    const nlohmann::json j = parse_json_input(text, "--plan " + path);
    TESSERA_CHECK(j.is_object() && j.contains("run"), "--plan: '", path, "' has no \"run\" object; write the plan "
                  "with tessera-plan ... --format json -o FILE");
    f.run = j.at("run");
    f.partition = plan_from_json(text, path);
    if (j.contains("swap_ranks")) {
        const nlohmann::json &ranks = j.at("swap_ranks");
        TESSERA_CHECK(ranks.is_array() && !ranks.empty(), "--plan: '", path, "': \"swap_ranks\" must be a non-empty "
                      "list of each rank's swap plans (leave it out for a plan without a budget), got ",
                      json_preview(ranks));
        const int64_t devices = f.partition.devices;
        for (const auto &e : ranks) {
            TESSERA_CHECK(e.is_object() && e.contains("rank") && e.at("rank").is_number_integer(), "--plan: '",
                          path, "': a \"swap_ranks\" entry has no integer \"rank\"");
            const nlohmann::json &rank = e.at("rank");
            const bool in_range = rank.is_number_unsigned() ? rank.get<uint64_t>() < static_cast<uint64_t>(devices)
                                                             : rank.get<int64_t>() >= 0 && rank.get<int64_t>() < devices;
            TESSERA_CHECK(in_range, "--plan: '", path, "': a \"swap_ranks\" entry is for rank ", json_preview(rank),
                          "; the plan has ranks 0 to ", devices - 1);
            TESSERA_CHECK(f.swaps.emplace(rank.get<int>(), swap_plans_from_json(e, path)).second, "--plan: '", path,
                          "': \"swap_ranks\" has two entries for rank ", json_preview(rank));
        }
    }
    return f;
}

void use_plan_file(const PlanFile &file, RunSpec &spec) {
    const nlohmann::json want = run_identity(spec);
    for (const char *key : {"model", "batch", "optimizer", "precision", "grad_reduce_dtype", "devices", "budget"}) {
        // Plans written before precisions existed are fp32 ones, with f32 gradients.
        const bool older = (std::string(key) == "precision" || std::string(key) == "grad_reduce_dtype") &&
                           !file.run.contains(key);
        TESSERA_CHECK(older || file.run.contains(key), "--plan: '", file.path, "' does not say its ", key);
        const nlohmann::json made = older ? nlohmann::json("fp32") : file.run.at(key), &here = want.at(key);
        TESSERA_CHECK(made == here, "--plan ", file.path, " was made for ", field_text(key, made), "; this run has ",
                      field_text(key, here));
    }
    const Machine &made = file.partition.machine;
    TESSERA_CHECK(level_counts(made) == level_counts(spec.machine), "--plan ", file.path, " was made for machine ",
                  machine_str(made), "; this run's machine is ", machine_str(spec.machine),
                  " (tessera-train plans on the launch's nodes, --nodes K or --machine FILE)");
    TESSERA_CHECK(spec.machine.devices() == 1 || file.partition.executable, "--plan: '", file.path,
                  "' is not a plan tessera-train can run; make it with tessera-plan --executable");
    spec.given_partition = file.partition;
    if (file.swaps.empty()) return;
    auto it = file.swaps.find(spec.rank);
    TESSERA_CHECK(it != file.swaps.end(), "--plan: '", file.path, "' has no swap plan for rank ", spec.rank,
                  "; make it with tessera-plan ... --device-mem ", format_bytes(*spec.budget), " --rank all");
    spec.given_swaps = it->second;
}

}  // namespace tessera
