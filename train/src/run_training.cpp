#include "tessera/train/run_training.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "tessera/atomic_file.h"
#include "tessera/checkpoint/checkpoint.h"
#include "tessera/checkpoint/tensor_store.h"
#include "tessera/comm/communicator.h"
#include "tessera/error.h"
#include "tessera/exec/cuda_device.h"
#include "tessera/exec/cuda_uuid.h"
#include "tessera/exec/device_budget.h"
#include "tessera/exec/device_choice.h"
#include "tessera/exec/executor.h"
#include "tessera/exec/profile.h"
#include "tessera/partition/partition.h"
#include "tessera/partition/render.h"
#include "tessera/pipeline/plan_file.h"
#include "tessera/pipeline/profile_stage.h"
#include "tessera/pipeline/run_plan.h"
#include "tessera/predict/partition_choice.h"
#include "tessera/progress.h"
#include "tessera/size.h"
#include "tessera/swap/swap_plan.h"
#include "tessera/text.h"
#include "tessera/train/gpu_sharing.h"
#include "tessera/train/job_machine.h"
#include "tessera/train/op_profile.h"
#include "tessera/train/rank_agreement.h"
#include "tessera/train/trainer.h"

namespace tessera {

namespace {

// --metrics may not be the checkpoint file, nor one of its temporaries
// (a run removes stale ones): its lines would be lost at the first checkpoint.
void check_metrics_path(const TrainOptions &o) {
    if (o.metrics_path.empty() || o.checkpoint_dir.empty()) return;
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path metrics = fs::weakly_canonical(o.metrics_path, ec);
    const fs::path checkpoint = fs::weakly_canonical(checkpoint_path(o.checkpoint_dir), ec);
    const bool clash = metrics == checkpoint || (metrics.parent_path() == checkpoint.parent_path() &&
                                                 metrics.filename().string().rfind(
                                                     atomic_temp_prefix(checkpoint.string()), 0) == 0);
    TESSERA_CHECK(!clash, "--metrics ", o.metrics_path, " is where --checkpoint ", o.checkpoint_dir,
                  " keeps its checkpoint; give another file, e.g. ",
                  (fs::path(o.checkpoint_dir) / "metrics.jsonl").string());
}

void check_options(const TrainOptions &o) {
    TESSERA_CHECK(o.batch >= 1, "--batch must be at least 1, got ", o.batch);
    const bool scaled = loss_scaled(o.precision);
    TESSERA_CHECK(scaled || (!o.loss_scale && !o.loss_scale_growth_interval), "--loss-scale and "
                  "--loss-scale-growth-interval apply to --precision fp16; ", precision_name(o.precision),
                  " scales no loss");
    check_loss_scaler_config(loss_scaler_config(o));
    // 2^30 samples of even one value each is 4 GiB; the bound keeps the sizes' products far from overflow.
    constexpr int64_t kMaxSynthetic = int64_t{1} << 30;
    TESSERA_CHECK(o.synthetic_size >= 1 && o.synthetic_size <= kMaxSynthetic, "--synthetic-size must be in [1, ",
                  kMaxSynthetic, "], got ", o.synthetic_size);
    TESSERA_CHECK(!(o.epochs && o.steps), "give --epochs or --steps, not both");
    TESSERA_CHECK(!o.steps || (*o.steps >= 1 && *o.steps <= kMaxSteps), "--steps must be in [1, ", kMaxSteps,
                  "], got ", *o.steps);
    TESSERA_CHECK(!o.epochs || *o.epochs >= 1, "--epochs must be at least 1, got ", *o.epochs);
    TESSERA_CHECK(!o.resume || !o.checkpoint_dir.empty(), "--resume needs --checkpoint DIR");
    TESSERA_CHECK(o.checkpoint_every >= 0, "--checkpoint-every must be non-negative");
    check_metrics_path(o);
    TESSERA_CHECK(o.partition != "auto" || o.plan_path.empty(), "--partition auto chooses a strategy, and --plan ",
                  o.plan_path, " gives one; use either");
    TESSERA_CHECK(o.partition != "auto" || o.partition_flags.weights.empty(), "--partition auto chooses each "
                  "weight's layout, and --weights ", o.partition_flags.weights, " fixes them; use either");
    TESSERA_CHECK(o.partition_search_s >= 0, "--partition-search-time must be non-negative, got ",
                  o.partition_search_s);
}

// The swap planner's progress, once a second (and at the last generation).
std::function<void(const SwapProgress &)> swap_progress(bool tty) {
    auto out = std::make_shared<ProgressLine>(tty, 1.0, std::cout);
    return [out](const SwapProgress &p) {
        const bool last = p.last;
        if (p.elapsed_s < 1 && !last) return;
        out->show(fmt::format("swap planner: generation {}/{}, {} schedules, best {}/step, {:.1f} s", p.generation,
                              p.generations, p.candidates, format_duration(p.best_time_s), p.elapsed_s),
                  last);
        if (last) out->finish();
    };
}

// The device budget in bytes: the derived one (derived_budget), else a
// --device-mem SIZE; none when the memory plan decides.
std::optional<int64_t> budget_bytes(const TrainOptions &o, const std::optional<DeviceBudget> &derived) {
    if (derived) return derived->bytes;
    if (!o.device_mem.empty() && o.device_mem != "auto") return parse_size(o.device_mem, "--device-mem");
    return std::nullopt;
}

// The partition to train with: --partition (and --weights) as given, or
// with auto rank 0's choice (partition_choice.h), which every rank takes. One
// device has nothing to choose.
struct PartitionPick {
    std::string strategy;
    WeightLayouts weights;  // fixed by auto's per-weight search; empty otherwise
};

// Rank 0's text to every rank: its length, then its bytes.
std::string broadcast_text(Communicator &comm, std::string text) {
    int64_t size = static_cast<int64_t>(text.size());
    comm.broadcast(&size, sizeof size, 0, comm.world_group());
    text.resize(static_cast<size_t>(size));
    comm.broadcast(text.data(), text.size(), 0, comm.world_group());
    return text;
}

PartitionPick resolve_partition(const TrainOptions &o, const Job &job, const Machine &machine,
                                const std::optional<DeviceBudget> &derived, bool cuda) {
    if (o.partition != "auto") return {o.partition, {}};
    if (machine.devices() == 1) return {partition_strategy_names()[0], {}};
    std::string picked;  // "STRATEGY WEIGHTS"
    if (job.root()) {
        PartitionQuestion q;
        q.model = o.model;
        q.batch = o.batch;
        q.optimizer = o.optimizer;
        q.machine = machine;
        q.budget = budget_bytes(o, derived).value_or(0);
        q.device = roofline_device(cuda ? "h100" : "cpu");
        q.search_s = std::min(2.0, o.swap_search.time_limit_s);
        q.weights_s = o.partition_search_s;
        PartitionOptions flags;
        o.partition_flags.apply(flags);
        q.bucket_bytes = flags.bucket_bytes;
        q.progress = [](const std::string &line) { std::cout << line << "\n" << std::flush; };
        const PartitionChoice choice = choose_partition(q);
        std::cout << partition_choice_line(choice) << "\n" << std::flush;
        picked = choice.strategy + " " + format_weights(choice.weights);
    }
    picked = broadcast_text(*job.comm, picked);
    const size_t space = picked.find(' ');
    const std::string weights = picked.substr(space + 1);
    return {picked.substr(0, space), weights.empty() ? WeightLayouts{} : parse_weights(weights)};
}

// What this rank plans: the model on the job's machine (job_machine.h).
RunSpec run_spec(const TrainOptions &o, const PartitionPick &pick, const Machine &machine, int rank, bool root,
                 const std::optional<DeviceBudget> &derived) {
    RunSpec spec;
    spec.model = o.model;
    spec.batch = o.batch;
    spec.optimizer = o.optimizer;
    spec.precision = o.precision;
    spec.grad_reduce = o.grad_reduce;
    spec.machine = machine;
    spec.rank = rank;
    spec.log_stages = root;
    spec.partition.strategy = partition_strategy_from_name(pick.strategy);
    TESSERA_CHECK(machine.devices() == 1 || spec.partition.strategy != PartitionStrategy::Brute,
                  "--partition brute is a planning baseline for small graphs; train with tofu, data, owt or equalchop");
    o.partition_flags.apply(spec.partition);
    if (!pick.weights.empty()) spec.partition.weights = pick.weights;
    spec.budget = budget_bytes(o, derived);
    spec.budget_is_limit = derived && derived->limit;
    spec.swap.when = o.swap_when;
    spec.swap.search = o.swap_search;
    spec.swap.search.seed = o.seed;
    spec.swap.search.host_updates = o.host_updates;
    spec.swap.search.recompute = o.recompute;
    if (root) spec.swap.search.progress = swap_progress(stderr_is_terminal());
    if (!o.plan_path.empty()) use_plan_file(read_plan_file(o.plan_path), spec);
    return spec;
}

// The budget when --device-mem is not simply the arena's bytes
// (device_budget.h): auto; on a CUDA device no --device-mem at all; and on a
// CUDA device a SIZE, which counts the workspaces. None on the CPU by default
// (the arena is what the memory plan needs) and with a --plan and no SIZE,
// whose file states the budget it was made for.
std::optional<DeviceBudget> derived_budget(const TrainOptions &o, const DeviceChoice &choice, int local_ranks,
                                           const GpuSharing &gpus) {
    const bool automatic = o.device_mem == "auto", sized = !o.device_mem.empty() && !automatic;
    if (sized) return choice.cuda ? std::optional(cuda_explicit_budget(parse_size(o.device_mem, "--device-mem")))
                                  : std::nullopt;
    if (!automatic && !choice.cuda) return std::nullopt;
    if (!o.plan_path.empty()) {
        TESSERA_CHECK(!automatic, "--device-mem auto: --plan ", o.plan_path,
                      " states the budget it was made for; give that --device-mem instead of auto");
        return std::nullopt;
    }
    if (!choice.cuda) return host_auto_budget(local_ranks);
    return cuda_default_budget(choice.index, gpus.ranks_on_my_gpu);
}

// The run's device, made when first needed: by the profile stage when the
// run swaps (its arena is the budget), otherwise once the memory plan has
// said how large the arena must be.
class DeviceSlot {
public:
    explicit DeviceSlot(const DeviceChoice &choice) : choice_(choice) {}
    Device &get(int64_t arena) {
        if (!device_) device_ = make_device(choice_, arena);
        return *device_;
    }
    // The profile stage's device (pipeline/profile_stage.h).
    DeviceSource source() {
        return [this](int64_t arena) -> Device & { return get(arena); };
    }

private:
    DeviceChoice choice_;
    std::unique_ptr<Device> device_;
};

std::string swap_summary(const TrainOptions &o, const RunPlan &run) {
    const SwapPlan &t = run.swaps->train;
    const OpTimes &times = run.swaps->times;
    const std::string how =
        times.node_time_s.empty()
            ? fmt::format("from --plan {}", o.plan_path)
            : fmt::format("profiled in {:.1f} s (host copies {:.1f} GB/s in, {:.1f} GB/s out), planned in {:.1f} s{}",
                          run.swaps->times_s, times.h2d_bytes_per_s / 1e9, times.d2h_bytes_per_s / 1e9,
                          t.search_s + run.swaps->forward.search_s,
                          t.stopped_by.empty() ? std::string()
                                               : fmt::format(" ({} generations, stopped by {})", t.generations,
                                                             t.stopped_by));
    int on_host = 0, recomputed = 0;
    for (const SwapStep &s : t.steps) {
        on_host += s.kind == SwapStep::Kind::HostUpdate;
        recomputed += s.kind == SwapStep::Kind::Recompute;
    }
    const std::string bound =
        run.swaps->bound ? " | " + describe_swap_bound(*run.swaps->bound, t.ideal_time_s) : std::string();
    return fmt::format("swap {}: {} | per step {} out, {} in | predicted {:.1f} ms/step, {:.0f}% of ideal {:.1f} ms{} | "
                       "{} pinned, {} pools | {} on the host | {}",
                       swap_policy_name(t.policy), how, format_bytes(t.swap_out_bytes), format_bytes(t.swap_in_bytes),
                       t.time_s * 1e3, t.time_s > 0 ? 100 * t.ideal_time_s / t.time_s : 100.0, t.ideal_time_s * 1e3,
                       bound, format_bytes(t.pinned_bytes), t.pools.size(), count_of(on_host, "optimizer update"),
                       count_of(recomputed, "recomputation"));
}

std::string partition_banner(const JobMachine &machine, const RunPlan &run, const DeviceChoice &choice, bool nccl) {
    std::string s = machine.description + "\n";
    const int collectives = run.lowered->comm_nodes;
    const int64_t bucket = run.partition->bucket_bytes;
    s += fmt::format("partition {} over {} ranks (cuts {}) | {} collective{} per step ({}) | rank 0 sends {} per "
                     "step, all ranks {}\n",
                     run.partition->strategy, run.partition->devices, cuts_str(*run.partition), collectives,
                     collectives == 1 ? "" : "s",
                     bucket > 0 ? "all-reduces fused in buckets of " + format_bytes(bucket) : "one per tensor",
                     format_bytes(run.lowered->comm_bytes), format_bytes(run.partition->lowered_comm_bytes()));
    if (choice.cuda)
        s += nccl ? "collectives: on the GPU through NCCL\n" : "collectives: staged through pinned host memory over MPI\n";
    return s;
}

// What the run will do, printed by rank 0 before the first step.
void print_banner(const TrainOptions &o, const RunPlan &run, const JobMachine &machine, const DataSplit &data,
                  const DeviceChoice &choice, bool nccl) {
    if (run.swaps)
        std::cout << fmt::format("arena {} (the run needs {}: {:.1f}x) | {}\n", format_bytes(run.arena),
                                 format_bytes(run.footprint),
                                 static_cast<double>(run.footprint) / static_cast<double>(run.arena),
                                 run.model.description)
                  << swap_summary(o, run) << "\n";
    else
        std::cout << fmt::format("arena {} (plan {}, lower bound {}) | {}\n", format_bytes(run.arena),
                                 format_bytes(run.memory.arena_bytes), format_bytes(run.memory.lower_bound),
                                 run.model.description);
    if (run.sharded()) std::cout << partition_banner(machine, run, choice, nccl);
    const int64_t per_epoch = data.train.size / o.batch;
    std::cout << fmt::format("data {} ({} train, {} test) | batch {} | {} steps ({} per epoch) | {} lr {} ({})\n",
                             data.train.name, data.train.size, data.test.size, o.batch, total_steps(o, per_epoch),
                             per_epoch, optimizer_name(o.optimizer.kind), o.optimizer.lr,
                             lr_schedule_name(o.lr_schedule))
              << std::flush;
}

// --profile-ops: the operator times the swap planner profiled, or a profiling
// pass now (before any executor uses the device). A path that cannot be
// written fails before the profiling.
void write_op_profile(const std::string &path, const RunPlan &run, Device &device) {
    AtomicFile file(path, "--profile-ops");
    std::vector<double> times;
    if (run.swaps && !run.swaps->times.node_time_s.empty()) times = run.swaps->times.node_time_s;
    else times = profile_nodes(run.graph(), run.order, device);
    // A reshape that the memory plan made a view runs nothing in a step.
    for (NodeId n : run.order) {
        const Node &node = run.graph().node(n);
        if (node.outputs.size() == 1 && run.memory.is_view(node.outputs[0])) times[n] = 0;
    }
    file.write(op_profile_report(run.graph(), run.order, times, device.name()));
    file.commit();
    std::cout << fmt::format("tessera-train: operator profile in {}\n", path) << std::flush;
}

}  // namespace

// What the chosen device runs: bf16 on the CPU only; tf32 rounds a GPU's
// matrix operands, and on the CPU it is fp32, which it says.
void check_precision_on(const TrainOptions &o, const DeviceChoice &choice, bool root) {
    const Precision p = o.precision;
    TESSERA_CHECK(!choice.cuda || p == Precision::FP32, "--precision ", precision_name(p), " on a GPU is not run yet: the "
                  "GPU kernels read and write f32 only; train with --precision fp32 there, or with --device cpu "
                  "(docs/limitations.md, Mixed precision)");
    if (p == Precision::TF32 && root)
        std::cout << "tessera-train: --precision tf32 means fp32 on the CPU: its matrix products have no tf32 path\n";
    if (storage_dtype(p) == DType::F32 && o.grad_reduce != GradReduce::F32 && root)
        std::cout << "tessera-train: --grad-reduce-dtype " << grad_reduce_name(o.grad_reduce)
                  << " does nothing with --precision " << precision_name(p) << ": its gradients are f32\n";
}

// The stages of a run, one a line: the device, the plan (pipeline/), the
// executor and its communicators, the data, then the training loop (trainer.h).
TrainResult run_training(const TrainOptions &o, const Job &job) {
    check_options(o);
    const bool sharded = job.sharded(), root = job.root();
    const int ranks = job.ranks, rank = job.rank;
    const JobMachine machine = job_machine(job_shape(gather_placements(job.comm), o.nodes), o.machine_path);
    const DeviceChoice choice = choose_device(o.device, job.local_rank);
    check_precision_on(o, choice, root);
    if (root) {
        std::cout << fmt::format("tessera-train: device {} ({}){}\n", device_description(choice), choice.why,
                                 sharded ? fmt::format(", rank 0 of {}", ranks) : "")
                  << (o.threads.empty() ? "" : "tessera-train: " + o.threads + "\n");
        flush_stdout();  // an output that cannot be written fails the run here, not after training
    }
    // Every rank takes part in the gather, on a GPU or not.
    const GpuSharing gpus =
        gpu_sharing(gather_gpu_uuids(job.comm, choice.cuda ? cuda_device_uuid(choice.index) : GpuUuid{}), rank);
    const std::optional<DeviceBudget> budget = derived_budget(o, choice, job.local_ranks, gpus);
    if (root && budget)
        std::cout << fmt::format("tessera-train: budget {} ({})\n", format_bytes(budget->bytes), budget->why)
                  << std::flush;
    const bool shared_gpu_mode = nccl_shared_gpu_mode();
    const bool use_nccl = choose_nccl(o.comm_backend, sharded, nccl_available(), gpus, shared_gpu_mode);
    DeviceSlot slot(choice);
    const PartitionPick pick = resolve_partition(o, job, machine.machine, budget, choice.cuda);
    const RunPlan run = plan_run(run_spec(o, pick, machine.machine, rank, root, budget),
                                 device_profiler(slot.source(), root && stderr_is_terminal()));
    if (sharded)
        agree_across_ranks(*job.comm, "partition plans", plan_identity(*run.partition),
                           "the ranks' machine files (--machine) or builds differ");
    Device &device = slot.get(run.arena);
    if (root && !o.profile_ops_path.empty()) write_op_profile(o.profile_ops_path, run, device);
    Executor ex(run.graph(), device, run.memory);  // fails here, before any data is read, if the arena is too small
    // In-step operator times, for re-simulating the plan. On a device where host
    // work on a stream stalls it (CUDA), timing every operator would slow the
    // very steps it measures, so there it is off and the metric is absent.
    // Plans from --plan carry no profiled times to fill in what a step did not time.
    TESSERA_CHECK(!o.simulate_steps || device.cheap_stream_host_work(), "--simulate-steps times operators on their "
                  "streams, which only the cpu device does cheaply; this run is on ", device.name());
    const bool timed =
        (run.swaps && !run.swaps->times.node_time_s.empty() && device.cheap_stream_host_work()) || o.simulate_steps;
    ex.set_node_timing(timed);
    const bool rank_per_host = shared_gpu_mode && !gpus.shared.empty();
    std::unique_ptr<Communicator> nccl =
        use_nccl ? make_nccl_communicator(*job.comm, choice.index, rank_per_host) : nullptr;
    if (root && nccl && rank_per_host)
        std::cout << "tessera-train: TESSERA_NCCL_SHARED_GPU=1: " << gpus.shared
                  << "; NCCL carries them as one host per rank, over loopback sockets (a testing mode: slow)\n";
    if (nccl) ex.set_device_communicator(nccl.get());
    if (sharded) ex.set_communicator(job.comm);
    std::unique_ptr<TensorStore> store;
    if (sharded) store = std::make_unique<ShardedStore>(run.model.graph, *run.lowered, ex, *job.comm);
    else store = std::make_unique<DirectStore>(ex);
    const DataSplit data = load_data(o, run.model);
    if (root) print_banner(o, run, machine, data, choice, use_nccl);
    std::unique_ptr<StepPredictor> predictor;
    if (o.simulate_steps) predictor = std::make_unique<StepPredictor>(run, sharded ? job.comm : nullptr, rank);
    return train(TrainSession{o, run, ex, *store, data, job, timed, predictor.get()});
}

}  // namespace tessera
