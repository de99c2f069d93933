// The machine description: prime factoring of level counts, the order of the
// recursion's cuts, the JSON format (round trip and every user error), and the
// one-line summary; the machine of a job over nodes.
#include "tessera/partition/machine.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "expect_error.h"
#include "tessera/error.h"

namespace tessera {
namespace {

using test::expect_error;

bool is_prime_by_trial_division(int n) {
    if (n < 2) return false;
    for (int d = 2; d < n; d++)
        if (n % d == 0) return false;
    return true;
}

// The factor list of n must multiply back to n, contain only primes, and be ascending.
void check_factors(int n) {
    std::vector<int> f = prime_factors(n);
    int64_t product = 1;
    for (size_t i = 0; i < f.size(); i++) {
        EXPECT_TRUE(is_prime_by_trial_division(f[i])) << n << ": factor " << f[i] << " is not prime";
        if (i > 0) {
            EXPECT_LE(f[i - 1], f[i]) << n << ": factors not ascending";
        }
        product *= f[i];
    }
    EXPECT_EQ(product, n) << n << ": factors do not multiply back";
}

TEST(PrimeFactors, NamedCases) {
    EXPECT_EQ(prime_factors(1), std::vector<int>{});
    EXPECT_EQ(prime_factors(2), std::vector<int>{2});
    EXPECT_EQ(prime_factors(12), (std::vector<int>{2, 2, 3}));
    EXPECT_EQ(prime_factors(97), std::vector<int>{97});
    EXPECT_EQ(prime_factors(64), (std::vector<int>{2, 2, 2, 2, 2, 2}));
    EXPECT_EQ(prime_factors(2 * 3 * 5 * 7), (std::vector<int>{2, 3, 5, 7}));
    for (int n : {1, 2, 12, 97, 64, 2 * 3 * 5 * 7}) check_factors(n);
}

TEST(PrimeFactors, AgreesWithTrialDivisionUpTo3000) {
    for (int n = 1; n <= 3000; n++) check_factors(n);
}

TEST(PrimeFactors, LargeValues) {
    // A prime whose square overflows int, and a square of a prime.
    EXPECT_EQ(prime_factors(2147483647), std::vector<int>{2147483647});
    EXPECT_EQ(prime_factors(65521 * 2), (std::vector<int>{2, 65521}));
    EXPECT_EQ(prime_factors(46337 * 46337), (std::vector<int>{46337, 46337}));
    EXPECT_EQ(prime_factors(65536), std::vector<int>(16, 2));
}

Machine two_level() {
    return Machine{"cluster",
                   {LinkLevel{"node", 2, 12.5e9, 10e-6}, LinkLevel{"gpu", 8, 300e9, 2e-6}}};
}

TEST(MachineCuts, TwoLevelOutermostFirst) {
    Machine m = two_level();
    EXPECT_EQ(m.devices(), 16);
    std::vector<Cut> cuts = machine_cuts(m);
    ASSERT_EQ(cuts.size(), 4u);
    std::vector<int> ks, links;
    for (const Cut &c : cuts) {
        ks.push_back(c.k);
        links.push_back(c.link);
    }
    EXPECT_EQ(ks, (std::vector<int>{2, 2, 2, 2}));
    EXPECT_EQ(links, (std::vector<int>{0, 1, 1, 1}));
}

TEST(MachineCuts, MixedPrimesPerLevel) {
    // 3 nodes x 6 gpus: 3 | 2, 3; each level's factors smallest first.
    Machine m{"m", {LinkLevel{"node", 3, 1e9, 0}, LinkLevel{"gpu", 6, 1e9, 0}}};
    EXPECT_EQ(machine_cuts(m), (std::vector<Cut>{{3, 0}, {2, 1}, {3, 1}}));
}

TEST(MachineCuts, FlatTwelve) {
    Machine m = flat_machine(12);
    EXPECT_EQ(m.devices(), 12);
    ASSERT_EQ(m.levels.size(), 1u);
    EXPECT_EQ(m.levels[0].bandwidth, kDefaultBandwidth);
    EXPECT_EQ(m.levels[0].latency, kDefaultLatency);
    EXPECT_EQ(machine_cuts(m), (std::vector<Cut>{{2, 0}, {2, 0}, {3, 0}}));
    // The product of the cuts is the device count.
    int product = 1;
    for (const Cut &c : machine_cuts(m)) product *= c.k;
    EXPECT_EQ(product, 12);
}

TEST(MachineCuts, OneDeviceHasNoCuts) {
    EXPECT_TRUE(machine_cuts(flat_machine(1)).empty());
    // A level of count 1 contributes no cut, but later levels keep their index.
    Machine m{"m", {LinkLevel{"node", 1, 1e9, 0}, LinkLevel{"gpu", 4, 1e9, 0}}};
    EXPECT_EQ(machine_cuts(m), (std::vector<Cut>{{2, 1}, {2, 1}}));
}

TEST(FlatMachine, RejectsNonPositive) {
    expect_error([] { flat_machine(0); }, "the device count must be at least 1, got 0");
    expect_error([] { flat_machine(-4); }, "got -4");
}

TEST(ClusterMachine, NodesOutermostAtTheNetworkDefaults) {
    Machine m = cluster_machine(2, 4);
    ASSERT_EQ(m.levels.size(), 2u);
    EXPECT_EQ(m.levels[0], (LinkLevel{"node", 2, kDefaultNodeBandwidth, kDefaultNodeLatency}));
    EXPECT_EQ(m.levels[1], (LinkLevel{"device", 4, kDefaultBandwidth, kDefaultLatency}));
    EXPECT_LT(kDefaultNodeBandwidth, kDefaultBandwidth);  // the slow links are the nodes'
    EXPECT_EQ(machine_cuts(m), (std::vector<Cut>{{2, 0}, {2, 1}, {2, 1}}));
    // 3 nodes of 2: the first cut is 3 over the nodes, where a flat 6 would cut 2 first.
    EXPECT_EQ(machine_cuts(cluster_machine(3, 2)), (std::vector<Cut>{{3, 0}, {2, 1}}));
    EXPECT_EQ(machine_str(m), "2 nodes x 4 devices (8 devices)");
    EXPECT_EQ(machine_links_str(m), "node 12.5 GB/s 10 us, device 25 GB/s 5 us");
}

TEST(ClusterMachine, OneNodeIsFlatAndOneDevicePerNodeIsTheNetwork) {
    EXPECT_EQ(cluster_machine(1, 6), flat_machine(6));
    Machine m = cluster_machine(4, 1);
    ASSERT_EQ(m.levels.size(), 1u);
    EXPECT_EQ(m.levels[0], (LinkLevel{"node", 4, kDefaultNodeBandwidth, kDefaultNodeLatency}));
    expect_error([] { cluster_machine(0, 2); }, "at least 1 node of 1 device, got 0 nodes of 2");
}

bool close(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)); }

