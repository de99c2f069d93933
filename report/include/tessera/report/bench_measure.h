// tessera-bench's measure mode: real training steps on this machine, side by
// side with the whole-step simulator's prediction of the same steps.
//
// Each configuration (a model, a strategy, N ranks, a memory budget) is one
// run of tessera-train, beside this program: alone for N = 1, under
// `mpirun -np N --bind-to core` for N > 1, one thread per rank by default,
// with --simulate-steps, on synthetic data, with Adam. With --simulate-steps
// every rank times its operators inside each step and the simulator predicts
// that very step from those times (train/step_simulation.h), so the gap
// between the two is the simulator's alone, not a profiler's or a roofline's.
// Each run writes its metrics lines to a private directory; a row holds the
// medians over the steps after the first (the first pays for warm-up).
//
// A budget is a fraction of the footprint of the run without one (rank 0's:
// only rank 0 writes metrics), so each N is measured once unconstrained
// first. A run that fails is a row carrying its error, not the end of the
// bench.
//
// What a row says splits in two. The configuration and what the plans fix
// (footprint, budget, bytes sent per step) are the same on every run of the
// same inputs. Everything timed is in `MeasuredTimes`: the measured steps, and
// the prediction too, since it is fed with measured operator times (and under
// a budget the swap plan itself depends on the profiled times).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tessera {

// A budget: none, or a fraction of the unconstrained run's footprint.
struct MeasureBudget {
    std::string label;    // "none", "1/4", "0.3"
    double fraction = 0;  // 0: no budget
    bool operator==(const MeasureBudget &) const = default;
};

// "none", "1/K" (K a positive integer) or a decimal fraction in (0, 1]. Throws
// tessera::Error naming --budgets and what is valid.
MeasureBudget parse_measure_budget(const std::string &text);

// What every run of one bench shares.
struct MeasureOptions {
    std::string train_path;      // tessera-train
    std::string mpirun_path;     // mpirun, for N > 1 ("" when no N > 1)
    int64_t batch = 128;         // global batch
    int64_t steps = 8;           // steps per run; medians over steps 2..steps
    int threads = 1;             // CPU threads per rank
    double search_s = 5;         // the swap planner's search, per run under a budget
    double timeout_s = 600;      // a run still going after this is ended and is a row with that error
    bool oversubscribe = false;  // more ranks than cores: no binding to cores
    bool as_root = false;        // pass --allow-run-as-root to mpirun
    std::string metrics_dir;     // keep each run's metrics lines there as run-NN.jsonl ("" : do not)
    // Called with one line per run when it has ended; may be empty.
    std::function<void(const std::string &)> progress;
};

// What a run's steps took: medians over the steps after the first.
struct MeasuredTimes {
    double step_s = 0;                  // measured (rank 0's step: the job's, as ranks wait on each other)
    double samples_per_s = 0;           // batch / step_s
    double predicted_step_s = 0;        // the simulator's step (its slowest rank's)
    double predicted_samples_per_s = 0;
    double error_pct = 0;               // (predicted - measured) / measured, in percent
    double predicted_compute_idle_s = 0;  // the slowest rank's step less its exposed comm and swap
    double predicted_exposed_comm_s = 0;
    double predicted_exposed_swap_s = 0;
    int64_t swap_bytes = 0;             // rank 0's per step, in and out (the plan comes from profiled times)
    bool operator==(const MeasuredTimes &) const = default;
};

// One configuration and what its run gave.
struct MeasureRow {
    std::string model;     // canonical spec
    std::string strategy;  // tofu, data, owt, equalchop; "single" for one rank
    int devices = 1;
    std::string budget;    // MeasureBudget::label
    int64_t budget_bytes = 0;     // --device-mem given to each rank; 0 for none
    int64_t footprint_bytes = 0;  // rank 0's arena without swapping
    int64_t comm_bytes = 0;       // rank 0 sends per step (what lowering counts)
    int steps = 0;                // steps the medians are over
    int run = 0;                  // the run's number, 1 up, in the order they ran (run-NN.jsonl)
    std::string error;            // why the run failed; empty when it did not
    MeasuredTimes measured;
    bool operator==(const MeasureRow &) const = default;
};

// Every row of one model: for N = 1 one "single" row per budget, then for
// each strategy and each N > 1 one row per budget, in the order given. Each N
// (and strategy) runs unconstrained first, for the footprint the budgets are
// fractions of; that run is a row only if `budgets` has "none". `runs` counts
// the runs so far (over every model), and numbers them.
std::vector<MeasureRow> measure_model(const std::string &model, const std::vector<std::string> &strategies,
                                      const std::vector<int> &devices, const std::vector<MeasureBudget> &budgets,
                                      const MeasureOptions &options, int &runs);

// The reports (bench_measure_report.cpp). The table and the page print the
// same rows; the JSON keeps the timed fields of each row under "measured", so
// that the rest can be compared between runs.
struct MeasureHeader {  // what every run shared
    std::vector<std::string> models;
    int64_t batch = 0, steps = 0;
    int threads = 1, cores = 1;
};
std::string measure_table(const MeasureHeader &h, const std::vector<MeasureRow> &rows);
std::string measure_json(const MeasureHeader &h, const std::vector<MeasureRow> &rows);
std::string measure_html(const MeasureHeader &h, const std::vector<MeasureRow> &rows);

}  // namespace tessera
