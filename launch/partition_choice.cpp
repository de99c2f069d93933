#include "partition_choice.h"

#include <fmt/format.h>

#include "tessera/error.h"
#include "tessera/text.h"

namespace tessera {

PartitionChoice choose_partition(const std::string &model, int64_t batch, const OptimizerConfig &optimizer,
                                 const Machine &machine, int64_t budget, const std::string &roofline,
                                 double search_s) {
    BenchContext ctx;
    ctx.device = roofline_device(roofline);
    ctx.batch = batch;
    ctx.device_mem = budget;
    ctx.search_s = search_s;
    const Graph training = bench_training_graph(model, batch, optimizer);
    PartitionChoice choice;
    double best = 0;
    std::string reasons;
    for (PartitionStrategy s : {PartitionStrategy::Tofu, PartitionStrategy::DataParallel, PartitionStrategy::Owt,
                                PartitionStrategy::EqualChop}) {
        BenchRow row = predict_partitioned(model, training, machine, s, ctx);
        if (row.note.empty() && (choice.strategy.empty() || row.step_s < best)) {
            choice.strategy = row.strategy;
            best = row.step_s;
        }
        if (!row.note.empty()) reasons += fmt::format("; {}: {}", row.strategy, row.note);
        choice.rows.push_back(std::move(row));
    }
    TESSERA_CHECK(!choice.strategy.empty(), "--partition auto: no strategy can work on ", machine.devices(),
                  " devices under ", format_bytes(budget), reasons);
    return choice;
}

std::string partition_choice_line(const PartitionChoice &choice) {
    std::string line = "partition auto: predicted step";
    for (const BenchRow &r : choice.rows)
        line += r.note.empty() ? fmt::format(" {} {},", r.strategy, format_duration(r.step_s))
                               : fmt::format(" {} cannot work,", r.strategy);
    line.back() = ';';
    return line + " training with " + choice.strategy;
}

}  // namespace tessera
