// The training loop behind tessera-train, once the pipeline has planned the run
// and the executor holds its device: initial weights (or a checkpoint), then
// per step a batch in, the training program, the step's checks against the
// plans, a metrics line and progress; evaluation and checkpoints at epoch ends;
// a summary at the end. Every rank runs it; rank 0 reports and writes files.
#pragma once

#include <cstdint>

#include "tessera/checkpoint/tensor_store.h"
#include "tessera/exec/executor.h"
#include "tessera/models/data.h"
#include "tessera/pipeline/run_plan.h"
#include "tessera/train/loss_scaler.h"
#include "tessera/train/run_training.h"
#include "tessera/train/step_simulation.h"

namespace tessera {

// The datasets of a run: Fashion-MNIST when asked (or, with --data auto, when
// the model takes 784 values and 10 classes), otherwise learnable synthetic
// data shaped like the model's input.
struct DataSplit {
    Dataset train, test;
};
DataSplit load_data(const TrainOptions &o, const Model &m);

// What the loop runs against.
struct TrainSession {
    const TrainOptions &options;
    const RunPlan &run;
    Executor &executor;
    TensorStore &store;
    const DataSplit &data;
    const Job &job;
    bool timed = false;   // the executor times each operator (for re-simulating the swap plan)
    StepPredictor *predictor = nullptr;  // --simulate-steps: the whole-step simulator, on every rank
};

// --loss-scale and --loss-scale-growth-interval, or their defaults.
LossScalerConfig loss_scaler_config(const TrainOptions &o);

// The step count of the whole run: --steps, or --epochs (default 1) of batches.
int64_t total_steps(const TrainOptions &o, int64_t steps_per_epoch);

TrainResult train(const TrainSession &session);

}  // namespace tessera
