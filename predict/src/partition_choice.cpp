#include "tessera/predict/partition_choice.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <variant>

#include <fmt/format.h>

#include "tessera/error.h"
#include "tessera/pipeline/run_plan.h"
#include "tessera/text.h"

namespace tessera {

namespace {

// What PyTorch users run (ddp, fsdp) beside Tofu's search and its baselines.
constexpr PartitionStrategy kStrategies[] = {PartitionStrategy::Tofu, PartitionStrategy::DataParallel,
                                             PartitionStrategy::Ddp,  PartitionStrategy::Fsdp,
                                             PartitionStrategy::Owt,  PartitionStrategy::EqualChop};

void say(const PartitionQuestion &q, const std::string &line) {
    if (q.progress) q.progress(line);
}

BenchContext context_of(const PartitionQuestion &q) {
    BenchContext ctx;
    ctx.device = q.device;
    ctx.batch = q.batch;
    ctx.device_mem = q.budget;
    ctx.search_s = q.search_s;
    ctx.bucket_bytes = q.bucket_bytes;
    return ctx;
}

// `weights` with `name` set to `layout` (nullopt: left to the search).
WeightLayouts with_weight(WeightLayouts weights, const std::string &name, std::optional<WeightLayout> layout) {
    std::erase_if(weights, [&](const auto &w) { return w.first == name; });
    if (layout) weights.emplace_back(name, *layout);
    return weights;
}

std::optional<WeightLayout> layout_of(const WeightLayouts &weights, const std::string &name) {
    for (const auto &[n, l] : weights)
        if (n == name) return l;
    return std::nullopt;
}

const char *weight_layout_word(std::optional<WeightLayout> layout) {
    if (!layout) return "free";
    return *layout == WeightLayout::Split ? "split" : "replicated";
}

// Whether a works and b does not, or a's step is shorter than b's by more
// than the share `gain`.
bool faster(const BenchRow &a, const BenchRow &b, double gain = 0) {
    return a.note.empty() && (!b.note.empty() || a.step_s < b.step_s * (1 - gain));
}

// The base strategy with some weights fixed, predicted; plans already
// predicted (two sets of fixes can give one plan) are not predicted again.
class FixedWeightsPredictor {
public:
    FixedWeightsPredictor(const PartitionQuestion &q, const Graph &training, PartitionStrategy base)
        : q_(q), training_(training), base_(base), ctx_(context_of(q)) {}

    // The plan of `weights` fixed, or the reason there is none.
    std::variant<Plan, std::string> plan(const WeightLayouts &weights) const {
        PartitionOptions o = bench_partition_options(q_.model, base_, ctx_);
        o.weights = weights;
        try {
            Plan p = partition(training_, q_.machine, o);
            p.search_time_s = 0;
            return p;
        } catch (const Error &e) {  // fixes the search cannot honour (two weights of one group fixed apart)
            return std::string("cannot work: ") + e.what();
        }
    }

    void remember(const Plan &plan, const BenchRow &row) { seen_.emplace(plan_to_json(plan, -1), row); }

