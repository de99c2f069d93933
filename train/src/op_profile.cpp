#include "tessera/train/op_profile.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "tessera/predict/roofline.h"

namespace tessera {

namespace {

struct Row {
    std::string what;
    int count = 0;
    double seconds = 0, flops = 0, bytes = 0;
};

// What a node is in the report: its operator, or the collective it runs.
std::string node_kind(const Node &n) {
    if (n.comm) return "communication";
    return op_name(n.call.kind);
}

std::string rates(const Row &r) {
    if (r.seconds <= 0) return fmt::format("{:>10} {:>9}", "-", "-");
    return fmt::format("{:>10.1f} {:>9.1f}", r.flops / r.seconds / 1e9, r.bytes / r.seconds / 1e9);
}

std::string table(const std::vector<Row> &rows, double total, const char *first_column) {
    std::string out = fmt::format("{:<40} {:>6} {:>11} {:>7} {:>10} {:>9}\n", first_column, "count", "time ms",
                                  "share", "GFLOP/s", "GB/s");
    for (const Row &r : rows)
        out += fmt::format("{:<40} {:>6} {:>11.3f} {:>6.1f}% {}\n", r.what, r.count, r.seconds * 1e3,
                           total > 0 ? 100 * r.seconds / total : 0.0, rates(r));
    return out;
}

}  // namespace

std::string op_profile_report(const Graph &g, const std::vector<NodeId> &order, const std::vector<double> &node_time_s,
                              const std::string &device, int top) {
    std::map<std::string, Row> kinds;
    std::vector<Row> nodes;
    double total = 0;
    for (NodeId n : order) {
        const Node &node = g.node(n);
        Row r{node.call.name, 1, node_time_s[n], node_flops(g, n), node_bytes(g, n)};
        const std::string kind = node_kind(node);
        Row &k = kinds[kind];
        k.what = kind;
        k.count++;
        k.seconds += r.seconds;
        k.flops += r.flops;
        k.bytes += r.bytes;
        total += r.seconds;
        nodes.push_back(std::move(r));
    }
    std::vector<Row> by_kind;
    for (auto &[name, row] : kinds) by_kind.push_back(row);
    auto slower = [](const Row &a, const Row &b) { return a.seconds > b.seconds; };
    std::stable_sort(by_kind.begin(), by_kind.end(), slower);
    std::stable_sort(nodes.begin(), nodes.end(), slower);
    nodes.resize(std::min(nodes.size(), static_cast<size_t>(top)));
    return fmt::format("operator profile on {}: {} operators, {:.3f} ms in all (each timed alone: the sum, not the "
                       "step, which overlaps copies and communication)\n"
                       "rates: the operators' floating-point operations and the bytes they read and write, over "
                       "their time\n\n",
                       device, order.size(), total * 1e3) +
           table(by_kind, total, "operator") + fmt::format("\nthe {} slowest operators\n", nodes.size()) +
           table(nodes, total, "node");
}

}  // namespace tessera
