// The partition flags both programs take (--force, --no-staged-reductions,
// --no-replicate-weights), registered in one place so that their names and
// meanings cannot drift apart between tessera-plan and tessera-train.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "tessera/partition/partition.h"

namespace tessera {

struct PartitionFlags {
    std::string force;               // PartitionOptions::force, as parse_force() reads it
    bool no_staged_reductions = false;  // !PartitionOptions::staged_reductions
    bool no_replicate_weights = false;
    // Sets force (parsed: throws tessera::Error naming a malformed entry),
    // staged_reductions and replicate_weights.
    void apply(PartitionOptions &o) const;
};

// `when` starts each help text: "Under mpirun: " for tessera-train, "" for tessera-plan.
void add_partition_flags(CLI::App &app, PartitionFlags &flags, const std::string &when);

}  // namespace tessera
