// tessera-train: trains a model from the zoo on one CPU device, or, under a
// launcher (`mpirun -np N`, `srun --mpi=pmix`), partitioned over N processes
// (one device each).
//
// Exit codes: 0 success, 1 a user error (bad flag value, missing data, a budget
// too small, a corrupt checkpoint), 2 a usage error (unknown flag), 3 an
// internal error (a bug: please report it), 128 + the signal when SIGTERM or
// SIGINT stopped it at a step boundary with a checkpoint (stop_request.h).
#include <algorithm>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>

#include "tessera/atomic_file.h"
#include "tessera/comm/communicator.h"
#include "tessera/comm/launcher.h"
#include "tessera/error.h"
#include "tessera/exec/thread_budget.h"
#include "tessera/models/zoo.h"
#include "environment.h"
#include "shared_flags.h"
#include "tessera/checkpoint/state_dict.h"
#include "tessera/train/rank_agreement.h"
#include "tessera/train/run_training.h"
#include "tessera/train/stop_request.h"

namespace {

// This process's membership of a job (launcher.h): MPI started, the
// communicator it owns, how its errors name it; filled as it is learnt, so that
// an error part way still ends the process the right way (finish).
struct Membership {
    bool mpi = false;  // this process may have started MPI
    int world = 1;     // processes in its MPI_COMM_WORLD
    std::unique_ptr<tessera::Communicator> comm;
    std::string who = "tessera-train";  // how its errors name it
};

// Joins the job a launcher started, if any: starts MPI, then checks that MPI
// formed the job the launcher started.
void join(Membership &job, int *argc, char ***argv, double comm_timeout) {
    const tessera::Launch launch = tessera::detect_launch();
    job.mpi = launch.start_mpi() && tessera::mpi_available();
    job.comm = tessera::join_job(launch, argc, argv);
    if (!job.comm) return;
    job.world = job.comm->size();
    if (job.world > 1) job.who += ": rank " + std::to_string(job.comm->rank());
    tessera::check_job_formed(launch, job.world);
    job.comm->set_timeout(comm_timeout);
}

// A rank that finished waits, under the watchdog, for the others to finish
// too. Without it, a rank that hangs where the plan has no communication
// (nothing to time out on) leaves the others blocked in MPI_Finalize forever;
// with it, they fail after --comm-timeout naming the rank, and the job ends.
void leave_job(Membership &job) {
    if (job.world > 1) job.comm->barrier(job.comm->world_group());
    job.comm.reset();
}

// In a job one rank's failure must end the whole job: the message names the
// rank, then MPI aborts every process. When each process of a launch came up
// alone (a world of one), each just ends.
int finish(int code, const Membership &job) {
    if (job.mpi) {
        std::cout << std::flush;  // mpi_abort ends the process without flushing
        if (code != 0 && job.world > 1) tessera::mpi_abort(code);
        tessera::mpi_finalize();
    }
    return code;
}

// The flags whose text names a choice, read into TrainOptions' enums once
// (errors name the flag); each defaults to the name of TrainOptions' default.
struct Choices {
    explicit Choices(const tessera::TrainOptions &d)
        : optimizer(tessera::optimizer_name(d.optimizer.kind)), precision(tessera::precision_name(d.precision)),
          grad_reduce(tessera::grad_reduce_name(d.grad_reduce)), lr_schedule(tessera::lr_schedule_name(d.lr_schedule)),
          progress(tessera::progress_mode_name(d.progress)), comm(tessera::comm_choice_name(d.comm_backend)),
          host_updates(tessera::host_updates_name(d.host_updates)), recompute(d.recompute ? "auto" : "off"),
          swap(tessera::swap_choice_name(d.swap_when, d.swap_search.policy)) {}
    std::string optimizer, precision, grad_reduce, lr_schedule, progress, comm, host_updates, recompute, swap;
    std::optional<double> lr;
};

void apply_choices(const Choices &c, tessera::TrainOptions &o) {
    o.optimizer.kind = tessera::optimizer_from_name(c.optimizer);
    o.optimizer.lr = c.lr.value_or(o.optimizer.kind == tessera::OptimizerConfig::Kind::Sgd ? 0.05 : 0.001);
    o.precision = tessera::read_precision(c.precision);
    o.grad_reduce = tessera::read_grad_reduce(c.grad_reduce);
    o.lr_schedule = tessera::lr_schedule_from_name(c.lr_schedule);
    o.progress = tessera::progress_mode_from_name(c.progress);
    o.comm_backend = tessera::comm_choice_from_name(c.comm);
    o.host_updates = tessera::host_updates_from_name(c.host_updates);
    o.recompute = c.recompute == "auto";
    tessera::read_swap_choice(c.swap, o.swap_when, o.swap_search.policy);
}

// --comm-timeout, --threads, --version and --env: how this process runs in
// its job, and what it is.
void add_process_flags(CLI::App &app, double &comm_timeout, int &threads, bool &env) {
    app.add_option("--comm-timeout", comm_timeout,
                   "Seconds a rank waits for a peer in a collective before the job fails, naming both")
        ->check(tessera::positive_number())
        ->capture_default_str();
    app.add_option("--threads", threads,
                   "CPU threads per rank for OpenBLAS and Halide (default: this process's cores divided among the "
                   "ranks that share them; OPENBLAS_NUM_THREADS, HL_NUM_THREADS or OMP_NUM_THREADS also set them)")
        ->check(tessera::positive_number());
    app.set_version_flag("--version", tessera::version_line("tessera-train"));
    app.add_flag("--env", env, "Print the versions of Tessera and its libraries, the GPUs and the launcher, and exit");
}

// --device-mem and the swap planner's flags.
void add_memory_flags(CLI::App &app, tessera::TrainOptions &o, Choices &choices) {
    app.add_option("--device-mem", o.device_mem,
                   "Device arena size, e.g. 512MiB or 2GiB, or auto: the memory available less a reserve "
                   "(default: auto on a CUDA device, what the memory plan needs on the cpu); below what the run "
                   "needs, --swap plans what moves to host memory");
    app.add_option("--swap", choices.swap,
                   "Under a --device-mem the run does not fit: advisor (plan swaps with SwapAdvisor's search), lru "
                   "or vdnn (baselines), none (fail), or auto (advisor when needed)")
        ->check(CLI::IsMember({"auto", "advisor", "lru", "vdnn", "none"}))
        ->capture_default_str();
    tessera::add_swap_search_flags(app, o.swap_search.population, o.swap_search.generations,
                                   o.swap_search.patience, o.swap_search.time_limit_s);
    tessera::add_host_updates_flag(app, choices.host_updates);
    tessera::add_recompute_flag(app, choices.recompute);
}

// What the run writes: metrics, checkpoints, progress.
void add_output_flags(CLI::App &app, tessera::TrainOptions &o, Choices &choices) {
    app.add_option("--metrics", o.metrics_path, "Write JSON lines: one per step and one per evaluation");
    app.add_option("--profile-ops", o.profile_ops_path,
                   "Before training, time each operator alone on the device and write where the time goes, by "
                   "operator and for the slowest nodes, to FILE (rank 0's)");
    app.add_option("--checkpoint", o.checkpoint_dir, "Directory for checkpoints (safetensors)");
    app.add_option("--checkpoint-every", o.checkpoint_every, "Checkpoint every N steps (default: every epoch)");
    app.add_flag("--resume", o.resume, "Continue from the checkpoint in --checkpoint DIR, if there is one");
    app.add_option("--progress", choices.progress, "auto (a bar on a terminal), bar, lines, or none")
        ->check(CLI::IsMember({"auto", "bar", "lines", "none"}))
        ->capture_default_str();
    app.add_option("--log-every", o.log_every, "Steps between plain progress lines (default: ten per epoch)")
        ->check(tessera::non_negative_number());
}

// --export-state-dict FILE: writes the --checkpoint's weights as a PyTorch
// state_dict and exits without training.
int export_and_exit(const tessera::TrainOptions &o, const std::string &out, const std::string &dtype) {
    try {
        TESSERA_CHECK(dtype == "fp32" || dtype == "bf16", "--export-dtype: '", dtype, "' is not fp32 or bf16");
        tessera::export_state_dict(o.model, o.checkpoint_dir, out,
                                   dtype == "bf16" ? tessera::DType::BF16 : tessera::DType::F32);
        std::cout << "wrote " << out << " (the weights of " << o.model << " as a PyTorch state_dict, " << dtype
                  << ")\n";
        return 0;
    } catch (const tessera::Error &e) {
        std::cerr << "tessera-train: error: " << e.what() << "\n";
        return 1;
    }
}

// How the run is split over the ranks of a launch.
void add_parallel_flags(CLI::App &app, tessera::TrainOptions &o, Choices &choices) {
    app.add_option("--partition", o.partition,
                   "Under mpirun: how to split the model over the ranks: tofu (the search), data (data parallelism, "
                   "batch norm synchronised), ddp (PyTorch DDP: batch norm per device), fsdp (FSDP FULL_SHARD, "
                   "ZeRO-3: ddp with each weight, gradient and optimizer state sharded), owt, equalchop, or "
                   "auto (the one whose step tessera-bench's simulator predicts least, under --device-mem after "
                   "swapping, then each of the largest weights replicated or split where that predicts less)")
        ->check(CLI::IsMember({"tofu", "data", "ddp", "fsdp", "owt", "equalchop", "auto"}))
        ->capture_default_str();
    app.add_option("--partition-search-time", o.partition_search_s,
                   "With --partition auto: seconds the per-weight search may take after the six strategies are "
                   "predicted (0: none)")
        ->capture_default_str();
    tessera::add_partition_flags(app, o.partition_flags, "Under mpirun: ");
    app.add_option("--plan", o.plan_path,
                   "Run the partition and swap plans in this file (tessera-plan ... --format json -o FILE) instead "
                   "of searching; a plan for another model, batch, optimizer, machine or budget is refused");
    app.add_option("--nodes", o.nodes,
                   "Plan on K nodes of consecutive ranks (ranks 0..R/K-1 on node 0), whatever hosts they run on: "
                   "the two-level path on one host (default: the nodes the launch spans)")
        ->check(tessera::positive_number());
    app.add_option("--machine", o.machine_path,
                   "Link levels and speeds to plan with (a tessera-plan machine file); its devices must be the "
                   "job's ranks, its outermost level the nodes (the launch's, or --nodes K)");
    app.add_option("--comm", choices.comm,
                   "Collectives on a CUDA device: nccl (all-reduces on the GPU), mpi (staged through host memory; "
                   "when ranks share a GPU), or auto (nccl when each rank has its own GPU)")
        ->capture_default_str();
}

}  // namespace

