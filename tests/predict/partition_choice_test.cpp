// --partition auto (predict/partition_choice.h): the pick is the strategy
// with the least predicted step, the budget can change it, and a budget no
// strategy can work under is an error naming each one's reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "expect_error.h"
#include "tessera/pipeline/run_plan.h"
#include "tessera/predict/partition_choice.h"

namespace tessera {
namespace {

using test::error_of;

const std::string kLstm = "lstm:layers=4,hidden=512,seq=4,vocab=64";

// The question of these tests: the lstm at batch 32 on the cpu roofline, the
// swap planner searching 0.2 s, and no per-weight search unless asked.
PartitionQuestion question(const Machine &machine, int64_t budget = 0, double weights_s = 0) {
    PartitionQuestion q;
    q.model = kLstm;
    q.batch = 32;
    q.machine = machine;
    q.budget = budget;
    q.search_s = 0.2;
    q.weights_s = weights_s;
    return q;
}

BenchRow predict_fixed(const Graph &training, const Machine &machine, PartitionStrategy base,
                       const WeightLayouts &weights) {
    BenchContext ctx;
    ctx.device = roofline_device("cpu");
    ctx.batch = 32;
    PartitionOptions o = bench_partition_options(kLstm, base, ctx);
    o.weights = weights;
    return predict_plan(kLstm, training, machine, partition(training, machine, o), "fixed", ctx);
}

// The pick against each strategy predicted here, one by one, as tessera-bench
// predicts it.
TEST(PartitionChoice, PicksTheLeastPredictedStep) {
    const Machine machine = flat_machine(2);
    // With no budget memory does not bind: no per-weight search, the pick is a strategy.
    const PartitionChoice c = choose_partition(question(machine, 0, 30));
    ASSERT_EQ(c.rows.size(), 6u);
    EXPECT_TRUE(c.weights.empty());
    BenchContext ctx;
    ctx.device = roofline_device("cpu");
    ctx.batch = 32;
    const Graph training = build_training_graph(kLstm, 32);
    std::string least;
    double best = 0;
    for (PartitionStrategy s : {PartitionStrategy::Tofu, PartitionStrategy::DataParallel, PartitionStrategy::Ddp,
                                PartitionStrategy::Fsdp, PartitionStrategy::Owt, PartitionStrategy::EqualChop}) {
        const BenchRow row = predict_partitioned(kLstm, training, machine, s, ctx);
        if (least.empty() || row.step_s < best) least = row.strategy, best = row.step_s;
    }
    EXPECT_EQ(c.strategy, least);
    const std::string line = partition_choice_line(c);
    EXPECT_NE(line.find("training with " + least), std::string::npos) << line;
    EXPECT_NE(line.find("tofu "), std::string::npos) << line;
}

// Under a budget each rank that does not fit swaps, no working row uses more
// memory than the budget, and the pick is the least among the rows that
// work; a budget below any operator's need is an error.
TEST(PartitionChoice, UnderABudgetThePickIsTheLeastThatWorks) {
    const Machine machine = flat_machine(2);
    const PartitionChoice tight = choose_partition(question(machine, 52 << 20));
    for (const BenchRow &r : tight.rows)
        if (r.note.empty()) EXPECT_LE(r.memory_bytes, 52 << 20) << r.strategy;
    double least = 1e300;
    for (const BenchRow &r : tight.rows)
        if (r.note.empty()) least = std::min(least, r.step_s);
    for (const BenchRow &r : tight.rows)
        if (r.strategy == tight.strategy) EXPECT_EQ(r.step_s, least);
    const std::string msg = error_of([&] { choose_partition(question(machine, 4096)); });
    EXPECT_NE(msg.find("--partition auto: no strategy can work on 2 devices under 4.00 KiB; tofu: "),
              std::string::npos)
        << msg;
}

// The per-weight search ends where no single weight's change (replicated,
// split or free) predicts a step shorter by kWeightStepGain, each such
// change predicted here independently; its row is what the test predicts
// for its fixes, and never slower than the strategy it starts from.
TEST(PartitionChoice, PerWeightSearchEndsWhereNoSingleChangeHelps) {
    const Machine machine = flat_machine(2);
    PartitionQuestion q = question(machine, 0, 600);
    q.max_weights = 4;
    const Graph training = build_training_graph(kLstm, 32);
    std::vector<std::string> names = weights_by_size(training);
    names.resize(4);
    for (PartitionStrategy base : {PartitionStrategy::Tofu, PartitionStrategy::DataParallel, PartitionStrategy::Owt}) {
        const BenchRow base_row = predict_fixed(training, machine, base, {});
        const auto [fixes, row] = choose_weights(q, training, base, base_row);
        ASSERT_TRUE(row.note.empty()) << row.note;
        EXPECT_EQ(row.strategy, "per-weight");
        EXPECT_LE(row.step_s, base_row.step_s);
        EXPECT_DOUBLE_EQ(predict_fixed(training, machine, base, fixes).step_s, row.step_s);
        for (const auto &[name, layout] : fixes)
            EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
        for (const std::string &name : names)
            for (std::optional<WeightLayout> alt : {std::optional{WeightLayout::Replicate},
                                                    std::optional{WeightLayout::Split}, std::optional<WeightLayout>{}}) {
                WeightLayouts trial = fixes;
                std::erase_if(trial, [&](const auto &w) { return w.first == name; });
                if (alt) trial.emplace_back(name, *alt);
                EXPECT_GE(predict_fixed(training, machine, base, trial).step_s, row.step_s * (1 - kWeightStepGain))
                    << name;
            }
    }
}

// Under a budget that binds (every strategy's ranks swap at 52 MiB), the
// pick is the least strategy, with the per-weight fixes only where they
// beat it by kPerWeightPickGain.
TEST(PartitionChoice, PerWeightFixesArePickedOnlyWhenTheyBeatTheBestStrategy) {
    PartitionQuestion q = question(flat_machine(2), 52 << 20, 600);
    q.max_weights = 4;
    const PartitionChoice c = choose_partition(q);
    ASSERT_EQ(c.rows.size(), 7u);
    for (const BenchRow &r : c.rows) EXPECT_EQ(r.memory_bytes, 52 << 20) << r.strategy;
    const BenchRow &mine = c.rows.back();
    double least = 1e300;
    std::string least_name;
    for (size_t i = 0; i + 1 < c.rows.size(); i++)
        if (c.rows[i].step_s < least) least = c.rows[i].step_s, least_name = c.rows[i].strategy;
    EXPECT_EQ(c.strategy, least_name);
    EXPECT_LE(mine.step_s, least);
    EXPECT_EQ(c.weights.empty(), !(mine.step_s < least * (1 - kPerWeightPickGain)));
    const std::string line = partition_choice_line(c);
    EXPECT_NE(line.find(" per-weight "), std::string::npos) << line;
    EXPECT_EQ(line.find("--weights") != std::string::npos, !c.weights.empty()) << line;
}

// weights_by_size: every weight, largest first.
TEST(PartitionChoice, WeightsBySize) {
    const Graph training = build_training_graph(kLstm, 32);
    const std::vector<std::string> names = weights_by_size(training);
    int64_t params = 0, last = INT64_MAX;
    for (const TensorInfo &t : training.tensors())
        if (t.role == TensorRole::Param) params++;
    EXPECT_EQ(static_cast<int64_t>(names.size()), params);
    for (const std::string &name : names)
        for (const TensorInfo &t : training.tensors())
            if (t.name == name) {
                EXPECT_LE(t.type.bytes(), last) << name;
                last = t.type.bytes();
            }
}

}  // namespace
}  // namespace tessera
