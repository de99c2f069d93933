// The partitioner's benchmarks:
//   1. search time of the Tofu recursion for WResNet-152 width 10 (training
//      graph) at 8 and 64 devices, the median of several runs;
//   2. Tofu against data parallelism and "one weird trick" (and EqualChop) at 8
//      devices, with the same cost model: communication bytes per iteration and
//      memory per device, for WResNet-152 at widths 4, 6, 8, 10 and Tofu's LSTMs.
// Usage: tessera-bench-partition [--quick] [--repeats N]
// --quick runs the smallest configuration of each part (CI smoke test).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessera/error.h"
#include "tessera/partition/partition.h"
#include "tessera/pipeline/run_plan.h"

using namespace tessera;

namespace {

struct Config {
    std::string spec;
    int64_t batch;
};

std::string gib(int64_t b) { return fmt::format("{:.2f}", static_cast<double>(b) / (1 << 30)); }

double median_search_time(const Graph &g, int devices, int repeats) {
    std::vector<double> t;
    for (int r = 0; r < repeats; r++) t.push_back(partition(g, flat_machine(devices)).search_time_s);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
    bool quick = false;
    int repeats = 5;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--quick") quick = true;
        else if (a == "--repeats" && i + 1 < argc) repeats = std::max(1, std::atoi(argv[++i]));
        else {
            std::fprintf(stderr, "usage: %s [--quick] [--repeats N]\n", argv[0]);
            return 2;
        }
    }
    try {
        const Config search_model{quick ? "wresnet:depth=50,width=2" : "wresnet:depth=152,width=10", 32};
        Graph g = build_training_graph(search_model.spec, search_model.batch);
        fmt::print("## Search time: {} (training graph, {} nodes), batch {}\n\n", search_model.spec, g.num_nodes(),
                   search_model.batch);
        fmt::print("| devices | median search time (s) | bar |\n| --- | --- | --- |\n");
        for (auto [devices, bar] : {std::pair{8, 1.0}, std::pair{64, 10.0}}) {
            double t = median_search_time(g, devices, repeats);
            fmt::print("| {} | {:.3f} | < {:.0f} s: {} |\n", devices, t, bar, t < bar ? "met" : "NOT MET");
        }

        std::vector<Config> models;
        if (quick) {
            models = {{"wresnet:depth=50,width=2", 32}, {"lstm:layers=2,hidden=512,seq=8", 32}};
        } else {
            for (int w : {4, 6, 8, 10}) models.push_back({fmt::format("wresnet:depth=152,width={}", w), 32});
            for (int layers : {6, 8, 10})
                for (int hidden : {4096, 6144, 8192})
                    models.push_back({fmt::format("lstm:layers={},hidden={},seq=20", layers, hidden), 64});
        }
        const int devices = 8;
        fmt::print("\n## Against the baselines at {} devices (same cost model)\n\n", devices);
        fmt::print("Communication in GiB per iteration, summed over devices; memory in GiB per device "
                   "(weights + gradients + optimizer state + peak activations + comm buffers).\n\n");
        fmt::print("| model | batch | tofu comm | data comm | owt comm | equalchop comm | data/tofu | owt/tofu | "
                   "tofu mem | data mem | owt mem | tofu <= all |\n");
        fmt::print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
        bool all_ok = true;
        for (const Config &c : models) {
            Graph mg = build_training_graph(c.spec, c.batch);
            std::vector<Plan> plans;
            for (auto s : {PartitionStrategy::Tofu, PartitionStrategy::DataParallel, PartitionStrategy::Owt,
                           PartitionStrategy::EqualChop}) {
                PartitionOptions o;
                o.strategy = s;
                o.model = c.spec;
                plans.push_back(partition(mg, flat_machine(devices), o));
            }
            bool ok = true;
            for (const Plan &p : plans) ok = ok && plans[0].comm_bytes <= p.comm_bytes;
            all_ok = all_ok && ok;
            auto ratio = [&](const Plan &p) {
                return plans[0].comm_bytes == 0 ? 0.0
                                                : static_cast<double>(p.comm_bytes) / static_cast<double>(plans[0].comm_bytes);
            };
            fmt::print("| {} | {} | {} | {} | {} | {} | {:.2f} | {:.2f} | {} | {} | {} | {} |\n", c.spec, c.batch,
                       gib(plans[0].comm_bytes), gib(plans[1].comm_bytes), gib(plans[2].comm_bytes),
                       gib(plans[3].comm_bytes), ratio(plans[1]), ratio(plans[2]), gib(plans[0].per_device_peak_bytes),
                       gib(plans[1].per_device_peak_bytes), gib(plans[2].per_device_peak_bytes), ok ? "yes" : "NO");
        }
        fmt::print("\nTofu's communication is at most every baseline's on every model: {}\n", all_ok ? "yes" : "NO");
        return all_ok ? 0 : 1;
    } catch (const Error &e) {
        std::fprintf(stderr, "tessera-bench-partition: error: %s\n", e.what());
        return 1;
    }
}