// Joins the job, agrees with the other ranks, trains, and ends the process
// the right way for how the run ended (exit codes above).
int train_in_job(tessera::TrainOptions o, int *argc, char ***argv, const Choices &choices, double comm_timeout,
                 int threads) {
    Membership job;
    try {
        join(job, argc, argv, comm_timeout);
        apply_choices(choices, o);
        // Before any other exchange: ranks started with different arguments must not meet in a collective.
        if (job.world > 1)
            tessera::agree_across_ranks(*job.comm, "arguments", tessera::run_arguments(o),
                                        "start every rank with the same arguments");
        const tessera::ThreadBudget budget = tessera::apply_thread_budget(threads, job.comm.get());
        o.threads = budget.summary();
        o.swap_search.threads = std::clamp(budget.halide, 1, 64);
        tessera::install_stop_handlers();
        tessera::run_training(o, tessera::job_of(job.comm.get()));
        tessera::flush_stdout();
        leave_job(job);
        return finish(0, job);
    } catch (const tessera::StopRequested &stop) {
        // Every rank stopped at the same step: the job ends together, without an abort.
        std::cout << std::flush;
        if (!job.comm || job.comm->rank() == 0) std::cerr << "tessera-train: " << stop.message() << "\n" << std::flush;
        leave_job(job);
        return finish(0, job) + 128 + stop.signal;
    } catch (const tessera::Error &e) {
        std::cerr << job.who << ": error: " << e.what() << "\n" << std::flush;
        return finish(1, job);
    } catch (const tessera::InternalError &e) {
        std::cerr << job.who << ": internal error: " << e.what() << "\n" << std::flush;
        return finish(3, job);
    } catch (const std::bad_alloc &) {
        std::cerr << job.who << ": out of host memory\n" << std::flush;
        return finish(1, job);
    } catch (const std::exception &e) {
        std::cerr << job.who << ": internal error: " << e.what() << "\n" << std::flush;
        return finish(3, job);
    }
}