TEST(MachineJson, RoundTrip) {
    Machine m = two_level();
    std::string text = machine_to_json_text(m);
    Machine back = machine_from_json_text(text, "roundtrip.json");
    EXPECT_EQ(back.name, m.name);
    ASSERT_EQ(back.levels.size(), m.levels.size());
    for (size_t i = 0; i < m.levels.size(); i++) {
        EXPECT_EQ(back.levels[i].name, m.levels[i].name);
        EXPECT_EQ(back.levels[i].count, m.levels[i].count);
        EXPECT_TRUE(close(back.levels[i].bandwidth, m.levels[i].bandwidth))
            << back.levels[i].bandwidth << " vs " << m.levels[i].bandwidth;
        EXPECT_TRUE(close(back.levels[i].latency, m.levels[i].latency))
            << back.levels[i].latency << " vs " << m.levels[i].latency;
    }
    // A second trip is stable.
    EXPECT_EQ(machine_to_json_text(back), machine_to_json_text(machine_from_json_text(machine_to_json_text(back), "x")));
}

TEST(MachineJson, ParsesUnitsAndDefaults) {
    Machine m = machine_from_json_text(
        R"({"levels": [{"count": 4, "bandwidth_gbps": 12.5, "latency_us": 10}, {"name": "gpu", "count": 2, "bandwidth_gbps": 100}]})",
        "m.json");
    EXPECT_EQ(m.name, "machine");
    ASSERT_EQ(m.levels.size(), 2u);
    EXPECT_EQ(m.levels[0].name, "level0");
    EXPECT_EQ(m.levels[0].count, 4);
    EXPECT_TRUE(close(m.levels[0].bandwidth, 12.5e9));
    EXPECT_TRUE(close(m.levels[0].latency, 10e-6));
    EXPECT_EQ(m.levels[1].name, "gpu");
    EXPECT_TRUE(close(m.levels[1].bandwidth, 100e9));
    EXPECT_TRUE(close(m.levels[1].latency, kDefaultLatency));  // absent latency: the default
    EXPECT_EQ(m.devices(), 8);
}

