// tessera-bench's predictions: one training step of a model on N devices with
// one partition strategy, predicted from what every rank would run.
//
// For N > 1 the model's training graph is partitioned (executable, so that it
// lowers; weights may be replicated, so that `data` is data parallelism as
// PyTorch DDP runs it), every rank's graph is lowered, ordered (default_order)
// and built into a program (build_program: collectives on the comm stream,
// overlapping the compute that does not need them), its operators timed by
// the roofline model, and its memory planned (plan_memory). simulate_step
// (sim/) then runs all ranks' programs together over the machine's link
// levels; the slowest rank sets the step. N = 1 is the training graph itself
// on one device, with no partition: the reference for speed-ups.
//
// Everything here is a prediction from a roofline and an alpha-beta model, not
// a measurement. Without BenchContext::device_mem, no swapping: each rank's
// memory is what its program needs; with it, a rank that needs more swaps
// (and recomputes, and updates on the host) to fit.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/graph/graph.h"
#include "tessera/partition/machine.h"
#include "tessera/partition/partition.h"
#include "tessera/predict/roofline.h"
#include "tessera/swap/swap_plan.h"

namespace tessera {

// One predicted configuration: a model, N devices and a strategy.
struct BenchRow {
    std::string model;      // canonical spec
    int devices = 1;
    std::string strategy;   // tofu, data, owt, equalchop; "single" for one device
    double step_s = 0;      // the slowest rank's step
    double throughput = 0;  // samples per second
    double speedup = 1;     // against the same model on one device
    double efficiency = 1;  // speedup / devices
    int64_t comm_bytes = 0;    // per step, summed over the ranks (what lowering counts)
    int64_t memory_bytes = 0;  // the largest rank's arena (plan_memory, default order)
    int slowest_rank = 0;
    double compute_s = 0, exposed_comm_s = 0, exposed_swap_s = 0, idle_s = 0;  // of the slowest rank
    // Why there is no prediction ("cannot work: ..."); empty when there is one.
    std::string note;
    bool operator==(const BenchRow &) const = default;
};

// What every prediction of one run shares.
struct BenchContext {
    RooflineDevice device;    // operator times and the host link
    int64_t batch = 128;      // the global batch: each step of the job trains on this many samples
    // Called with a line saying what is being done ("tofu on 8 devices: lowering
    // rank 3 of 8"); may be empty.
    std::function<void(const std::string &)> progress;
    // Per-device memory (bytes; 0: unlimited). A rank whose program needs more
    // runs the swap planner's plan instead (advisor with recomputation and
    // host updates, searching `search_s` seconds), and the row's memory is the
    // budget: the memory-aware comparison of strategies.
    int64_t device_mem = 0;
    double search_s = 2;
    // Plans fuse all-reduces into buckets of this many bytes (0: none),
    // within device_mem (bucket_bytes_within).
    int64_t bucket_bytes = PartitionOptions::kDefaultBucketBytes;
};

// One device, no partition.
BenchRow predict_single(const std::string &model, const Graph &training, const BenchContext &ctx);

// N = machine.devices() devices with `strategy`. With one device this is
// predict_single under the strategy's name. speedup and efficiency are left
// for the caller (fill_speedups).
BenchRow predict_partitioned(const std::string &model, const Graph &training, const Machine &machine,
                             PartitionStrategy strategy, const BenchContext &ctx);

// The partition options every prediction plans with: executable (so that it
// lowers), and weights replicable (so that `data` keeps whole weights and
// all-reduces their gradients, and Tofu may choose to), with the context's
// buckets.
PartitionOptions bench_partition_options(const std::string &model, PartitionStrategy strategy,
                                         const BenchContext &ctx);

// N = machine.devices() > 1 devices running `plan` (made by partition() for
// `training` on `machine`, executable), named `name` in the row.
BenchRow predict_plan(const std::string &model, const Graph &training, const Machine &machine, const Plan &plan,
                      const std::string &name, const BenchContext &ctx);

// One device under a memory budget of `budget` bytes, swapping by `policy`:
// the pipeline's rank stages (pipeline/rank_stages.h: roofline operator times,
// the roofline's host link each way; the genetic search of `advisor` capped
// at `search_s` seconds), its program through simulate_step. memory_bytes is
// the budget and comm_bytes the bytes swapped per step, in and out together.
// A budget that cannot work gives a row with no times and the planner's
// error as its note (it names the operator, or the smallest budget that can).
BenchRow predict_swapped(const std::string &model, const Graph &training, int64_t budget, SwapPolicy policy,
                         double search_s, const BenchContext &ctx);

// Sets every row's speedup (single.step_s / step_s) and efficiency (speedup / devices).
void fill_speedups(std::vector<BenchRow> &rows, const BenchRow &single);

// The machine of N devices in the manner of `like`: the inner levels keep
// their speeds and are filled up to their counts in `like` (each count the
// largest divisor of what is left that does not exceed it), and the outermost
// level takes the rest, at its speed. Levels left with one part are dropped.
// So 2x8-nvlink at 4 devices is one node of 4 GPUs on NVLink, at 64 it is 8
// nodes of 8. A `like` of exactly N devices is returned as it is.
Machine machine_scaled_to(const Machine &like, int devices);

}  // namespace tessera
