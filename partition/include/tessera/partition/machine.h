// The machine a plan is for: a hierarchy of link levels, outermost (slowest)
// first. "2 nodes of 8 GPUs" is two levels: {node, 2, network bandwidth} and
// {gpu, 8, NVLink bandwidth}. The device count is the product of the counts.
//
// The recursion cuts the outermost level first, so its communication, which
// moves the most bytes per device pair, crosses the fewest slow links... and
// the predicted time charges each level's bytes at that level's bandwidth.
#pragma once

#include <string>
#include <vector>

namespace tessera {

struct LinkLevel {
    std::string name;          // "node", "gpu"
    int count = 1;             // parts at this level
    double bandwidth = 0;      // bytes/s each device can receive over this link
    double latency = 0;        // seconds per message step (alpha)
    bool operator==(const LinkLevel &) const = default;
};

struct Machine {
    std::string name;
    std::vector<LinkLevel> levels;  // outermost first
    int devices() const;
    bool operator==(const Machine &) const = default;
};

// One cut of the recursion: split k ways over the links of machine level `link`.
struct Cut {
    int k = 1;
    int link = 0;
    bool operator==(const Cut &) const = default;
};

// N devices on one level of links with the default bandwidth and latency below.
Machine flat_machine(int devices);
inline constexpr double kDefaultBandwidth = 25e9;  // bytes/s, a PCIe-4 x16-class link
inline constexpr double kDefaultLatency = 5e-6;    // seconds

// A job of `nodes` hosts of `per_node` devices each: the network between the
// nodes outermost, at the defaults below (the node level of
// configs/machines/2x8-nvlink.json), then the devices of a node at the flat
// machine's defaults. One node gives flat_machine(per_node) exactly; one
// device per node, the node level alone.
Machine cluster_machine(int nodes, int per_node);
inline constexpr double kDefaultNodeBandwidth = 12.5e9;  // bytes/s, a 100 Gb/s network link
inline constexpr double kDefaultNodeLatency = 10e-6;     // seconds

// The cuts, outermost level first; each level's count factored into primes,
// smallest first. 16 = 2 nodes x 8 GPUs gives 2 | 2, 2, 2.
std::vector<Cut> machine_cuts(const Machine &m);

// JSON: {"name": "...", "levels": [{"name": "node", "count": 2,
// "bandwidth_gbps": 12.5, "latency_us": 10}, ...]}. Bandwidth is in GB/s
// (1e9 bytes/s). Errors name the file and the field.
Machine machine_from_json_text(const std::string &text, const std::string &source);
Machine load_machine(const std::string &path);
std::string machine_to_json_text(const Machine &m);
std::string machine_str(const Machine &m);  // "2 node x 8 gpu (16 devices)"
std::string machine_links_str(const Machine &m);  // "node 12.5 GB/s 10 us, gpu 150 GB/s 3 us"

// Prime factors of n >= 1, ascending (1 gives an empty list).
std::vector<int> prime_factors(int n);

}  // namespace tessera
