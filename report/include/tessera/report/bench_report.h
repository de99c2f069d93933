// tessera-bench's reports: its rows as a table or as JSON. Both hold only
// what was predicted (no timings of the run itself), so the same inputs give
// the same bytes.
#pragma once

#include <string>
#include <vector>

#include "tessera/predict/step_predictor.h"

namespace tessera {

// What a report says it was made for.
struct BenchHeader {
    std::string mode;      // scaling, models or budgets
    std::string model;     // scaling: the model's spec; models: the family
    std::string machine;   // machine_str of the machine, or of the file's with counts scaled
    std::string links;     // machine_links_str
    std::string roofline;  // the roofline preset's name
    int64_t batch = 0;
    std::string precision = "fp32";  // graph/precision.h's name
    int64_t device_mem = 0;  // per device; 0: unlimited
};

// A row's "Tofu over the best alternative" (models mode): the best other
// partitioned strategy's step over Tofu's, per model.
struct TofuAdvantage {
    std::string model;
    std::string best_alternative;
    double ratio = 0;  // > 1: Tofu is faster
};

// Per model in `rows` with a tofu row and at least one other partitioned row
// (not "single"), in the order the models first appear.
std::vector<TofuAdvantage> tofu_advantages(const std::vector<BenchRow> &rows);

// "778K", "41.5K", "9993": samples per second as the reports print them.
std::string samples_rate(double samples_per_s);

std::string bench_table(const BenchHeader &h, const std::vector<BenchRow> &rows);
std::string bench_json(const BenchHeader &h, const std::vector<BenchRow> &rows);
// One self-contained page (bench_html.cpp): the throughput plot of the mode
// (against devices, model or budget; a line per strategy or policy), every
// row's step as stacked bars, and the table.
std::string bench_html(const BenchHeader &h, const std::vector<BenchRow> &rows);

}  // namespace tessera