TEST(MachineJson, ZeroLatencyAllowed) {
    Machine m = machine_from_json_text(R"({"levels": [{"count": 2, "bandwidth_gbps": 1, "latency_us": 0}]})", "z");
    EXPECT_EQ(m.levels[0].latency, 0);
}

TEST(MachineJson, MaximumDevicesAllowed) {
    Machine m = machine_from_json_text(
        R"({"levels": [{"count": 256, "bandwidth_gbps": 1}, {"count": 256, "bandwidth_gbps": 1}]})", "big.json");
    EXPECT_EQ(m.devices(), 65536);
}

// Each user error names the source and the field.
TEST(MachineJson, Errors) {
    auto parse = [](const std::string &text) { return [text] { machine_from_json_text(text, "cluster.json"); }; };
    expect_error(parse("{levels: "), "cluster.json: not valid JSON");
    expect_error(parse(""), "cluster.json: not valid JSON");
    expect_error(parse("[1, 2]"), "cluster.json: a machine description must be a JSON object with 'levels'");
    expect_error(parse("\"node\""), "must be a JSON object");
    expect_error(parse(R"({"name": "x"})"), "cluster.json: 'levels' must be a non-empty list");
    expect_error(parse(R"({"levels": []})"), "'levels' must be a non-empty list");
    expect_error(parse(R"({"levels": {"count": 2}})"), "'levels' must be a non-empty list");
    expect_error(parse(R"({"levels": [3]})"), "cluster.json: levels[0]: must be an object");

    const std::string bw = R"("bandwidth_gbps": 10)";
    expect_error(parse(R"({"levels": [{)" + bw + "}]}"), "cluster.json: levels[0]: 'count' must be an integer");
    expect_error(parse(R"({"levels": [{"count": 2.5, )" + bw + "}]}"), "levels[0]: 'count' must be an integer");
    expect_error(parse(R"({"levels": [{"count": "2", )" + bw + "}]}"), "'count' must be an integer");
    expect_error(parse(R"({"levels": [{"count": 0, )" + bw + "}]}"), "levels[0]: 'count' must be in [1, 65536], got 0");
    expect_error(parse(R"({"levels": [{"count": -3, )" + bw + "}]}"), "'count' must be in [1, 65536], got -3");
    expect_error(parse(R"({"levels": [{"count": 2, )" + bw + R"(}, {"count": 0, )" + bw + "}]}"),
                 "levels[1]: 'count' must be in [1, 65536], got 0");

    expect_error(parse(R"({"levels": [{"count": 2}]})"), "cluster.json: levels[0]: missing field 'bandwidth_gbps'");
    expect_error(parse(R"({"levels": [{"count": 2, "bandwidth_gbps": 0}]})"),
                 "levels[0]: 'bandwidth_gbps' must be in [0.001, 100000], got 0");
    expect_error(parse(R"({"levels": [{"count": 2, "bandwidth_gbps": -1.5}]})"), "'bandwidth_gbps' must be in");
    // Absurd links once gave negative step times.
    expect_error(parse(R"({"levels": [{"count": 2, "bandwidth_gbps": 1e-300}]})"),
                 "'bandwidth_gbps' must be in [0.001, 100000], got 1e-300");
    expect_error(parse(R"({"levels": [{"count": 2, "bandwidth_gbps": 1e308}]})"), "'bandwidth_gbps' must be in");
    expect_error(parse(R"({"levels": [{"count": 2, "bandwidth_gbps": 1, "latency_us": 1e300}]})"),
                 "levels[0]: 'latency_us' must be in [0, 1000000], got 1e+300");
    // A misspelt field is named, not ignored.
    expect_error(parse(R"({"levels": [{"count": 2, "bandwidth_gbps": 1, "latency": 5}]})"),
                 "cluster.json: levels[0]: unknown field 'latency' (expected name, count, bandwidth_gbps, latency_us, "
                 "comment)");
    expect_error(parse(R"({"level": [], "levels": [{"count": 2, "bandwidth_gbps": 1}]})"),
                 "cluster.json: unknown field 'level' (expected name, levels, comment)");
    expect_error(parse(R"({"levels": [{"count": 2, "bandwidth_gbps": "fast"}]})"),
                 "levels[0]: 'bandwidth_gbps' must be a number, got \"fast\"");
    expect_error(parse(R"({"levels": [{"count": 2, "bandwidth_gbps": null}]})"), "'bandwidth_gbps' must be a number");

    expect_error(parse(R"({"levels": [{"count": 2, "bandwidth_gbps": 1, "latency_us": -1}]})"),
                 "levels[0]: 'latency_us' must be in [0, 1000000], got -1");
    expect_error(parse(R"({"levels": [{"count": 2, "bandwidth_gbps": 1, "latency_us": "slow"}]})"),
                 "'latency_us' must be a number");

    expect_error(parse(R"({"levels": [{"count": 65536, )" + bw + R"(}, {"count": 2, )" + bw + "}]}"),
                 "cluster.json: more than 65536 devices in all");
    expect_error(parse(R"({"levels": [{"count": 65537, )" + bw + "}]}"), "'count' must be in [1, 65536], got 65537");
}

