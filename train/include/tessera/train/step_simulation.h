// The whole-step simulator (sim/step_sim.h) beside the real step: with
// --simulate-steps, every rank times its operators inside each step, the
// ranks share those times, and each step's metrics line carries the
// simulator's prediction of that very step ("simulated_step_time_s"), so its
// error is the model's alone, not the profiler's.
#pragma once

#include <memory>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/exec/executor.h"
#include "tessera/pipeline/run_plan.h"
#include "tessera/sim/step_sim.h"

namespace tessera {

// One step, predicted and measured.
struct StepComparison {
    StepPrediction predicted;
    // The slowest rank's measured step (Executor::run's step time): the step
    // of the job, which the prediction's slowest rank is compared with. A
    // faster rank's own step leaves out its wait for the slower ones, which
    // falls between its steps.
    double job_step_s = 0;
};

class StepPredictor {
public:
    // Gathers every rank's program once (its lowered graph each rank makes
    // itself from the shared partition plan). Every rank must construct it;
    // `comm` is null for a single process.
    StepPredictor(const RunPlan &run, Communicator *comm, int rank);

    // The prediction of one step from what this rank's executor timed in it
    // (its last run() with node timing on: operator times, event hand-offs,
    // transfers, and the gaps between instructions on each stream, which
    // stand for the executor's cost per instruction), and the step every rank
    // measured. A collective call:
    // every rank calls it each step.
    StepComparison predict(const Executor &executor, double my_step_s);

    // What every prediction runs with.
    const StepSimOptions &options() const { return options_; }

private:
    std::vector<std::vector<double>> gather_times(const std::vector<double> &mine);

    const RunPlan &run_;
    Communicator *comm_;
    int rank_;
    std::vector<std::unique_ptr<Graph>> graphs_;  // other ranks' lowered graphs; null for this rank's
    std::vector<Program> programs_;
    std::vector<size_t> node_counts_;
    StepSimOptions options_;
};

}  // namespace tessera
