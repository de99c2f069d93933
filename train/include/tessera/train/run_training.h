// The single-process training driver behind tessera-train. The launcher parses
// flags into TrainOptions (train_options.h); run_training() builds the pipeline (model, training
// graph, memory plan, programs, device, executor), trains, evaluates, writes
// metrics and checkpoints, and prints a summary. User errors throw
// tessera::Error; only the launcher decides how the process ends.
#pragma once

#include <cstdint>

#include "tessera/train/job.h"
#include "tessera/train/train_options.h"

namespace tessera {

struct TrainResult {
    int64_t steps_run = 0;
    double final_loss = 0;
    double test_accuracy = -1;  // -1: not evaluated
};

TrainResult run_training(const TrainOptions &options, const Job &job);

}  // namespace tessera