// Names of the wrong type are user errors too and must surface as tessera::Error,
// not as the JSON library's own exception.
TEST(MachineJson, NonStringNamesAreUserErrors) {
    auto parse = [](const std::string &text) { return [text] { machine_from_json_text(text, "cluster.json"); }; };
    expect_error(parse(R"({"name": 3, "levels": [{"count": 2, "bandwidth_gbps": 1}]})"), "cluster.json");
    expect_error(parse(R"({"levels": [{"name": 7, "count": 2, "bandwidth_gbps": 1}]})"), "cluster.json: levels[0]");
}

// A number too large for a double is rejected by the JSON parser with an
// exception other than its parse error; it is still the file's fault.
TEST(MachineJson, NumberOverflowIsAUserError) {
    expect_error([] { machine_from_json_text(R"({"levels": [{"count": 2, "bandwidth_gbps": 1e400}]})", "cluster.json"); },
                 "cluster.json");
}

// A count beyond int64 must be reported as written, not wrapped to a negative number.
TEST(MachineJson, HugeCountIsReportedAsWritten) {
    expect_error(
        [] {
            machine_from_json_text(R"({"levels": [{"count": 18446744073709551615, "bandwidth_gbps": 1}]})",
                                   "cluster.json");
        },
        "'count' must be in [1, 65536], got 18446744073709551615");
}

TEST(LoadMachine, MissingFileNamesThePath) {
    std::string path = (std::filesystem::temp_directory_path() / "tessera_no_such_machine_dir/cluster.json").string();
    expect_error([&] { load_machine(path); }, "cannot read the machine description '" + path + "'");
}

TEST(LoadMachine, ReadsFileAndNamesItInErrors) {
    auto dir = std::filesystem::temp_directory_path() /
               ("tessera_machine_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
    std::filesystem::create_directories(dir);
    std::string good = (dir / "good.json").string(), bad = (dir / "bad.json").string();
    {
        std::ofstream(good) << machine_to_json_text(two_level());
        std::ofstream(bad) << R"({"levels": [{"count": 2}]})";
    }
    Machine m = load_machine(good);
    EXPECT_EQ(m.devices(), 16);
    EXPECT_EQ(m.levels[1].name, "gpu");
    expect_error([&] { load_machine(bad); }, bad + ": levels[0]: missing field 'bandwidth_gbps'");
    std::filesystem::remove_all(dir);
}

TEST(MachineStr, Format) {
    EXPECT_EQ(machine_str(two_level()), "2 nodes x 8 gpus (16 devices)");
    EXPECT_EQ(machine_str(flat_machine(4)), "4 devices");
    EXPECT_EQ(machine_str(flat_machine(1)), "1 device");
}

}  // namespace
}  // namespace tessera
