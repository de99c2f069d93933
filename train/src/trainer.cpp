#include "tessera/train/trainer.h"

#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tessera/checkpoint/checkpoint.h"
#include "tessera/checkpoint/data_file.h"
#include "tessera/error.h"
#include "tessera/exec/init.h"
#include "tessera/models/zoo.h"
#include "tessera/progress.h"
#include "tessera/size.h"
#include "tessera/text.h"
#include "tessera/train/checkpoint_identity.h"
#include "tessera/train/stop_request.h"
#include "tessera/tunables.h"

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;

// The steps' progress: on a terminal (or with --progress bar) one redrawn line
// on stderr with a bar; otherwise a plain line on stdout every `every` steps,
// so logs and CI output stay readable.
class Progress {
public:
    Progress(ProgressMode mode, int64_t total_steps, int64_t every)
        : total_(total_steps),
          every_(std::max<int64_t>(1, every)),
          bar_(mode == ProgressMode::Bar || (mode == ProgressMode::Auto && stderr_is_terminal())),
          quiet_(mode == ProgressMode::None),
          out_(bar_, bar_ ? 0.1 : 0.0, std::cout) {}

    void step(int64_t step, int64_t epoch, double loss, double step_s, double elapsed_s, int64_t steps_done) {
        if (quiet_) return;
        double avg = steps_done > 0 ? elapsed_s / steps_done : step_s;
        double eta = avg * static_cast<double>(total_ - step);
        if (!bar_ && step % every_ != 0 && step != total_) return;
        std::string text = fmt::format("{}/{} epoch {} loss {:.4f} {:.1f} ms/step eta {}", step, total_, epoch + 1,
                                       loss, avg * 1e3, format_duration(eta));
        if (bar_) out_.show(progress_bar(step, total_) + " " + text, step == total_);
        else out_.show("step " + text, true);
    }

    // A full line (evaluation, checkpoint): ends any bar first.
    void line(const std::string &text) {
        if (quiet_) return;
        finish();
        std::cout << text << "\n" << std::flush;
    }

    void finish() { out_.finish(); }

private:
    int64_t total_, every_;
    bool bar_, quiet_;
    ProgressLine out_;
};

// JSON lines: one object per step and per evaluation, flushed as written,
// every write checked (a full disk ends the run naming the file).
class MetricsWriter {
public:
    MetricsWriter(const std::string &path, bool append) : path_(path) {
        if (path.empty()) return;
        // Its directory is made as --checkpoint's is (often the same one).
        std::error_code ec;
        const std::filesystem::path parent = std::filesystem::path(path).parent_path();
        if (!parent.empty()) std::filesystem::create_directories(parent, ec);
        TESSERA_CHECK(!ec, "--metrics: cannot create the directory '", parent.string(), "': ", ec.message());
        errno = 0;
        out_.open(path, append ? std::ios::app : std::ios::trunc);
        TESSERA_CHECK(out_.good(), "--metrics: cannot open '", path, "' for writing: ", reason(errno));
    }
    void write(const nlohmann::json &j) {
        if (!out_.is_open()) return;
        errno = 0;
        out_ << j.dump() << "\n" << std::flush;
        TESSERA_CHECK(out_.good(), "--metrics: cannot write '", path_, "': ", reason(errno));
    }

private:
    static std::string reason(int error) { return error ? std::strerror(error) : "the write failed"; }

