// The whole-step simulator (sim/step_sim.h) beside the real step: with
// --simulate-steps, every rank times its operators inside each step, the
// ranks share those times, and each step's metrics line carries the
// simulator's prediction of that very step ("simulated_step_time_s"), so its
// error is the model's alone, not the profiler's.
#pragma once

#include <memory>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/pipeline/run_plan.h"
#include "tessera/sim/step_sim.h"

namespace tessera {

class StepPredictor {
public:
    // Gathers every rank's program once (its lowered graph each rank makes
    // itself from the shared partition plan), and how many cores each rank's
    // stream threads share (StepSimOptions::cores_per_rank: its CPUs over the
    // ranks on its host bound alike). Every rank must construct it; `comm` is
    // null for a single process.
    StepPredictor(const RunPlan &run, Communicator *comm, int rank);

    // The prediction of one step from this rank's operator times and event
    // hand-offs in it (Executor::node_times, handoff_times); a collective
    // call: every rank calls it each step.
    StepPrediction predict(const std::vector<double> &my_node_times, const std::vector<double> &my_handoff_times);

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
