// --partition auto (launch/partition_choice.h): the pick is the strategy
// with the least predicted step, the budget can change it, and a budget no
// strategy can work under is an error naming each one's reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "expect_error.h"
#include "partition_choice.h"

namespace tessera {
namespace {

using test::error_of;

const std::string kLstm = "lstm:layers=4,hidden=512,seq=4,vocab=64";

// The pick against each strategy predicted here, one by one, as tessera-bench
// predicts it.
TEST(PartitionChoice, PicksTheLeastPredictedStep) {
    const Machine machine = flat_machine(2);
    const PartitionChoice c = choose_partition(kLstm, 32, {}, machine, 0, "cpu", 0.2);
    ASSERT_EQ(c.rows.size(), 4u);
    BenchContext ctx;
    ctx.device = roofline_device("cpu");
    ctx.batch = 32;
    const Graph training = bench_training_graph(kLstm, 32);
    std::string least;
    double best = 0;
    for (PartitionStrategy s : {PartitionStrategy::Tofu, PartitionStrategy::DataParallel, PartitionStrategy::Owt,
                                PartitionStrategy::EqualChop}) {
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
    const PartitionChoice tight = choose_partition(kLstm, 32, {}, machine, 52 << 20, "cpu", 0.2);
    for (const BenchRow &r : tight.rows)
        if (r.note.empty()) EXPECT_LE(r.memory_bytes, 52 << 20) << r.strategy;
    double least = 1e300;
    for (const BenchRow &r : tight.rows)
        if (r.note.empty()) least = std::min(least, r.step_s);
    for (const BenchRow &r : tight.rows)
        if (r.strategy == tight.strategy) EXPECT_EQ(r.step_s, least);
    const std::string msg = error_of([&] { choose_partition(kLstm, 32, {}, machine, 4096, "cpu", 0.2); });
    EXPECT_NE(msg.find("--partition auto: no strategy can work on 2 devices under 4.00 KiB; tofu: "),
              std::string::npos)
        << msg;
}

}  // namespace
}  // namespace tessera
