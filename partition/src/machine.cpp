#include "tessera/partition/machine.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/error.h"
#include "tessera/input_file.h"
#include "tessera/json_input.h"

namespace tessera {

using json = nlohmann::json;

int Machine::devices() const {
    int n = 1;
    for (const LinkLevel &l : levels) n *= l.count;
    return n;
}

Machine flat_machine(int devices) {
    TESSERA_CHECK(devices >= 1, "the device count must be at least 1, got ", devices);
    return Machine{"flat", {LinkLevel{"device", devices, kDefaultBandwidth, kDefaultLatency}}};
}

Machine cluster_machine(int nodes, int per_node) {
    TESSERA_CHECK(nodes >= 1 && per_node >= 1, "a machine needs at least 1 node of 1 device, got ", nodes,
                  " nodes of ", per_node);
    if (nodes == 1) return flat_machine(per_node);
    Machine m{"cluster", {LinkLevel{"node", nodes, kDefaultNodeBandwidth, kDefaultNodeLatency}}};
    if (per_node > 1) m.levels.push_back(LinkLevel{"device", per_node, kDefaultBandwidth, kDefaultLatency});
    return m;
}

std::vector<int> prime_factors(int n) {
    TESSERA_INTERNAL_ASSERT(n >= 1, "prime_factors of ", n);
    std::vector<int> f;
    for (int p = 2; static_cast<int64_t>(p) * p <= n; p++)
        while (n % p == 0) {
            f.push_back(p);
            n /= p;
        }
    if (n > 1) f.push_back(n);
    return f;
}

std::vector<Cut> machine_cuts(const Machine &m) {
    std::vector<Cut> cuts;
    for (size_t l = 0; l < m.levels.size(); l++)
        for (int p : prime_factors(m.levels[l].count)) cuts.push_back(Cut{p, static_cast<int>(l)});
    return cuts;
}

namespace {

template<typename T>
T number(const json &j, const char *key, const std::string &where) {
    TESSERA_CHECK(j.contains(key), where, ": missing field '", key, "'");
    const json &v = j.at(key);
    TESSERA_CHECK(v.is_number(), where, ": '", key, "' must be a number, got ", json_preview(v));
    return v.get<T>();
}

std::string optional_string(const json &j, const char *key, const std::string &fallback, const std::string &where) {
    if (!j.contains(key)) return fallback;
    TESSERA_CHECK(j.at(key).is_string(), where, ": '", key, "' must be a string, got ", json_preview(j.at(key)));
    return j.at(key).get<std::string>();
}

}  // namespace

Machine machine_from_json_text(const std::string &text, const std::string &source) {
    const json j = parse_json_input(text, source);
    TESSERA_CHECK(j.is_object(), source, ": a machine description must be a JSON object with 'levels'");
    check_known_keys(j, {"name", "levels", "comment"}, source);
    Machine m;
    m.name = optional_string(j, "name", "machine", source);
    TESSERA_CHECK(j.contains("levels") && j.at("levels").is_array() && !j.at("levels").empty(), source,
                  ": 'levels' must be a non-empty list, outermost (slowest links) first, e.g. "
                  "[{\"name\": \"node\", \"count\": 2, \"bandwidth_gbps\": 12.5, \"latency_us\": 10}]");
    int64_t devices = 1;
    for (size_t i = 0; i < j.at("levels").size(); i++) {
        const json &e = j.at("levels")[i];
        std::string where = source + ": levels[" + std::to_string(i) + "]";
        TESSERA_CHECK(e.is_object(), where, ": must be an object");
        LinkLevel l;
        l.name = optional_string(e, "name", "level" + std::to_string(i), where);
        TESSERA_CHECK(e.contains("count") && e.at("count").is_number_integer(), where,
                      ": 'count' must be an integer");
        TESSERA_CHECK(!e.at("count").is_number_unsigned() || e.at("count").get<uint64_t>() <= 65536, where,
                      ": 'count' must be in [1, 65536], got ", json_preview(e.at("count")));
        int64_t count = e.at("count").get<int64_t>();
        TESSERA_CHECK(count >= 1 && count <= 65536, where, ": 'count' must be in [1, 65536], got ", count);
        l.count = static_cast<int>(count);
        check_known_keys(e, {"name", "count", "bandwidth_gbps", "latency_us", "comment"}, where);
        // Bounds a real link keeps (1 MB/s to 100 TB/s; under a second), so
        // that the simulator's times stay finite and positive.
        double gbps = number<double>(e, "bandwidth_gbps", where);
        TESSERA_CHECK(gbps >= 1e-3 && gbps <= 1e5, where, ": 'bandwidth_gbps' must be in [0.001, 100000], got ",
                      gbps);
        l.bandwidth = gbps * 1e9;
        double us = e.contains("latency_us") ? number<double>(e, "latency_us", where) : kDefaultLatency * 1e6;
        TESSERA_CHECK(us >= 0 && us <= 1e6, where, ": 'latency_us' must be in [0, 1000000], got ", us);
        l.latency = us * 1e-6;
        devices *= count;
        TESSERA_CHECK(devices <= 65536, source, ": more than 65536 devices in all");
        m.levels.push_back(l);
    }
    return m;
}

Machine load_machine(const std::string &path) {
    return machine_from_json_text(read_input_file(path, "the machine description", kMaxMachineFileBytes), path);
}

std::string machine_to_json_text(const Machine &m) {
    json levels = json::array();
    for (const LinkLevel &l : m.levels)
        levels.push_back({{"name", l.name},
                          {"count", l.count},
                          {"bandwidth_gbps", l.bandwidth / 1e9},
                          {"latency_us", l.latency * 1e6}});
    return json{{"name", m.name}, {"levels", levels}}.dump(2);
}

std::string machine_str(const Machine &m) {
    std::string s;
    for (const LinkLevel &l : m.levels) {
        bool plural = l.count != 1 && !l.name.empty() && l.name.back() != 's';
        s += (s.empty() ? "" : " x ") + std::to_string(l.count) + " " + l.name + (plural ? "s" : "");
    }
    std::string total = std::to_string(m.devices()) + (m.devices() == 1 ? " device" : " devices");
    return s == total ? s : s + " (" + total + ")";
}

std::string machine_links_str(const Machine &m) {
    std::ostringstream s;
    for (size_t i = 0; i < m.levels.size(); i++)
        s << (i ? ", " : "") << m.levels[i].name << " " << m.levels[i].bandwidth / 1e9 << " GB/s "
          << m.levels[i].latency * 1e6 << " us";
    return s.str();
}

}  // namespace tessera
