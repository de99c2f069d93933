// What tessera-train was asked to run: its options, as the launcher parses
// them from the command line (train/run_training.h runs them).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "tessera/graph/optimizer.h"
#include "tessera/graph/precision.h"
#include "tessera/pipeline/partition_flags.h"
#include "tessera/pipeline/run_plan.h"

namespace tessera {

class Communicator;

// The choices a flag names, read once from its text (the *_from_name
// functions throw tessera::Error naming the flag and the valid names).
enum class LrSchedule { Constant, Cosine };  // --lr-schedule: cosine decays to zero at the last step
enum class ProgressMode { Auto, Bar, Lines, None };  // --progress: auto is a bar on a terminal, lines otherwise
// --comm: how collectives run on a CUDA device (gpu_sharing.h's choose_nccl).
enum class CommChoice { Auto, Mpi, Nccl };
const char *lr_schedule_name(LrSchedule s);
LrSchedule lr_schedule_from_name(const std::string &name);
const char *progress_mode_name(ProgressMode m);
ProgressMode progress_mode_from_name(const std::string &name);
const char *comm_choice_name(CommChoice c);
CommChoice comm_choice_from_name(const std::string &name);

// The most steps a run may take: the step counter the graph sees (Adam's
// bias correction) is 32-bit.
inline constexpr int64_t kMaxSteps = std::numeric_limits<int32_t>::max();

struct TrainOptions {
    std::string model = "mlp";
    std::string data = "auto";  // fashion-mnist | synthetic | auto (fashion-mnist when the model takes it) | FILE.safetensors
    bool shuffle = true;        // false: training batches in dataset order (--no-shuffle)
    std::string data_dir;       // empty: the Debian package's directory
    int64_t synthetic_size = 8192;
    int64_t batch = 128;
    // At most one of the two; neither: 1 epoch. Each must be at least 1, and
    // the run at most kMaxSteps steps.
    std::optional<int64_t> epochs, steps;
    OptimizerConfig optimizer;
    // The CPU runs fp32, tf32 (as fp32), bf16 and fp16 (with dynamic loss
    // scaling); a GPU fp32 alone.
    Precision precision = Precision::FP32;
    GradReduce grad_reduce = GradReduce::F32;  // --grad-reduce-dtype
    // --loss-scale and --loss-scale-growth-interval (fp16 only; loss_scaler.h's defaults when absent).
    std::optional<double> loss_scale;
    std::optional<int64_t> loss_scale_growth_interval;
    LrSchedule lr_schedule = LrSchedule::Cosine;
    uint64_t seed = 1;
    // auto (cuda when a GPU is present, cpu otherwise), cpu, cuda or cuda:N;
    // the first line of output says which (device_choice.h).
    std::string device = "auto";
    // Bytes; auto: a limit from the memory available (exec/device_budget.h);
    // empty: auto on a CUDA device, exactly what the memory plan needs on the cpu.
    std::string device_mem;
    // --swap: under a --device-mem below what the run needs, swap_search.policy
    // always (advisor, the SwapAdvisor planner; lru or vdnn, the baselines),
    // never (none: fail instead), or auto (advisor when the budget is too
    // small, nothing otherwise).
    SwapWhen swap_when = SwapWhen::Auto;
    HostUpdates host_updates = HostUpdates::Off;  // optimizer updates the advisor may run on the host
    bool recompute = true;                        // whether the advisor may recompute activations
    // --swap-population, --swap-generations, --swap-patience, --swap-time-limit, and the
    // threads the search may use (the rank's share of the cores, as its CPU
    // kernels get); its other fields are set from the options above.
    SwapOptions swap_search;
    std::string metrics_path;
    // Each operator timed alone on the run's device, before training, and a
    // report of where the time goes written here (op_profile.h; rank 0's).
    std::string profile_ops_path;
    std::string checkpoint_dir;
    int64_t checkpoint_every = 0;  // steps; 0: at the end of every epoch and at the end
    bool resume = false;
    ProgressMode progress = ProgressMode::Auto;
    int64_t log_every = 0;          // plain-line interval in steps; 0: ten per epoch
    bool eval = true;
    // Time every operator inside each step and put the whole-step simulator's
    // prediction of that step in its metrics line (step_simulation.h).
    bool simulate_steps = false;
    // Partitioned training: with a communicator of more than one rank (mpirun),
    // every rank plans the same partition (tofu, data, owt or equalchop) and
    // runs its lowered graph. Rank 0 reports and writes files.
    std::string partition = "tofu";
    // With --partition auto: seconds its per-weight search may take (0: only
    // the four strategies are compared).
    double partition_search_s = 30;
    PartitionFlags partition_flags;  // --force, --no-staged-reductions, --no-replicate-weights
    std::string plan_path;           // --plan: plans made by tessera-plan, run instead of searching
    // The machine planned on (job_machine.h): the launch's nodes x ranks per
    // node, or --nodes K pretend nodes of consecutive ranks (0: the launch's);
    // link speeds from --machine FILE (empty: the defaults).
    int nodes = 0;
    std::string machine_path;
    std::string threads;             // the thread budget chosen at start-up, for the banner (exec/thread_budget.h)
    // How collectives run on a CUDA device: nccl (all-reduces on device memory
    // through NCCL, the rest staged through host memory over MPI), mpi (all
    // staged over MPI: the way when ranks share a GPU), or auto (nccl when every
    // rank of a host has a GPU of its own and NCCL is built, mpi otherwise).
    CommChoice comm_backend = CommChoice::Auto;  // --comm
};

}  // namespace tessera
