// --partition auto: the partition whose predicted step is least.
//
// First each of tofu, data, ddp, fsdp, owt and equalchop is predicted as
// tessera-bench predicts it (step_predictor.h): the roofline of the run's device ("cpu" or
// "h100"), the job's machine, and under a device budget every rank that does
// not fit running the swap planner's plan (recomputation and host updates
// included). A strategy that cannot work under the budget is skipped.
//
// Then, where the budget binds (the best strategy's ranks swap), the choice
// per weight: the best strategy's search with each of the largest weights
// fixed replicated or split (PartitionOptions::weights), starting from the
// strategy's own plan and keeping each change that lowers the predicted
// step by 0.1% (passes, largest weight first, within `weights_s`). A weight
// replicated saves the communication of its activations but costs every
// device its bytes, its gradient's and its optimizer state's, which under a
// budget are swapped; the prediction weighs the two. Where the fixes beat
// the strategy alone by 1%, the job trains with the strategy and those
// fixes. When the best strategy fits, its plan stands.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/graph/optimizer.h"
#include "tessera/partition/partition.h"
#include "tessera/predict/step_predictor.h"

namespace tessera {

// The share by which a prediction must beat another to count: a change of
// one weight's fix within the search, and the search's fixes over the best
// strategy (a plan with fixes is kept only for a real gain).
inline constexpr double kWeightStepGain = 1e-3;
inline constexpr double kPerWeightPickGain = 0.01;

// What the choice is asked.
struct PartitionQuestion {
    std::string model;
    int64_t batch = 128;  // global
    OptimizerConfig optimizer;
    Machine machine;
    int64_t budget = 0;           // per device, bytes; 0: unlimited
    RooflineDevice device = roofline_device("cpu");  // operator times and the host link
    double search_s = 2;          // the swap planner's search per rank and prediction
    double weights_s = 30;        // the per-weight search, at most (0: none)
    int max_weights = 12;         // the largest weights it chooses for
    int64_t bucket_bytes = PartitionOptions::kDefaultBucketBytes;  // fused all-reduces (0: none)
    std::function<void(const std::string &)> progress;  // one line per step of the search; may be empty
};

struct PartitionChoice {
    std::string strategy;   // the partition strategy to train with
    WeightLayouts weights;  // with it, the weights fixed (empty: none)
    std::vector<BenchRow> rows;  // every strategy's prediction, then the per-weight choice's (if made)
};

// Throws tessera::Error when no strategy can work, with each one's reason.
PartitionChoice choose_partition(const PartitionQuestion &q);

// The per-weight search alone, from `base`'s plan, whose prediction is
// `base_row`: the fixes it keeps and their prediction (strategy
// "per-weight"), never slower than `base_row`. `training` is
// build_training_graph's for the question.
std::pair<WeightLayouts, BenchRow> choose_weights(const PartitionQuestion &q, const Graph &training,
                                                  PartitionStrategy base, const BenchRow &base_row);

// One line: "partition auto: predicted step tofu 1.20 ms, data 1.50 ms, ...;
// training with owt --weights a=split".
std::string partition_choice_line(const PartitionChoice &choice);

// The weights of `training` by their bytes, largest first; ties by name.
std::vector<std::string> weights_by_size(const Graph &training);

}  // namespace tessera
