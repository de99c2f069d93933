// --partition auto (issue 19): the strategy whose predicted step is least.
//
// Each of tofu, data, owt and equalchop is predicted as tessera-bench predicts
// it (bench_predict.h): the roofline of the run's device ("cpu" or "h100"),
// the job's machine, and under a device budget every rank that does not fit
// running the swap planner's plan (recomputation and host updates included).
// The least predicted step wins; a strategy that cannot work under the budget
// is skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_predict.h"

namespace tessera {

struct PartitionChoice {
    std::string strategy;        // the least predicted step
    std::vector<BenchRow> rows;  // every strategy's prediction, in the order tried
};

// Predicts every strategy for `model` at the global `batch` on `machine`
// (budget 0: unlimited) and picks. Throws tessera::Error when none can work,
// with each one's reason.
PartitionChoice choose_partition(const std::string &model, int64_t batch, const OptimizerConfig &optimizer,
                                 const Machine &machine, int64_t budget, const std::string &roofline,
                                 double search_s);

// One line: "partition auto: tofu 1.20 ms, data 1.50 ms, ... -> tofu".
std::string partition_choice_line(const PartitionChoice &choice);

}  // namespace tessera