int main(int argc, char **argv) {
    tessera::TrainOptions o;
    CLI::App app{"tessera-train: train a model on one device (a GPU when there is one, otherwise the CPU), or under "
                 "mpirun -np N (or srun) on N processes with the model partitioned over them"};
    app.footer(tessera::models_help() +
               "\nSet TESSERA_LOG=model,graph,memory,swap,program (or all) to dump each pipeline stage.");
    Choices choices(o);
    app.add_option("--model", o.model, "Model spec, e.g. mlp:layers=3,hidden=1024 or cnn")->capture_default_str();
    app.add_option("--data", o.data,
                   "Dataset: fashion-mnist, synthetic, auto (fashion-mnist when the model takes it), or a "
                   "FILE.safetensors with tensors input and labels")
        ->capture_default_str();
    bool no_shuffle = false;
    app.add_flag("--no-shuffle", no_shuffle, "Train on the samples in dataset order rather than a seeded permutation");
    app.add_option("--data-dir", o.data_dir, "Fashion-MNIST directory (default /usr/share/datasets/fashion-mnist)");
    app.add_option("--synthetic-size", o.synthetic_size, "Training samples of synthetic data")->capture_default_str();
    app.add_option("--batch", o.batch, "Batch size")->capture_default_str();
    auto *epochs = app.add_option("--epochs", o.epochs, "Epochs to train (default 1)");
    app.add_option("--steps", o.steps, "Steps to train, instead of --epochs")->excludes(epochs);
    app.add_option("--optimizer", choices.optimizer, "sgd (with momentum) or adam")->capture_default_str();
    tessera::add_precision_flag(app, choices.precision);
    tessera::add_grad_reduce_flag(app, choices.grad_reduce);
    app.add_option("--loss-scale", o.loss_scale,
                   "With --precision fp16: the initial loss scale (default 65536); a step whose gradients overflow "
                   "is skipped and halves it, as PyTorch's GradScaler does");
    app.add_option("--loss-scale-growth-interval", o.loss_scale_growth_interval,
                   "With --precision fp16: finite steps in a row before the loss scale doubles (default 2000)");
    app.add_option("--lr", choices.lr, "Learning rate (default 0.05 for sgd, 0.001 for adam)");
    app.add_option("--lr-schedule", choices.lr_schedule, "constant, or cosine decay to zero over the run")
        ->capture_default_str();
    app.add_option("--momentum", o.optimizer.momentum, "SGD momentum")->capture_default_str();
    app.add_option("--weight-decay", o.optimizer.weight_decay, "Weight decay (L2 for sgd, decoupled for adam)")
        ->capture_default_str();
    app.add_option("--seed", o.seed, "Seed of the initialisers and the data order")
        ->check(tessera::non_negative_number())
        ->capture_default_str();
    app.add_option("--device", o.device,
                   "auto (cuda when a GPU is present, cpu otherwise), cpu, cuda or cuda:N; the first line of output "
                   "says which")
        ->capture_default_str();
    add_memory_flags(app, o, choices);
    add_output_flags(app, o, choices);
    std::string export_path, export_dtype = "fp32";
    auto *export_opt = app.add_option("--export-state-dict", export_path,
                   "Write the weights of the --checkpoint DIR as a PyTorch state_dict (safetensors) to this file and "
                   "exit; zoo names map to PyTorch's by the rules in docs/training.md");
    app.add_option("--export-dtype", export_dtype,
                   "With --export-state-dict: fp32 (the checkpoint's master weights) or bf16 (rounded to nearest "
                   "even, as module.to(torch.bfloat16) holds them)")
        ->needs(export_opt)
        ->capture_default_str();
    bool no_eval = false;
    app.add_flag("--no-eval", no_eval, "Skip the test-set evaluation");
    app.add_flag("--simulate-steps", o.simulate_steps,
                 "Time every operator inside each step (cpu) and add the whole-step simulator's prediction of that "
                 "step to its metrics line (simulated_step_time_s), beside the measured step_time_s");
    add_parallel_flags(app, o, choices);
    double comm_timeout = 60;
    int threads = 0;
    bool env = false;
    add_process_flags(app, comm_timeout, threads, env);
    try {
        app.parse(argc, argv);
        tessera::refuse_empty_values(app);
    } catch (const CLI::ParseError &e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    if (env) {
        std::cout << tessera::environment_report(threads) << std::flush;
        return 0;
    }
    o.eval = !no_eval;
    o.shuffle = !no_shuffle;
    if (!export_path.empty()) return export_and_exit(o, export_path, export_dtype);
    return train_in_job(o, &argc, &argv, choices, comm_timeout, threads);
}