    std::string path_;
    std::ofstream out_;
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

// One synthetic set, cut in two, so that the test samples follow the same
// rule as the training samples but are not among them.
DataSplit synthetic_data(const TrainOptions &o, const Model &m, const Shape &sample) {
    const TensorType &input = m.graph.tensor(m.input).type;
    SyntheticSpec spec;
    spec.sample_shape = sample;
    spec.dtype = input.dtype;
    spec.vocab = input.dtype == DType::I32 ? m.num_classes : 0;
    spec.num_classes = m.num_classes;
    spec.label_elements = m.label_elements;
    const int64_t n_train = o.synthetic_size, n_test = std::max<int64_t>(o.batch, o.synthetic_size / 8);
    spec.size = n_train + n_test;
    spec.seed = o.seed;
    Dataset all = make_synthetic(spec);
    return {take_rows(all, 0, n_train), take_rows(all, n_train, n_test)};
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
    float *x_data() { return x.empty() ? nullptr : x.data(); }
    int32_t *xi_data() { return xi.empty() ? nullptr : xi.data(); }
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
    std::vector<float> logits;
    int64_t correct = 0, counted = 0;
    double loss_sum = 0;
    for (int64_t b = 0; b < batcher.eval_batches(); b++) {
        int64_t valid = batcher.fill_eval(b, buf.x_data(), buf.xi_data(), buf.labels.data());
        buf.write_to(store, m.input, m.labels);
        ex.run(forward);
        read_as_f32(store, m.graph, m.logits, logits);
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
    if (o.lr_schedule == LrSchedule::Constant) return o.optimizer.lr;
    const double pi = 3.14159265358979323846;
    return o.optimizer.lr * 0.5 * (1 + std::cos(pi * static_cast<double>(step) / static_cast<double>(total)));
}

// Test hooks for the failure paths: TESSERA_FAULT_KILL=RANK:STEP makes that
// rank SIGKILL itself as that step starts; TESSERA_FAULT_HANG=RANK:STEP makes
// it stop talking (sleep) instead.
class FaultHooks {
public:
    explicit FaultHooks(int rank) : rank_(rank), kill_(read("TESSERA_FAULT_KILL")), hang_(read("TESSERA_FAULT_HANG")) {}
    void before_step(int64_t step) const {
        if (rank_ == kill_.first && step + 1 == kill_.second) {
            std::cerr << fmt::format("TESSERA_FAULT_KILL: rank {} kills itself at {:.3f}\n", rank_,
                                     std::chrono::duration<double>(
                                         std::chrono::system_clock::now().time_since_epoch()).count())
                      << std::flush;
            std::raise(SIGKILL);
        }
        if (rank_ == hang_.first && step + 1 == hang_.second)
            while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
    }

private:
    // RANK:STEP, both integers, or (-1, -1) when unset; anything else is an
    // error naming the variable (a misspelt hook must not silently do nothing).
    static std::pair<int, int64_t> read(const char *var) {
        const std::optional<std::string> text = env_text(var);
        if (!text) return {-1, -1};
        int rank = -1;
        long long step = -1;
        char end = 0;
        TESSERA_CHECK(std::sscanf(text->c_str(), "%d:%lld%c", &rank, &step, &end) == 2 && rank >= 0 && step >= 1, var,
                      ": '", *text, "' is not RANK:STEP (a rank and a step from 1, e.g. 1:5)");
        return {rank, static_cast<int64_t>(step)};
    }
    int rank_;
    std::pair<int, int64_t> kill_, hang_;
};

// The loop's state; each member function is one part of a step or of the run.
class Trainer {
public:
    explicit Trainer(const TrainSession &s)
        : s_(s), o_(s.options), run_(s.run), m_(s.run.model), root_(s.job.root()),
          train_batches_(s.data.train, o_.batch, o_.seed, o_.shuffle), test_batches_(s.data.test, o_.batch, o_.seed, false),
          per_epoch_(train_batches_.batches_per_epoch()), total_(total_steps(o_, per_epoch_)),
          info_(checkpoint_info(o_, per_epoch_)), buf_(m_.graph, m_.input, m_.labels), faults_(s.job.rank),
          // Taken before the metrics file is opened: a second run on this
          // directory must not truncate the first's metrics either.
          checkpoint_lock_(root_ && !o_.checkpoint_dir.empty() ? prepare_checkpoint_dir(o_.checkpoint_dir)
                                                               : CheckpointDirLock()),
          metrics_(root_ ? o_.metrics_path : std::string(), o_.resume),
          progress_(root_ ? o_.progress : ProgressMode::None, total_,
                    o_.log_every > 0 ? o_.log_every : std::max<int64_t>(1, per_epoch_ / 10)),
          scaler_(m_.graph.find_tensor(kLossScaleTensor).has_value(), loss_scaler_config(o_)) {
        step_tensor_ = m_.graph.find_tensor(kStepTensor);
        if (scaler_.enabled()) {
            loss_scale_tensor_ = m_.graph.tensor_named(kLossScaleTensor);
            nonfinite_tensor_ = m_.graph.tensor_named(kNonfiniteTensor);
        }
        const Graph &g = run_.graph();
        for (NodeId n = 0; n < g.num_nodes(); n++)
            if (g.node(n).optimizer && !g.node(n).comm) update_nodes_.push_back(n);
    }

    TrainResult run() {
        const int64_t start = initialise();
        const auto started = Clock::now();
        for (int64_t step = start; step < total_; step++) {
            run_step(step, start, started);
            if (step + 1 < total_) stop_if_asked(step + 1);
        }
        progress_.finish();
        if (o_.eval && total_ > start) maybe_evaluate((total_ + per_epoch_ - 1) / per_epoch_);
        save(total_);
        if (root_) print_summary(std::chrono::duration<double>(Clock::now() - started).count());
        return result_;
    }

private:
    // Weights from the seed, then from the checkpoint when resuming; returns the first step.
    int64_t initialise() {
        // Constants (the loss gradient's seed) are not in checkpoints: initialise
        // everything, then overwrite what the checkpoint holds. Partitioned, each
        // whole tensor is drawn as in the single-process run and then sharded.
        s_.executor.initialize(o_.seed);
        if (run_.sharded()) write_whole_initial_weights();
        write_model_values();
        int64_t start = 0;
        if (o_.resume && checkpoint_exists(o_.checkpoint_dir)) {
            std::string scaler_state;
            start = load_checkpoint(o_.checkpoint_dir, info_, m_.graph, s_.store, &scaler_state);
            if (!scaler_state.empty()) scaler_.restore(scaler_state, checkpoint_path(o_.checkpoint_dir));
            if (root_) std::cout << fmt::format("resumed from {} at step {}\n", checkpoint_path(o_.checkpoint_dir), start);
        } else if (o_.resume && root_) {
            std::cout << "no checkpoint in " << o_.checkpoint_dir << " yet; starting from step 0\n";
        }
        TESSERA_CHECK(start <= total_, "the checkpoint is at step ", start, " but this run has only ", total_,
                      " steps; raise --steps or --epochs to continue");
        return start;
    }

    void write_whole_initial_weights() {
        const Graph &g = m_.graph;
        std::vector<float> whole;
        for (TensorId t = 0; t < g.num_tensors(); t++) {
            const TensorInfo &info = g.tensor(t);
            if (info.producer != kNoNode || !is_persistent(info.role) || info.type.dtype != DType::F32) continue;
            whole.resize(static_cast<size_t>(info.type.elements()));
            fill_init(info.init, o_.seed, info.name, info.type.shape, whole.data(), info.type.elements());
            s_.store.write(t, whole.data(), whole.size() * sizeof(float));
        }
    }

    // An imported model's weights and constants replace what the seed drew.
    void write_model_values() {
        for (const auto &[name, v] : m_.values) {
            const TensorId t = m_.graph.tensor_named(name);
            if (v.dtype == DType::F32) s_.store.write(t, v.f32.data(), v.f32.size() * sizeof(float));
            else s_.store.write(t, v.i32.data(), v.i32.size() * sizeof(int32_t));
        }
    }

    void run_step(int64_t step, int64_t start, Clock::time_point started) {
        const int64_t epoch = step / per_epoch_;
        faults_.before_step(step);
        feed_batch(step, epoch);
        StepStats stats = s_.executor.run(run_.train);
        check_step(stats, step);
        float loss = 0;
        s_.store.read(m_.loss, &loss, sizeof(loss));
        const double scale = scaler_.scale();
        const bool skipped = scaler_.enabled() && scaler_.update(agreed_nonfinite_count(), step + 1);
        // fp16's overflow is a skipped step, its weights untouched; anywhere else a non-finite loss is divergence.
        TESSERA_CHECK(!root_ || skipped || std::isfinite(loss), "the loss is ", loss, " at step ", step + 1,
                      "; training diverged. Lower --lr (now ", o_.optimizer.lr, ")");
        peak_ = std::max(peak_, stats.peak_live_bytes);
        train_seconds_ += stats.step_time_s;
        result_.final_loss = loss;
        nlohmann::json line = step_line(stats, step, epoch, loss);
        if (scaler_.enabled()) {
            line["loss_scale"] = scale;
            line["step_skipped"] = skipped;
            line["skipped_steps"] = scaler_.skipped_steps();
        }
        metrics_.write(line);
        double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
        progress_.step(step + 1, epoch, loss, stats.step_time_s, elapsed, step + 1 - start);
        result_.steps_run++;
        const bool epoch_end = (step + 1) % per_epoch_ == 0;
        if (epoch_end && step + 1 < total_) maybe_evaluate(epoch + 1);
        if ((o_.checkpoint_every > 0 && (step + 1) % o_.checkpoint_every == 0) ||
            (o_.checkpoint_every == 0 && epoch_end))
            save(step + 1);
    }

    void feed_batch(int64_t step, int64_t epoch) {
        train_batches_.fill(epoch, step % per_epoch_, buf_.x_data(), buf_.xi_data(), buf_.labels.data());
        buf_.write_to(s_.store, m_.input, m_.labels);
        if (step_tensor_) {  // Adam's step: the updates applied so far, and this one
            int32_t v = static_cast<int32_t>(step + 1 - scaler_.skipped_steps());
            s_.store.write(*step_tensor_, &v, sizeof(v));
        }
        if (scaler_.enabled()) {
            const float scale = static_cast<float>(scaler_.scale());  // a power of two in [2^-24, 2^64]: exact
            s_.store.write(*loss_scale_tensor_, &scale, sizeof(scale));
        }
        if (o_.lr_schedule != LrSchedule::Constant) {
            double lr = scheduled_lr(o_, step, total_);
            for (NodeId n : update_nodes_) s_.executor.set_attr(n, "lr", lr);
        }
    }

    // The step's count of non-finite gradient elements. The step all-reduced
    // it before its updates read it; rank 0's copy goes to every rank, so that
    // all scalers take the same decision.
    double agreed_nonfinite_count() {
        float count = 0;
        s_.store.read(*nonfinite_tensor_, &count, sizeof(count));
        if (run_.sharded()) s_.job.comm->broadcast(&count, sizeof(count), 0, s_.job.comm->world_group());
        return count;
    }

    // What the plans promised, checked against what the step did.
    void check_step(const StepStats &stats, int64_t step) const {
        // Lowering counted what each rank sends; the communicator counts what
        // it did send. They must agree exactly.
        TESSERA_INTERNAL_ASSERT(!run_.sharded() || stats.comm_bytes == run_.lowered->comm_bytes, "rank ", s_.job.rank,
                                " sent ", stats.comm_bytes, " bytes in step ", step + 1,
                                " but its lowered graph says ", run_.lowered->comm_bytes);
        if (!run_.swaps) return;
        // The swap plan predicted what moves and how much of the arena is
        // touched; the device counted both.
        const SwapPlan &sp = run_.swaps->train;
        TESSERA_INTERNAL_ASSERT(stats.swap_out_bytes == sp.swap_out_bytes && stats.swap_in_bytes == sp.swap_in_bytes,
                                "rank ", s_.job.rank, " swapped ", stats.swap_out_bytes, " bytes out and ",
                                stats.swap_in_bytes, " in during step ", step + 1, " but its swap plan says ",
                                sp.swap_out_bytes, " and ", sp.swap_in_bytes);
        TESSERA_INTERNAL_ASSERT(stats.arena_high_water == sp.high_water && stats.peak_live_bytes <= run_.arena, "rank ",
                                s_.job.rank, " step ", step + 1, " touched ", stats.arena_high_water,
                                " bytes of the arena with at most ", stats.peak_live_bytes,
                                " live, but its swap plan says ", sp.high_water, " within ", run_.arena);
    }

    nlohmann::json step_line(const StepStats &stats, int64_t step, int64_t epoch, float loss) const {
        nlohmann::json line{{"step", step + 1},
                            {"epoch", epoch},
                            {"loss", loss},
                            {"step_time_s", stats.step_time_s},
                            {"peak_device_bytes", stats.peak_live_bytes},
                            {"arena_high_water", stats.arena_high_water},
                            {"arena_bytes", run_.arena},
                            {"footprint_bytes", run_.footprint},
                            {"comm_bytes", stats.comm_bytes},
                            {"swap_out_bytes", stats.swap_out_bytes},
                            {"swap_in_bytes", stats.swap_in_bytes}};
        if (run_.sharded()) line["planned_comm_bytes"] = run_.lowered->comm_bytes;
        if (s_.predictor) {
            const StepComparison c = s_.predictor->predict(s_.executor, stats.step_time_s);
            const RankStepTime &slowest = c.predicted.ranks[static_cast<size_t>(c.predicted.slowest_rank)];
            line["job_step_time_s"] = c.job_step_s;
            line["simulated_step_time_s"] = c.predicted.step_s;
            line["simulated_exposed_comm_s"] = slowest.exposed_comm_s;
            line["simulated_exposed_swap_s"] = slowest.exposed_swap_s;
        }
        if (!run_.swaps) return line;
        // The plan's prediction from the profiling pass, and the same plan
        // re-simulated with the times the operators took in this step: the
        // difference between the two is the profiler's, the rest the simulator's.
        line["predicted_step_time_s"] = run_.swaps->train.time_s;
        if (s_.timed && !run_.swaps->times.node_time_s.empty()) {
            const OpTimes &profiled = run_.swaps->times;
            std::vector<double> in_step = s_.executor.node_times();
            for (size_t n = 0; n < in_step.size(); n++)
                if (in_step[n] <= 0) in_step[n] = profiled.node_time_s[n];
            line["resimulated_step_time_s"] =
                simulate_swap_plan(run_.swaps->train, in_step, profiled.h2d_bytes_per_s, profiled.d2h_bytes_per_s);
        }
        return line;
    }

    void maybe_evaluate(int64_t epoch) {
        if (!o_.eval) return;
        last_eval_ = evaluate(s_.executor, s_.store, run_.forward, m_, test_batches_, buf_);
        evaluated_ = true;
        metrics_.write({{"epoch", epoch}, {"test_accuracy", last_eval_.accuracy}, {"test_loss", last_eval_.loss}});
        progress_.line(fmt::format("epoch {}: test accuracy {:.2f}% test loss {:.4f}", epoch,
                                   last_eval_.accuracy * 100, last_eval_.loss));
    }

    void save(int64_t step) {
        if (o_.checkpoint_dir.empty() || step == saved_at_) return;
        const bool scaler_state = scaler_.enabled() || scaler_.skipped_steps() > 0;
        save_checkpoint(o_.checkpoint_dir, info_, m_.graph, s_.store, step,
                        scaler_state ? scaler_.to_json() : std::string());
        if (m_.imported) save_state_dict(o_.checkpoint_dir, m_, s_.store, step);
        saved_at_ = step;
    }

    // A stop signal on any rank (stop_request.h): every rank checkpoints the
    // `done` steps and stops. Without a communicator's agreement, ranks could
    // stop at different steps and leave the others in a collective.
    void stop_if_asked(int64_t done) {
        const int sig = agreed_stop_signal(run_.sharded() ? s_.job.comm : nullptr);
        if (sig == 0) return;
        progress_.finish();
        save(done);
        throw StopRequested{sig, done, total_, o_.checkpoint_dir.empty() ? "" : checkpoint_path(o_.checkpoint_dir)};
    }

    void print_summary(double wall) {
        std::cout << fmt::format("\nsummary: {} steps in {} ({:.1f} ms/step compute)", result_.steps_run,
                                 format_duration(wall),
                                 result_.steps_run ? train_seconds_ / result_.steps_run * 1e3 : 0.0);
        std::cout << fmt::format(" | final loss {:.4f}", result_.final_loss);
        if (evaluated_) {
            result_.test_accuracy = last_eval_.accuracy;
            std::cout << fmt::format(" | test accuracy {:.2f}%", last_eval_.accuracy * 100);
        }
        if (scaler_.enabled())
            std::cout << fmt::format(" | loss scale 2^{}, {} skipped", std::ilogb(scaler_.scale()),
                                     count_of(scaler_.skipped_steps(), "step"));
        std::cout << fmt::format(" | peak device bytes {} of arena {}", format_bytes(peak_), format_bytes(run_.arena));
        if (!o_.checkpoint_dir.empty()) std::cout << " | checkpoint " << checkpoint_path(o_.checkpoint_dir);
        std::cout << "\n" << std::flush;
    }

    const TrainSession &s_;
    int64_t saved_at_ = -1;  // the step of the last checkpoint this run wrote
    const TrainOptions &o_;
    const RunPlan &run_;
    const Model &m_;
    const bool root_;
    Batcher train_batches_, test_batches_;
    const int64_t per_epoch_, total_;
    const CheckpointInfo info_;
    BatchBuffers buf_;
    FaultHooks faults_;
    CheckpointDirLock checkpoint_lock_;  // held for the run: no second run writes the directory meanwhile
    MetricsWriter metrics_;
    Progress progress_;
    LossScaler scaler_;
    std::optional<TensorId> step_tensor_, loss_scale_tensor_, nonfinite_tensor_;
    std::vector<NodeId> update_nodes_;
    TrainResult result_;
    EvalResult last_eval_;
    bool evaluated_ = false;
    int64_t peak_ = 0;
    double train_seconds_ = 0;
};

}  // namespace

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
        d = synthetic_data(o, m, sample);
    } else if (is_data_file(kind)) {
        DataFileSplit f = load_data_file(kind);
        d = {std::move(f.train), std::move(f.test)};
    } else {
        fail("--data: unknown dataset '", o.data, "'; valid: fashion-mnist, synthetic, auto, or FILE.safetensors");
    }
    const TensorInfo &labels = m.graph.tensor(m.labels);
    // The test split is checked as the training split: evaluation feeds it to
    // the same model.
    for (const Dataset *split : {&d.train, &d.test})
        check_fits(*split, input.type, labels.type, o.model, m.num_classes,
                   input.type.dtype == DType::I32 ? m.num_classes : 0);
    TESSERA_CHECK(d.train.size >= o.batch, "--batch ", o.batch, " is larger than the ", d.train.name,
                  " training set (", d.train.size, " samples)");
    return d;
}

LossScalerConfig loss_scaler_config(const TrainOptions &o) {
    LossScalerConfig c;
    if (o.loss_scale) c.init_scale = *o.loss_scale;
    if (o.loss_scale_growth_interval) c.growth_interval = *o.loss_scale_growth_interval;
    return c;
}

int64_t total_steps(const TrainOptions &o, int64_t steps_per_epoch) {
    if (o.steps) return *o.steps;
    const int64_t epochs = o.epochs.value_or(1);
    TESSERA_CHECK(steps_per_epoch >= 1 && epochs <= kMaxSteps / steps_per_epoch, "--epochs ", epochs, " of ",
                  steps_per_epoch, " steps each is more than ", kMaxSteps, " steps, the most a run can take");
    return epochs * steps_per_epoch;
}

TrainResult train(const TrainSession &session) { return Trainer(session).run(); }

}  // namespace tessera
