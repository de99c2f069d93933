// What a training run's checkpoint must match to be resumed: the model (and,
// for an ONNX model, its file's contents), batch, optimizer and its
// hyperparameters, seed, data and schedule (checkpoint/checkpoint.h compares
// them when it loads).
#pragma once

#include <cstdint>

#include "tessera/checkpoint/checkpoint.h"
#include "tessera/train/train_options.h"

namespace tessera {

CheckpointInfo checkpoint_info(const TrainOptions &o, int64_t steps_per_epoch);

}  // namespace tessera
