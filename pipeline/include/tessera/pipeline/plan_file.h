// Plans as files: tessera-plan writes a run's partition plan (and, under a
// budget, each rank's swap plans) as JSON; tessera-train --plan FILE runs
// exactly those plans instead of searching again.
//
//   tessera-plan --model cnn --batch 64 --devices 4 --executable --format json -o plan.json
//   mpirun -np 4 tessera-train --model cnn --batch 64 --plan plan.json
//
// The file is tessera-plan's JSON: the partition plan's fields (plan.h), plus
//   "run":        what the plans were made for (run_identity below);
//   "swap_ranks": [{"rank": R, "train": SwapPlan, "forward": SwapPlan}, ...]
//                 when planned under --device-mem (--rank all: every rank).
// A plan for another model, batch, optimizer, device count, machine shape
// (its levels' counts: 2 nodes x 2 devices is not 4 devices on one level) or
// budget is refused with an error naming the difference.
#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/pipeline/run_plan.h"

namespace tessera {

struct PlanFile {
    std::string path;
    nlohmann::json run;                // run_identity of the spec it was made for
    Plan partition;
    std::map<int, SwapPlans> swaps;    // by rank; empty when planned without a budget
};

// What a plan depends on: model (canonical spec), batch, optimizer, devices
// and budget (bytes, or null).
nlohmann::json run_identity(const RunSpec &spec);

// The "swap_ranks" entry for these ranks' plans.
nlohmann::json swap_ranks_json(const std::map<int, SwapPlans> &swaps);

// Reads and parses `path`. Throws tessera::Error naming the file and what is
// missing or malformed.
PlanFile read_plan_file(const std::string &path);

// Sets spec.given_partition and, when the file has them, spec.given_swaps for
// spec.rank, after checking that the file was made for this run (and
// spec.machine's shape). Throws
// tessera::Error naming the first difference ("--plan plan.json was made for
// batch 32; this run has batch 64").
void use_plan_file(const PlanFile &file, RunSpec &spec);

}  // namespace tessera
