#include "train_loop.h"

#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint.h"
#include "tensor_store.h"
#include "tessera/comm/communicator.h"
#include "tessera/error.h"
#include "tessera/exec/init.h"
#include "tessera/partition/lower.h"
#include "tessera/partition/partition.h"
#include "tessera/partition/render.h"
#include "tessera/exec/cuda_device.h"
#include "tessera/exec/device_choice.h"
#include "tessera/exec/executor.h"
#include "tessera/exec/memory_plan.h"
#include "tessera/exec/profile.h"
#include "tessera/exec/program.h"
#include "tessera/exec/swap_program.h"
#include "tessera/exec/size.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/data.h"
#include "tessera/models/zoo.h"
#include "tessera/swap/swap_plan.h"

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;

// TESSERA_LOG=graph,memory,program (or all) dumps what each stage produced.
bool log_enabled(const char *stage) {
    const char *v = std::getenv("TESSERA_LOG");
    if (!v) return false;
    std::string s = std::string(",") + v + ",";
    return s.find(",all,") != std::string::npos || s.find(std::string(",") + stage + ",") != std::string::npos;
}

void log_stage(const char *stage, const std::string &text) {
    if (log_enabled(stage)) std::cerr << "---- " << stage << " ----\n" << text << (text.ends_with("\n") ? "" : "\n");
}

std::string duration_str(double s) {
    if (!std::isfinite(s) || s < 0) return "?";
    auto total = static_cast<int64_t>(s + 0.5);
    if (total >= 3600) return fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60);
    return fmt::format("{}:{:02}", total / 60, total % 60);
}

// Progress on a terminal is one redrawn line on stderr; otherwise plain lines on
// stdout every `every` steps, so logs and CI output stay readable.
class Progress {
public:
    Progress(const std::string &mode, int64_t total_steps, int64_t every)
        : total_(total_steps), every_(std::max<int64_t>(1, every)) {
        bool tty = isatty(STDERR_FILENO) != 0;
        bar_ = mode == "bar" || (mode == "auto" && tty);
        quiet_ = mode == "none";
    }