    BenchRow predict(const WeightLayouts &weights) {
        std::variant<Plan, std::string> p = plan(weights);
        if (auto *why = std::get_if<std::string>(&p))
            return BenchRow{.model = q_.model, .devices = q_.machine.devices(), .strategy = kRowName, .note = *why};
        const Plan &made = std::get<Plan>(p);
        auto [it, fresh] = seen_.try_emplace(plan_to_json(made, -1));
        if (fresh) it->second = predict_plan(q_.model, training_, q_.machine, made, kRowName, ctx_);
        return it->second;
    }

private:
    static constexpr const char *kRowName = "per-weight";
    const PartitionQuestion &q_;
    const Graph &training_;
    PartitionStrategy base_;
    BenchContext ctx_;
    std::map<std::string, BenchRow> seen_;
};

}  // namespace

std::vector<std::string> weights_by_size(const Graph &training) {
    std::vector<std::pair<int64_t, std::string>> sized;
    for (const TensorInfo &t : training.tensors())
        if (t.role == TensorRole::Param) sized.emplace_back(-t.type.bytes(), t.name);
    std::sort(sized.begin(), sized.end());
    std::vector<std::string> out;
    for (auto &[bytes, name] : sized) out.push_back(std::move(name));
    return out;
}

// From the base strategy's own plan (no fixes), passes over the largest
// weights, each tried replicated, split and free, keeping each change that
// lowers the predicted step, until a pass changes nothing or the time is up.
std::pair<WeightLayouts, BenchRow> choose_weights(const PartitionQuestion &q, const Graph &training,
                                                  PartitionStrategy base, const BenchRow &base_row) {
    std::vector<std::string> names = weights_by_size(training);
    if (static_cast<int>(names.size()) > q.max_weights) names.resize(static_cast<size_t>(q.max_weights));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(q.weights_s);
    FixedWeightsPredictor predictor(q, training, base);
    std::pair<WeightLayouts, BenchRow> best{{}, base_row};
    best.second.strategy = "per-weight";
    predictor.remember(std::get<Plan>(predictor.plan({})), best.second);
    for (bool changed = true; changed;) {
        changed = false;
        for (const std::string &name : names)
            for (std::optional<WeightLayout> alt : {std::optional{WeightLayout::Replicate},
                                                    std::optional{WeightLayout::Split}, std::optional<WeightLayout>{}}) {
                if (alt == layout_of(best.first, name)) continue;
                if (std::chrono::steady_clock::now() > deadline) return best;
                WeightLayouts trial = with_weight(best.first, name, alt);
                BenchRow row = predictor.predict(trial);
                say(q, fmt::format("partition auto: {} {}: {}", name, weight_layout_word(alt),
                                   row.note.empty() ? format_duration(row.step_s) : row.note));
                if (!faster(row, best.second, kWeightStepGain)) continue;
                best = {std::move(trial), std::move(row)};
                changed = true;
            }
    }
    return best;
}

PartitionChoice choose_partition(const PartitionQuestion &q) {
    const BenchContext ctx = context_of(q);
    const Graph training = build_training_graph(q.model, q.batch, q.optimizer);
    PartitionChoice choice;
    size_t best = 0;
    std::string reasons;
    for (PartitionStrategy s : kStrategies) {
        say(q, fmt::format("partition auto: predicting {}", partition_strategy_name(s)));
        BenchRow row = predict_partitioned(q.model, training, q.machine, s, ctx);
        if (!row.note.empty()) reasons += fmt::format("; {}: {}", row.strategy, row.note);
        choice.rows.push_back(std::move(row));
        if (faster(choice.rows.back(), choice.rows[best])) best = choice.rows.size() - 1;
    }
    const BenchRow winner = choice.rows[best];
    TESSERA_CHECK(winner.note.empty(), "--partition auto: no strategy can work on ", q.machine.devices(),
                  " devices under ", format_bytes(q.budget), reasons);
    choice.strategy = winner.strategy;
    // When the best strategy fits, memory does not bind: its plan stands.
    const bool binds = q.budget > 0 && winner.memory_bytes >= q.budget;
    if (q.weights_s <= 0 || q.machine.devices() == 1 || !binds) return choice;
    auto [weights, row] = choose_weights(q, training, kStrategies[best], winner);
    if (faster(row, winner, kPerWeightPickGain)) choice.weights = std::move(weights);
    choice.rows.push_back(std::move(row));
    return choice;
}

std::string partition_choice_line(const PartitionChoice &choice) {
    std::string line = "partition auto: predicted step";
    for (const BenchRow &r : choice.rows)
        line += r.note.empty() ? fmt::format(" {} {},", r.strategy, format_duration(r.step_s))
                               : fmt::format(" {} cannot work,", r.strategy);
    line.back() = ';';
    line += " training with " + choice.strategy;
    if (!choice.weights.empty()) line += " --weights " + format_weights(choice.weights);
    return line;
}

}  // namespace tessera
