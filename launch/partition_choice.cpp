#include "partition_choice.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "tessera/error.h"
#include "tessera/text.h"

namespace tessera {

namespace {

constexpr PartitionStrategy kStrategies[] = {PartitionStrategy::Tofu, PartitionStrategy::DataParallel,
                                             PartitionStrategy::Owt, PartitionStrategy::EqualChop};

void say(const PartitionQuestion &q, const std::string &line) {
    if (q.progress) q.progress(line);
}

BenchContext context_of(const PartitionQuestion &q) {
    BenchContext ctx;
    ctx.device = q.device;
    ctx.batch = q.batch;
    ctx.device_mem = q.budget;
    ctx.search_s = q.search_s;
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

bool faster(const BenchRow &a, const BenchRow &b) { return a.note.empty() && (!b.note.empty() || a.step_s < b.step_s); }

// Tofu with some weights fixed, predicted; plans already predicted (two sets
// of fixes can give one plan) are not predicted again.
class FixedWeightsPredictor {
public:
    FixedWeightsPredictor(const PartitionQuestion &q, const Graph &training)
        : q_(q), training_(training), ctx_(context_of(q)) {}

    BenchRow predict(const WeightLayouts &weights) {
        PartitionOptions o = bench_partition_options(q_.model, PartitionStrategy::Tofu);
        o.weights = weights;
        Plan plan;
        try {
            plan = partition(training_, q_.machine, o);
        } catch (const Error &e) {  // fixes the search cannot honour (two weights of one group fixed apart)
            BenchRow row;
            row.model = q_.model;
            row.strategy = "per-weight";
            row.note = std::string("cannot work: ") + e.what();
            return row;
        }
        plan.search_time_s = 0;
        const std::string key = plan_to_json(plan, -1);
        auto it = seen_.find(key);
        if (it != seen_.end()) return it->second;
        BenchRow row = predict_plan(q_.model, training_, q_.machine, plan, "per-weight", ctx_);
        seen_.emplace(key, row);
        return row;
    }

private:
    const PartitionQuestion &q_;
    const Graph &training_;
    BenchContext ctx_;
    std::map<std::string, BenchRow> seen_;
};

// The per-weight search from `start` (the best strategy's layouts of
// `names`): passes over `names`, each weight tried replicated, split and
// free, keeping each change that lowers the predicted step, until a pass
// changes nothing or the time is up. Returns the best fixes and their row.
std::pair<WeightLayouts, BenchRow> search_weights(const PartitionQuestion &q, const Graph &training,
                                                  const std::vector<std::string> &names, WeightLayouts start) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(q.weights_s);
    FixedWeightsPredictor predictor(q, training);
    std::pair<WeightLayouts, BenchRow> best{start, predictor.predict(start)};
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
                if (!faster(row, best.second)) continue;
                best = {std::move(trial), std::move(row)};
                changed = true;
            }
    }
    return best;
}

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

WeightLayouts weight_layouts_of(const Plan &plan, const std::vector<std::string> &weights) {
    WeightLayouts out;
    for (const std::string &w : weights)
        for (const TensorPlan &t : plan.tensors) {
            if (t.tensor != w) continue;
            const auto split = std::count_if(t.layout.begin(), t.layout.end(), [](const Layout &l) { return l.is_split(); });
            if (split == static_cast<long>(t.layout.size())) out.emplace_back(w, WeightLayout::Split);
            else if (split == 0) out.emplace_back(w, WeightLayout::Replicate);
        }
    return out;
}

std::pair<WeightLayouts, BenchRow> choose_weights(const PartitionQuestion &q, const Graph &training,
                                                  PartitionStrategy start) {
    std::vector<std::string> names = weights_by_size(training);
    if (static_cast<int>(names.size()) > q.max_weights) names.resize(static_cast<size_t>(q.max_weights));
    const Plan plan = partition(training, q.machine, bench_partition_options(q.model, start));
    return search_weights(q, training, names, weight_layouts_of(plan, names));
}

PartitionChoice choose_partition(const PartitionQuestion &q) {
    const BenchContext ctx = context_of(q);
    const Graph training = bench_training_graph(q.model, q.batch, q.optimizer);
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
    if (q.weights_s <= 0 || q.machine.devices() == 1) return choice;
    auto [weights, row] = choose_weights(q, training, kStrategies[best]);
    if (faster(row, winner)) {
        choice.strategy = partition_strategy_name(PartitionStrategy::Tofu);
        choice.weights = std::move(weights);
    }
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