    void step(int64_t step, int64_t epoch, double loss, double step_s, double elapsed_s, int64_t steps_done) {
        double avg = steps_done > 0 ? elapsed_s / steps_done : step_s;
        double eta = avg * static_cast<double>(total_ - step);
        if (quiet_) return;
        if (bar_) {
            auto now = Clock::now();
            if (step != total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
            last_draw_ = now;
            const int width = 30;
            int filled = static_cast<int>(width * step / std::max<int64_t>(1, total_));
            std::string bar(filled, '=');
            if (filled < width) bar += '>' + std::string(width - filled - 1, ' ');
            std::cerr << fmt::format("\r[{}] {}/{} epoch {} loss {:.4f} {:.1f} ms/step eta {}   ", bar, step,
                                     total_, epoch + 1, loss, avg * 1e3, duration_str(eta))
                      << std::flush;
            drawn_ = true;
        } else if (step % every_ == 0 || step == total_) {
            std::cout << fmt::format("step {}/{} epoch {} loss {:.4f} {:.1f} ms/step eta {}\n", step, total_,
                                     epoch + 1, loss, avg * 1e3, duration_str(eta))
                      << std::flush;
        }
    }

    // A full line (evaluation, checkpoint): ends any bar first.
    void line(const std::string &text) {
        if (quiet_) return;
        if (drawn_) {
            std::cerr << "\n";
            drawn_ = false;
        }
        std::cout << text << "\n" << std::flush;
    }

    void finish() {
        if (drawn_) std::cerr << "\n";
        drawn_ = false;
    }

private:
    int64_t total_, every_;
    bool bar_ = false, quiet_ = false, drawn_ = false;
    Clock::time_point last_draw_{};
};

// JSON lines: one object per step and per evaluation, flushed as written.
class MetricsWriter {
public:
    MetricsWriter(const std::string &path, bool append) {
        if (path.empty()) return;
        out_.open(path, append ? std::ios::app : std::ios::trunc);
        TESSERA_CHECK(out_.good(), "--metrics: cannot open '", path, "' for writing");
    }
    void write(const nlohmann::json &j) {
        if (!out_.is_open()) return;
        out_ << j.dump() << "\n" << std::flush;
    }

private:
    std::ofstream out_;
};

// The datasets for a model: Fashion-MNIST when asked (or, with "auto", when the
// model takes 784 values and 10 classes), otherwise learnable synthetic data
// shaped like the model's input.
struct DataSplit {
    Dataset train, test;
};

Dataset take_rows(const Dataset &all, int64_t first, int64_t count) {
    Dataset d = all;
    const int64_t se = all.sample_elements(), le = all.label_elements;
    d.size = count;
    if (all.dtype == DType::F32)
        d.x_f32.assign(all.x_f32.begin() + first * se, all.x_f32.begin() + (first + count) * se);
    else
        d.x_i32.assign(all.x_i32.begin() + first * se, all.x_i32.begin() + (first + count) * se);
    d.labels.assign(all.labels.begin() + first * le, all.labels.begin() + (first + count) * le);
    return d;
}

DataSplit load_data(const TrainOptions &o, const Model &m) {
    const TensorInfo &input = m.graph.tensor(m.input);
    Shape sample(input.type.shape.begin() + 1, input.type.shape.end());
    std::string kind = o.data;
    if (kind == "auto")
        kind = input.type.dtype == DType::F32 && num_elements(sample) == 784 && m.num_classes == 10
                   ? "fashion-mnist"
                   : "synthetic";
    DataSplit d;
    if (kind == "fashion-mnist") {
        std::string dir = o.data_dir.empty() ? kFashionMnistDefaultDir : o.data_dir;
        d.train = load_fashion_mnist(dir, true);
        d.test = load_fashion_mnist(dir, false);
    } else if (kind == "synthetic") {
        // One synthetic set, cut in two, so that the test samples follow the same
        // rule as the training samples but are not among them.
        SyntheticSpec spec;
        spec.sample_shape = sample;
        spec.dtype = input.type.dtype;
        spec.vocab = input.type.dtype == DType::I32 ? m.num_classes : 0;
        spec.num_classes = m.num_classes;
        spec.label_elements = m.label_elements;
        const int64_t n_train = o.synthetic_size, n_test = std::max<int64_t>(o.batch, o.synthetic_size / 8);
        spec.size = n_train + n_test;
        spec.seed = o.seed;
        Dataset all = make_synthetic(spec);
        d.train = take_rows(all, 0, n_train);
        d.test = take_rows(all, n_train, n_test);
    } else {
        fail("--data: unknown dataset '", o.data, "'; valid: fashion-mnist, synthetic, auto");
    }
    const TensorInfo &labels = m.graph.tensor(m.labels);
    check_fits(d.train, input.type, labels.type, o.model, m.num_classes,
               input.type.dtype == DType::I32 ? m.num_classes : 0);
    TESSERA_CHECK(d.train.size >= o.batch, "--batch ", o.batch, " is larger than the ", d.train.name,
                  " training set (", d.train.size, " samples)");
    return d;
}

// Host staging for one batch, shaped like the model's data tensors.
struct BatchBuffers {
    std::vector<float> x;
    std::vector<int32_t> xi, labels;
    BatchBuffers(const Graph &g, TensorId input, TensorId labels_t) {
        const TensorType &t = g.tensor(input).type;
        if (t.dtype == DType::F32) x.resize(t.elements());
        else xi.resize(t.elements());
        labels.resize(g.tensor(labels_t).type.elements());
    }
    void write_to(TensorStore &store, TensorId input, TensorId labels_t) {
        if (!x.empty()) store.write(input, x.data(), x.size() * sizeof(float));
        else store.write(input, xi.data(), xi.size() * sizeof(int32_t));
        store.write(labels_t, labels.data(), labels.size() * sizeof(int32_t));
    }
};

struct EvalResult {
    double accuracy = 0, loss = 0;
};

// Accuracy over the whole test set with the forward program. Batch norm uses
// the statistics of each test batch (the graph has no running averages); the
// padded rows of the last batch are left out of the count but do take part in
// that batch's statistics.
EvalResult evaluate(Executor &ex, TensorStore &store, const Program &forward, const Model &m, const Batcher &batcher,
                    BatchBuffers &buf) {
    const int64_t classes = m.num_classes, le = m.label_elements;
    std::vector<float> logits(m.graph.tensor(m.logits).type.elements());
    int64_t correct = 0, counted = 0;
    double loss_sum = 0;
    for (int64_t b = 0; b < batcher.eval_batches(); b++) {
        int64_t valid = batcher.fill_eval(b, buf.x.empty() ? nullptr : buf.x.data(),
                                          buf.xi.empty() ? nullptr : buf.xi.data(), buf.labels.data());
        buf.write_to(store, m.input, m.labels);
        ex.run(forward);
        store.read(m.logits, logits.data(), logits.size() * sizeof(float));
        float loss = 0;
        store.read(m.loss, &loss, sizeof(float));
        loss_sum += static_cast<double>(loss) * static_cast<double>(valid);
        for (int64_t r = 0; r < valid * le; r++) {
            const float *row = logits.data() + r * classes;
            int64_t best = std::max_element(row, row + classes) - row;
            correct += best == buf.labels[r];
            counted++;
        }
    }
    EvalResult e;
    e.accuracy = counted ? static_cast<double>(correct) / static_cast<double>(counted) : 0;
    e.loss = loss_sum / static_cast<double>(std::max<int64_t>(1, counted / le));
    return e;
}

// The learning rate of step `step` (0-based) of `total`: a pure function of the
// step, so a resumed run follows the same schedule.
double scheduled_lr(const TrainOptions &o, int64_t step, int64_t total) {
    if (o.lr_schedule == "constant") return o.optimizer.lr;
    const double pi = 3.14159265358979323846;
    return o.optimizer.lr * 0.5 * (1 + std::cos(pi * static_cast<double>(step) / static_cast<double>(total)));
}

// What a run under a budget it cannot fit needs: the swap plans of its two
// programs (the training step, the evaluation forward pass) and the programs
// and memory plan made from them.
struct SwapSetup {
    SwapPlan train, forward;
    SwapRun run;
    std::string summary;  // for the banner
    std::vector<double> profiled;  // per NodeId, from the profiling pass
    double h2d = 0, d2h = 0;       // measured copy bandwidth, bytes/s
};

// Profiles the operators and the host-device copies on `device`, then plans
// both programs (the forward plan keeps the training plan's homes, so both
// run against the same weights).
SwapSetup plan_device_swaps(const TrainOptions &o, const Graph &g, const std::vector<NodeId> &order,
                            const Program &forward_unswapped, Device &device, bool root) {
    SwapProblem problem;
    problem.graph = &g;
    problem.order = order;
    problem.budget = device.arena_bytes();
    problem.node_time_s.assign(static_cast<size_t>(g.num_nodes()), 0.0);
    problem.h2d_bytes_per_s = problem.d2h_bytes_per_s = 1;
    // A budget that cannot work fails now, naming the operator, before the
    // profiling pass (which needs each operator's working set in the arena).
    if (min_swap_budget(problem) > problem.budget) plan_swaps(problem);

    auto t0 = Clock::now();
    const bool tty = root && isatty(STDERR_FILENO) != 0;
    ProfileOptions po;
    if (tty)
        po.progress = [](int done, int total) {
            std::cerr << fmt::format("\rprofiling operators {}/{}   ", done, total) << (done == total ? "\n" : "")
                      << std::flush;
        };
    problem.node_time_s = profile_nodes(g, order, device, po);
    const int64_t probe = std::min<int64_t>(device.arena_bytes() / 64 * 64, int64_t{64} << 20);
    problem.h2d_bytes_per_s = measure_copy_bandwidth(device, CopyDirection::HostToDevice, probe);
    problem.d2h_bytes_per_s = measure_copy_bandwidth(device, CopyDirection::DeviceToHost, probe);
    const double profile_s = std::chrono::duration<double>(Clock::now() - t0).count();

    SwapOptions so;
    so.policy = swap_policy_from_name(o.swap == "auto" ? "advisor" : o.swap);
    so.seed = o.seed;
    so.time_limit_s = o.swap_time_limit_s;
    so.generations = o.swap_generations;
    so.population = o.swap_population;
    auto last_report = Clock::now();
    if (root)
        so.progress = [&last_report, tty](const SwapProgress &p) {
            auto now = Clock::now();
            if (now - last_report < std::chrono::seconds(1) && p.generation != p.generations) return;
            last_report = now;
            std::string text = fmt::format("swap planner: generation {}/{}, {} schedules, best {:.2f} ms/step, {:.1f} s",
                                           p.generation, p.generations, p.candidates, p.best_time_s * 1e3,
                                           p.elapsed_s);
            if (tty) std::cerr << "\r" << text << "   " << std::flush;
            else std::cout << text << "\n" << std::flush;
        };
    SwapSetup s;
    s.profiled = problem.node_time_s;
    s.h2d = problem.h2d_bytes_per_s;
    s.d2h = problem.d2h_bytes_per_s;
    s.train = plan_swaps(problem, so);
    if (tty) std::cerr << "\n";

    SwapProblem fp = problem;
    fp.order.clear();
    for (const Instruction &in : forward_unswapped.instructions)
        if (in.kind == Instruction::Kind::Compute || in.kind == Instruction::Kind::Collective) fp.order.push_back(in.node);
    fp.homes_from = &s.train;
    so.progress = nullptr;
    so.generations = std::max(1, so.generations / 4);
    s.forward = plan_swaps(fp, so);
    s.run = build_swap_run(g, s.train, &s.forward);
    if (root) log_stage("swap", swap_plan_table(g, s.train));

    const SwapPlan &t = s.train;
    s.summary = fmt::format(
        "swap {}: profiled in {:.1f} s (host copies {:.1f} GB/s in, {:.1f} GB/s out), planned in {:.1f} s | "
        "per step {} out, {} in | predicted {:.1f} ms/step, {:.0f}% of ideal {:.1f} ms | {} pinned, {} pools",
        swap_policy_name(t.policy), profile_s, problem.h2d_bytes_per_s / 1e9, problem.d2h_bytes_per_s / 1e9,
        t.search_s + s.forward.search_s, format_bytes(t.swap_out_bytes), format_bytes(t.swap_in_bytes), t.time_s * 1e3,
        t.time_s > 0 ? 100 * t.ideal_time_s / t.time_s : 100.0, t.ideal_time_s * 1e3, format_bytes(t.pinned_bytes),
        t.pools.size());
    return s;
}

// --comm: whether all-reduces on a CUDA device go through NCCL.
bool choose_nccl(const std::string &flag, const DeviceChoice &choice, bool sharded, int local_ranks) {
    TESSERA_CHECK(flag == "auto" || flag == "mpi" || flag == "nccl", "--comm: unknown communicator '", flag,
                  "'; valid: auto, mpi, nccl");
    if (flag == "mpi") return false;
    const int gpus = choice.cuda ? cuda_device_count() : 0;
    const bool shared = local_ranks > gpus;
    if (flag == "auto") return sharded && choice.cuda && nccl_available() && !shared;
    TESSERA_CHECK(choice.cuda, "--comm nccl needs a CUDA device; this run is on the cpu (use --comm mpi)");
    TESSERA_CHECK(nccl_available(), "--comm nccl: this build has no NCCL; use --comm mpi");
    TESSERA_CHECK(!shared, "--comm nccl: ", local_ranks, " ranks on this host share ", gpus, " GPU",
                  gpus == 1 ? "" : "s", ", and NCCL refuses two ranks on one GPU; use --comm mpi");
    return sharded;
}

}  // namespace

