// The flags both programs take, and the check they share (no empty values): the
// partition flags (pipeline/partition_flags.h) and the swap search's,
// registered in one place so that their names and meanings cannot drift apart
// between tessera-plan and tessera-train.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tessera/graph/precision.h"
#include "tessera/pipeline/partition_flags.h"

namespace tessera {

// `when` starts each help text: "Under mpirun: " for tessera-train, "" for tessera-plan.
// Number checks whose errors give the bounds people type ("--threads: must
// be above 0, got 0"), where CLI11's own print 300-digit limits; NaN and
// infinities are refused by both.
CLI::Validator positive_number();
CLI::Validator non_negative_number();

void add_partition_flags(CLI::App &app, PartitionFlags &flags, const std::string &when);

// The swap search's flags, the same in both programs: --swap-population,
// --swap-generations, --swap-patience, --swap-time-limit (each defaulting to
// SwapOptions'). A value out of range is a usage error naming the flag.
// Returns the four options.
std::vector<CLI::Option *> add_swap_search_flags(CLI::App &app, int &population, int &generations, int &patience,
                                                 double &time_limit_s);

// --host-updates off|auto|all (SwapOptions::host_updates by name) into `value`.
CLI::Option *add_host_updates_flag(CLI::App &app, std::string &value);
// --recompute off|auto (SwapOptions::recompute) into `value`.
CLI::Option *add_recompute_flag(CLI::App &app, std::string &value);
// --precision fp32|tf32|bf16|fp16 into `value` (read with read_precision).
CLI::Option *add_precision_flag(CLI::App &app, std::string &value);
// The Precision `value` names; tessera::Error starting "--precision: " and
// naming the choices otherwise.
Precision read_precision(const std::string &value);
// --grad-reduce-dtype fp32|bf16 into `value`; read_grad_reduce gives the
// GradReduce it names, or tessera::Error starting "--grad-reduce-dtype: ".
CLI::Option *add_grad_reduce_flag(CLI::App &app, std::string &value);
GradReduce read_grad_reduce(const std::string &value);

// Throws CLI::ValidationError (a usage error) naming the first option given
// an empty value (--device-mem "", --compare ""): every option's empty value
// would otherwise mean "not given" and be silently ignored. Call after parse.
void refuse_empty_values(const CLI::App &app);

}  // namespace tessera
