// tessera-train: trains a model from the zoo on one CPU device, or, under
// `mpirun -np N`, partitioned over N processes (one device each).
//
// Exit codes: 0 success, 1 a user error (bad flag value, missing data, a budget
// too small, a corrupt checkpoint), 2 a usage error (unknown flag), 3 an
// internal error (a bug: please report it).
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>

#include "tessera/comm/communicator.h"
#include "tessera/error.h"
#include "tessera/models/zoo.h"
#include "partition_flags.h"
#include "train_loop.h"

namespace {

// Under mpirun one rank's failure must end the whole job: the message names
// the rank, then MPI aborts every process.
int finish(int code, int world) {
    if (world > 1) {
        if (code != 0) tessera::mpi_abort(code);
        tessera::mpi_finalize();
    }
    return code;
}

// --device-mem and the swap planner's flags.
void add_memory_flags(CLI::App &app, tessera::TrainOptions &o) {
    app.add_option("--device-mem", o.device_mem,
                   "Device arena size, e.g. 512MiB or 2GiB (default: what the memory plan needs); below that, "
                   "--swap plans what moves to host memory");
    app.add_option("--swap", o.swap,
                   "Under a --device-mem the run does not fit: advisor (plan swaps with SwapAdvisor's search), lru "
                   "or vdnn (baselines), none (fail), or auto (advisor when needed)")
        ->check(CLI::IsMember({"auto", "advisor", "lru", "vdnn", "none"}))
        ->capture_default_str();
    app.add_option("--swap-time-limit", o.swap_time_limit_s, "Seconds the swap planner may search")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    app.add_option("--swap-generations", o.swap_generations, "Generations of the swap planner's search")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    app.add_option("--swap-population", o.swap_population, "Population of the swap planner's search")
        ->check(CLI::Range(2, 100000))
        ->capture_default_str();
}

// What the run writes: metrics, checkpoints, progress.
void add_output_flags(CLI::App &app, tessera::TrainOptions &o) {
    app.add_option("--metrics", o.metrics_path, "Write JSON lines: one per step and one per evaluation");
    app.add_option("--checkpoint", o.checkpoint_dir, "Directory for checkpoints (safetensors)");
    app.add_option("--checkpoint-every", o.checkpoint_every, "Checkpoint every N steps (default: every epoch)");
    app.add_flag("--resume", o.resume, "Continue from the checkpoint in --checkpoint DIR, if there is one");
    app.add_option("--progress", o.progress, "auto (a bar on a terminal), bar, lines, or none")
        ->check(CLI::IsMember({"auto", "bar", "lines", "none"}))
        ->capture_default_str();
    app.add_option("--log-every", o.log_every, "Steps between plain progress lines (default: ten per epoch)");
}

}  // namespace

int main(int argc, char **argv) {
    tessera::TrainOptions o;
    CLI::App app{"tessera-train: train a model on one device (the CPU backend), or under mpirun -np N on N "
                 "processes with the model partitioned over them"};
    app.footer(tessera::models_help() +
               "\nSet TESSERA_LOG=model,graph,memory,swap,program (or all) to dump each pipeline stage.");
    std::string optimizer = "sgd";
    std::optional<double> lr;
    app.add_option("--model", o.model, "Model spec, e.g. mlp:layers=3,hidden=1024 or cnn")->capture_default_str();
    app.add_option("--data", o.data, "Dataset: fashion-mnist, synthetic, or auto (fashion-mnist when the model takes it)")
        ->capture_default_str();
    app.add_option("--data-dir", o.data_dir, "Fashion-MNIST directory (default /usr/share/datasets/fashion-mnist)");
    app.add_option("--synthetic-size", o.synthetic_size, "Training samples of synthetic data")->capture_default_str();
    app.add_option("--batch", o.batch, "Batch size")->capture_default_str();
    auto *epochs = app.add_option("--epochs", o.epochs, "Epochs to train (default 1)");
    app.add_option("--steps", o.steps, "Steps to train, instead of --epochs")->excludes(epochs);
    app.add_option("--optimizer", optimizer, "sgd (with momentum) or adam")->capture_default_str();
    app.add_option("--lr", lr, "Learning rate (default 0.05 for sgd, 0.001 for adam)");
    app.add_option("--lr-schedule", o.lr_schedule, "constant, or cosine decay to zero over the run")
        ->capture_default_str();
    app.add_option("--momentum", o.optimizer.momentum, "SGD momentum")->capture_default_str();
    app.add_option("--weight-decay", o.optimizer.weight_decay, "Weight decay (L2 for sgd, decoupled for adam)")
        ->capture_default_str();
    app.add_option("--seed", o.seed, "Seed of the initialisers and the data order")->capture_default_str();
    app.add_option("--device", o.device,
                   "auto (cuda when a GPU is present, cpu otherwise), cpu, cuda or cuda:N; the first line of output "
                   "says which")
        ->capture_default_str();
    add_memory_flags(app, o);
    add_output_flags(app, o);
    bool no_eval = false;
    app.add_flag("--no-eval", no_eval, "Skip the test-set evaluation");
    app.add_option("--partition", o.partition,
                   "Under mpirun: how to split the model over the ranks: tofu (the search), data, owt or equalchop")
        ->check(CLI::IsMember({"tofu", "data", "owt", "equalchop"}))
        ->capture_default_str();
    tessera::add_partition_flags(app, o.partition_flags, "Under mpirun: ");
    app.add_option("--plan", o.plan_path,
                   "Run the partition and swap plans in this file (tessera-plan ... --format json -o FILE) instead "
                   "of searching; a plan for another model, batch, optimizer, device count or budget is refused");
    app.add_option("--comm", o.comm_backend,
                   "Collectives on a CUDA device: nccl (all-reduces on the GPU), mpi (staged through host memory; "
                   "when ranks share a GPU), or auto (nccl when each rank has its own GPU)")
        ->capture_default_str();
    double comm_timeout = 60;
    app.add_option("--comm-timeout", comm_timeout,
                   "Seconds a rank waits for a peer in a collective before the job fails, naming both")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    const int world = tessera::launcher_size();
    std::string who = "tessera-train";
    std::unique_ptr<tessera::Communicator> comm;
    try {
        if (world > 1) {
            tessera::mpi_init(&argc, &argv);
            comm = tessera::make_mpi_communicator();
            comm->set_timeout(comm_timeout);
            o.comm = comm.get();
            who += ": rank " + std::to_string(comm->rank());
        }
        o.eval = !no_eval;
        o.optimizer.kind = tessera::optimizer_from_name(optimizer);
        o.optimizer.lr = lr.value_or(o.optimizer.kind == tessera::OptimizerConfig::Kind::Sgd ? 0.05 : 0.001);
        tessera::run_training(o);
        comm.reset();
        return finish(0, world);
    } catch (const tessera::Error &e) {
        std::cerr << who << ": error: " << e.what() << "\n" << std::flush;
        return finish(1, world);
    } catch (const tessera::InternalError &e) {
        std::cerr << who << ": internal error: " << e.what() << "\n" << std::flush;
        return finish(3, world);
    } catch (const std::bad_alloc &) {
        std::cerr << who << ": out of host memory\n" << std::flush;
        return finish(1, world);
    } catch (const std::exception &e) {
        std::cerr << who << ": internal error: " << e.what() << "\n" << std::flush;
        return finish(3, world);
    }
}