TrainResult run_training(const TrainOptions &o) {
    TESSERA_CHECK(o.batch >= 1, "--batch must be at least 1, got ", o.batch);
    TESSERA_CHECK(!(o.epochs > 0 && o.steps > 0), "give --epochs or --steps, not both");
    TESSERA_CHECK(o.epochs >= 0 && o.steps >= 0, "--epochs and --steps must be positive");
    TESSERA_CHECK(!o.resume || !o.checkpoint_dir.empty(), "--resume needs --checkpoint DIR");
    TESSERA_CHECK(o.checkpoint_every >= 0, "--checkpoint-every must be non-negative");
    TESSERA_CHECK(o.lr_schedule == "constant" || o.lr_schedule == "cosine", "--lr-schedule: unknown schedule '",
                  o.lr_schedule, "'; valid: constant, cosine");

    // The pipeline, one stage per line (TESSERA_LOG=all shows each result).
    const bool sharded = o.comm && o.comm->size() > 1;
    const bool root = !sharded || o.comm->rank() == 0;
    const DeviceChoice choice = choose_device(o.device, local_rank_from_env(sharded ? o.comm->rank() : 0));
    if (root)
        std::cout << fmt::format("tessera-train: device {} ({}){}\n", device_description(choice), choice.why,
                                 sharded ? fmt::format(", rank 0 of {}", o.comm->size()) : "")
                  << std::flush;
    const bool use_nccl = choose_nccl(o.comm_backend, choice, sharded, local_size_from_env(sharded ? o.comm->size() : 1));
    Model m = build_model(o.model, o.batch);
    if (root) log_stage("model", m.description);
    make_training_graph(m.graph, m.loss, o.optimizer);
    const Graph &g = m.graph;
    if (root) log_stage("graph", graph_summary(g));
    std::optional<Plan> partition_plan;
    std::optional<DeviceGraph> lowered;
    if (sharded) {
        PartitionOptions po;
        po.strategy = partition_strategy_from_name(o.partition);
        TESSERA_CHECK(po.strategy != PartitionStrategy::Brute, "--partition brute is a planning baseline for "
                      "small graphs; train with tofu, data, owt or equalchop");
        po.model = o.model;
        po.executable = true;
        o.partition_flags.apply(po);
        partition_plan = partition(g, flat_machine(o.comm->size()), po);
        if (root) log_stage("partition", plan_table(*partition_plan));
        lowered = lower(g, *partition_plan, o.comm->rank());
        if (root) log_stage("lowered", graph_summary(lowered->graph));
    }
    const Graph &run_graph = sharded ? lowered->graph : g;
    auto local = [&](TensorId t) { return sharded ? lowered->local[t] : t; };
    std::vector<NodeId> order = default_order(run_graph);
    MemoryPlan plan = plan_memory(run_graph, order);
    if (root) log_stage("memory", plan.summary());
    Program train_program = build_program(run_graph, order);
    Program forward_program = build_program_for(run_graph, order, {local(m.logits), local(m.loss)});
    int64_t arena = o.device_mem.empty() ? plan.arena_bytes : parse_size(o.device_mem, "--device-mem");
    TESSERA_CHECK(o.swap == "auto" || o.swap == "none" || o.swap == "advisor" || o.swap == "lru" || o.swap == "vdnn",
                  "--swap: unknown policy '", o.swap, "'; valid: advisor, lru, vdnn, none, auto");
    const int64_t footprint = plan.arena_bytes;
    std::optional<SwapSetup> swapping;
    std::unique_ptr<Device> device_ptr = make_device(choice, arena);
    Device &device = *device_ptr;
    if (o.swap != "none" && (o.swap != "auto" || arena < footprint)) {
        // Each rank plans for what still overflows after the partition.
        swapping = plan_device_swaps(o, run_graph, order, forward_program, device, root);
        train_program = swapping->run.train;
        forward_program = swapping->run.forward;
        plan = swapping->run.memory;
    } else if (arena < footprint) {
        fail("--device-mem ", o.device_mem, " is ", format_bytes(arena), " but this run needs ", footprint,
             " bytes (", format_bytes(footprint), ") without swapping; use --device-mem ",
             size_flag_at_least(footprint), " or more, or --swap advisor to train within the budget");
    }
    if (root) log_stage("program", train_program.to_string(run_graph));
    Executor ex(run_graph, device, plan);  // fails here, before any data is read, if the arena is too small
    // In-step operator times, for re-simulating the plan. On a device where host
    // work on a stream stalls it (CUDA), timing every operator would slow the
    // very steps it measures, so there it is off and the metric is absent.
    const bool timed = swapping && device.cheap_stream_host_work();
    ex.set_node_timing(timed);
    std::unique_ptr<TensorStore> store;
    std::unique_ptr<Communicator> nccl;
    if (use_nccl) {
        nccl = make_nccl_communicator(*o.comm, choice.index);
        ex.set_device_communicator(nccl.get());
    }
    if (sharded) {
        ex.set_communicator(o.comm);
        store = std::make_unique<ShardedStore>(g, *lowered, ex, *o.comm);
    } else {
        store = std::make_unique<DirectStore>(ex);
    }

    DataSplit data = load_data(o, m);
    Batcher train_batches(data.train, o.batch, o.seed, true);
    Batcher test_batches(data.test, o.batch, o.seed, false);
    const int64_t per_epoch = train_batches.batches_per_epoch();
    const int64_t total_steps = o.steps > 0 ? o.steps : per_epoch * std::max<int64_t>(1, o.epochs);

    if (root) {
        if (swapping)
            std::cout << fmt::format("arena {} (the run needs {}: {:.1f}x) | {}\n", format_bytes(arena), format_bytes(footprint),
                                     static_cast<double>(footprint) / static_cast<double>(arena), m.description)
                      << swapping->summary << "\n";
        else
            std::cout << fmt::format("arena {} (plan {}, lower bound {}) | {}\n", format_bytes(arena), format_bytes(plan.arena_bytes),
                                     format_bytes(plan.lower_bound), m.description);
        if (sharded) {
            const int64_t all = partition_plan->lowered_comm_bytes();
            std::cout << fmt::format("partition {} over {} ranks (cuts {}) | {} communication nodes | rank 0 sends {} "
                                     "per step, all ranks {}\n",
                                     o.partition, o.comm->size(), [&] {
                                         std::string c;
                                         for (int k : lowered->cuts) c += (c.empty() ? "" : "x") + std::to_string(k);
                                         return c;
                                     }(),
                                     lowered->comm_nodes, format_bytes(lowered->comm_bytes), format_bytes(all))
                      << (choice.cuda ? use_nccl ? "collectives: all-reduces on the GPU through NCCL, the rest staged "
                                                   "through pinned host memory over MPI\n"
                                                 : "collectives: staged through pinned host memory over MPI\n"
                                      : "");
        }
        std::cout << fmt::format("data {} ({} train, {} test) | batch {} | {} steps ({} per epoch) | {} lr {} ({})\n",
                                 data.train.name, data.train.size, data.test.size, o.batch, total_steps, per_epoch,
                                 optimizer_name(o.optimizer.kind), o.optimizer.lr, o.lr_schedule)
                  << std::flush;
    }

    CheckpointInfo info = checkpoint_info(o, per_epoch);
    // Constants (the loss gradient's seed) are not in checkpoints: initialise
    // everything, then overwrite what the checkpoint holds. Partitioned, each
    // whole tensor is drawn as in the single-process run and then sharded.
    ex.initialize(o.seed);
    if (sharded) {
        std::vector<float> whole;
        for (TensorId t = 0; t < g.num_tensors(); t++) {
            const TensorInfo &info_t = g.tensor(t);
            if (info_t.producer != kNoNode || !is_persistent(info_t.role) || info_t.type.dtype != DType::F32) continue;
            whole.resize(static_cast<size_t>(info_t.type.elements()));
            fill_init(info_t.init, o.seed, info_t.name, info_t.type.shape, whole.data(), info_t.type.elements());
            store->write(t, whole.data(), whole.size() * sizeof(float));
        }
    }
    int64_t start_step = 0;
    if (o.resume && checkpoint_exists(o.checkpoint_dir)) {
        start_step = load_checkpoint(o.checkpoint_dir, info, g, *store);
        if (root)
            std::cout << fmt::format("resumed from {} at step {}\n", checkpoint_path(o.checkpoint_dir), start_step);
    } else if (o.resume && root) {
        std::cout << "no checkpoint in " << o.checkpoint_dir << " yet; starting from step 0\n";
    }
    TESSERA_CHECK(start_step <= total_steps, "the checkpoint is at step ", start_step, " but this run has only ",
                  total_steps, " steps; raise --steps or --epochs to continue");
    if (!o.checkpoint_dir.empty() && root) {
        std::filesystem::create_directories(o.checkpoint_dir);
        remove_stale_checkpoint_temporaries(o.checkpoint_dir);
    }

    MetricsWriter metrics(root ? o.metrics_path : std::string(), o.resume);
    Progress progress(root ? o.progress : "none", total_steps, o.log_every > 0 ? o.log_every : std::max<int64_t>(1, per_epoch / 10));
    BatchBuffers buf(g, m.input, m.labels);
    std::optional<TensorId> step_tensor = g.find_tensor(kStepTensor);
    std::vector<NodeId> update_nodes;
    for (NodeId n = 0; n < run_graph.num_nodes(); n++)
        if (run_graph.node(n).optimizer && !run_graph.node(n).comm) update_nodes.push_back(n);
    // Test hooks for the failure paths: TESSERA_FAULT_KILL=RANK:STEP makes that
    // rank SIGKILL itself as that step starts; TESSERA_FAULT_HANG=RANK:STEP
    // makes it stop talking (sleep) instead.
    auto fault = [](const char *var) {
        std::pair<int, int64_t> at{-1, -1};
        if (const char *f = std::getenv(var))
            if (std::sscanf(f, "%d:%ld", &at.first, &at.second) != 2) at.first = -1;
        return at;
    };
    const auto kill_at = fault("TESSERA_FAULT_KILL"), hang_at = fault("TESSERA_FAULT_HANG");
    const int my_rank = sharded ? o.comm->rank() : 0;

    TrainResult result;
    EvalResult last_eval;
    bool evaluated = false;
    int64_t peak = 0;
    double train_seconds = 0;
    auto started = Clock::now();
    auto maybe_evaluate = [&](int64_t epoch) {
        if (!o.eval) return;
        last_eval = evaluate(ex, *store, forward_program, m, test_batches, buf);
        evaluated = true;
        metrics.write({{"epoch", epoch}, {"test_accuracy", last_eval.accuracy}, {"test_loss", last_eval.loss}});
        progress.line(fmt::format("epoch {}: test accuracy {:.2f}% test loss {:.4f}", epoch, last_eval.accuracy * 100,
                                  last_eval.loss));
    };
    auto save = [&](int64_t step) {
        if (o.checkpoint_dir.empty()) return;
        save_checkpoint(o.checkpoint_dir, info, g, *store, step);
    };

    for (int64_t step = start_step; step < total_steps; step++) {
        const int64_t epoch = step / per_epoch, index = step % per_epoch;
        if (my_rank == kill_at.first && step + 1 == kill_at.second) {
            std::cerr << fmt::format("TESSERA_FAULT_KILL: rank {} kills itself at {:.3f}\n", my_rank,
                                     std::chrono::duration<double>(
                                         std::chrono::system_clock::now().time_since_epoch()).count())
                      << std::flush;
            std::raise(SIGKILL);
        }
        if (my_rank == hang_at.first && step + 1 == hang_at.second)
            while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
        train_batches.fill(epoch, index, buf.x.empty() ? nullptr : buf.x.data(),
                           buf.xi.empty() ? nullptr : buf.xi.data(), buf.labels.data());
        buf.write_to(*store, m.input, m.labels);
        if (step_tensor) {
            int32_t s = static_cast<int32_t>(step + 1);
            store->write(*step_tensor, &s, sizeof(s));
        }
        if (o.lr_schedule != "constant") {
            double lr = scheduled_lr(o, step, total_steps);
            for (NodeId n : update_nodes) ex.set_attr(n, "lr", lr);
        }
        StepStats stats = ex.run(train_program);
        // Lowering counted what each rank sends; the communicator counts what
        // it did send. They must agree exactly.
        TESSERA_INTERNAL_ASSERT(!sharded || stats.comm_bytes == lowered->comm_bytes, "rank ", my_rank, " sent ",
                                stats.comm_bytes, " bytes in step ", step + 1, " but its lowered graph says ",
                                lowered->comm_bytes);
        // The swap plan predicted what moves and how much of the arena is
        // touched; the device counted both.
        if (swapping) {
            const SwapPlan &sp = swapping->train;
            TESSERA_INTERNAL_ASSERT(stats.swap_out_bytes == sp.swap_out_bytes && stats.swap_in_bytes == sp.swap_in_bytes,
                                    "rank ", my_rank, " swapped ", stats.swap_out_bytes, " bytes out and ",
                                    stats.swap_in_bytes, " in during step ", step + 1, " but its swap plan says ",
                                    sp.swap_out_bytes, " and ", sp.swap_in_bytes);
            TESSERA_INTERNAL_ASSERT(stats.arena_high_water == sp.high_water && stats.peak_live_bytes <= arena,
                                    "rank ", my_rank, " step ", step + 1, " touched ", stats.arena_high_water,
                                    " bytes of the arena with at most ", stats.peak_live_bytes,
                                    " live, but its swap plan says ", sp.high_water, " within ", arena);
        }
        float loss = 0;
        store->read(m.loss, &loss, sizeof(loss));
        TESSERA_CHECK(!root || std::isfinite(loss), "the loss is ", loss, " at step ", step + 1,
                      "; training diverged. Lower --lr (now ", o.optimizer.lr, ")");
        peak = std::max(peak, stats.peak_live_bytes);
        train_seconds += stats.step_time_s;
        result.final_loss = loss;
        nlohmann::json line{{"step", step + 1},
                            {"epoch", epoch},
                            {"loss", loss},
                            {"step_time_s", stats.step_time_s},
                            {"peak_device_bytes", stats.peak_live_bytes},
                            {"arena_high_water", stats.arena_high_water},
                            {"arena_bytes", arena},
                            {"footprint_bytes", footprint},
                            {"comm_bytes", stats.comm_bytes},
                            {"swap_out_bytes", stats.swap_out_bytes},
                            {"swap_in_bytes", stats.swap_in_bytes}};
        if (sharded) line["planned_comm_bytes"] = lowered->comm_bytes;
        if (swapping) {
            // The plan's prediction from the profiling pass, and the same plan
            // re-simulated with the times the operators took in this step: the
            // difference between the two is the profiler's, the rest the simulator's.
            line["predicted_step_time_s"] = swapping->train.time_s;
            if (timed) {
                std::vector<double> in_step = ex.node_times();
                for (size_t n = 0; n < in_step.size(); n++)
                    if (in_step[n] <= 0) in_step[n] = swapping->profiled[n];
                line["resimulated_step_time_s"] =
                    simulate_swap_plan(swapping->train, in_step, swapping->h2d, swapping->d2h);
            }
        }
        metrics.write(line);
        double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
        progress.step(step + 1, epoch, loss, stats.step_time_s, elapsed, step + 1 - start_step);
        result.steps_run++;
        bool epoch_end = (step + 1) % per_epoch == 0;
        if (epoch_end && step + 1 < total_steps) maybe_evaluate(epoch + 1);
        if ((o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0) ||
            (o.checkpoint_every == 0 && epoch_end))
            save(step + 1);
    }
    progress.finish();
    if (o.eval && total_steps > start_step) maybe_evaluate((total_steps + per_epoch - 1) / per_epoch);
    save(total_steps);
    double wall = std::chrono::duration<double>(Clock::now() - started).count();
    if (!root) return result;

    std::cout << fmt::format("\nsummary: {} steps in {} ({:.1f} ms/step compute)", result.steps_run,
                             duration_str(wall),
                             result.steps_run ? train_seconds / result.steps_run * 1e3 : 0.0);
    std::cout << fmt::format(" | final loss {:.4f}", result.final_loss);
    if (evaluated) {
        result.test_accuracy = last_eval.accuracy;
        std::cout << fmt::format(" | test accuracy {:.2f}%", last_eval.accuracy * 100);
    }
    std::cout << fmt::format(" | peak device bytes {} of arena {}", format_bytes(peak), format_bytes(arena));
    if (!o.checkpoint_dir.empty()) std::cout << " | checkpoint " << checkpoint_path(o.checkpoint_dir);
    std::cout << "\n" << std::flush;
    return result;
}

}  // namespace tessera
