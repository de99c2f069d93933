// tessera-train's machine from its launch (train/job_machine.h): the
// placements a multi-node launch gives, made up here so that no MPI and no
// second host are needed; --nodes; --machine FILE and every mismatch error.
#include "tessera/train/job_machine.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "expect_error.h"

namespace tessera {
namespace {

using Placement = Communicator::Placement;
using test::error_of;
using test::expect_error;

// Rank r runs on node node_of[r]; nodes are numbered by their lowest rank, as MPI's are.
std::vector<Placement> placements(const std::vector<int> &node_of) {
    std::map<int, int> size;
    for (int n : node_of) size[n]++;
    std::map<int, int> next;
    std::vector<Placement> p;
    for (int n : node_of) p.push_back(Placement{next[n]++, size[n], n, static_cast<int>(size.size())});
    return p;
}

JobMachine from_launch(const std::vector<int> &node_of, int nodes_flag = 0, const std::string &file = "") {
    return job_machine(job_shape(placements(node_of), nodes_flag), file);
}

// The machine files a test wrote, removed when the test program ends.
struct MachineFiles : ::testing::Environment {
    std::vector<std::string> paths;
    void TearDown() override {
        for (const std::string &p : paths) std::filesystem::remove(p);
    }
};
MachineFiles *const written =
    static_cast<MachineFiles *>(::testing::AddGlobalTestEnvironment(new MachineFiles));

// A machine file in the temporary directory, named for this process and test:
// ctest runs each test case as a process of its own, in parallel.
std::string machine_file(const std::string &name, const std::string &levels) {
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("tessera_job_machine_" + std::to_string(getpid()) + "_" + test + "_" + name))
                                 .string();
    std::ofstream(path) << R"({"name": ")" << name << R"(", "levels": [)" << levels << "]}";
    written->paths.push_back(path);
    return path;
}
const std::string kNode2 = R"({"name": "node", "count": 2, "bandwidth_gbps": 1, "latency_us": 50})";
const std::string kGpu2 = R"({"name": "gpu", "count": 2, "bandwidth_gbps": 100, "latency_us": 2})";

TEST(JobMachine, OneNodeIsFlat) {
    JobMachine m = from_launch({0, 0, 0, 0});
    EXPECT_EQ(m.machine, flat_machine(4));
    EXPECT_EQ(m.description, "machine 4 devices from the launch: one node (4 ranks) | links device 25 GB/s 5 us");
    EXPECT_EQ(from_launch({0}).machine, flat_machine(1));
}

TEST(JobMachine, NodesOfConsecutiveRanksAreTheOuterLevel) {
    JobMachine m = from_launch({0, 0, 1, 1});
    EXPECT_EQ(m.machine, cluster_machine(2, 2));
    EXPECT_EQ(m.description, "machine 2 nodes x 2 devices (4 devices) from the launch: 2 nodes of 2 ranks | links "
                             "node 12.5 GB/s 10 us, device 25 GB/s 5 us");
    EXPECT_EQ(from_launch({0, 1, 2}).machine, cluster_machine(3, 1));
}

TEST(JobMachine, OtherPlacementsPlanFlatSayingWhy) {
    JobShape uneven = job_shape(placements({0, 0, 0, 1}), 0);
    EXPECT_EQ(uneven.nodes, 1);
    EXPECT_EQ(uneven.flat_why, "its 2 nodes hold different numbers of ranks (node 0: 3, node 1: 1)");
    EXPECT_EQ(job_machine(uneven, "").machine, flat_machine(4));
    EXPECT_NE(job_machine(uneven, "").description.find("4 ranks planned flat: its 2 nodes hold"), std::string::npos);
    JobShape dealt = job_shape(placements({0, 1, 0, 1}), 0);
    EXPECT_EQ(dealt.flat_why, "rank 1 runs on node 1, not node 0: a node's ranks are not consecutive (mpirun "
                              "--map-by slot, or srun --distribution=block, places them so)");
    EXPECT_EQ(job_machine(dealt, "").machine, flat_machine(4));
}

TEST(JobMachine, DeclaredNodesGroupConsecutiveRanks) {
    JobMachine m = from_launch({0, 0, 0, 0, 0, 0}, 3);
    EXPECT_EQ(m.machine, cluster_machine(3, 2));
    EXPECT_NE(m.description.find("from --nodes 3: pretend nodes of 2 consecutive ranks"), std::string::npos);
    EXPECT_EQ(from_launch({0, 0, 0, 0}, 1).machine, flat_machine(4));
    // A declaration stands even where the launch's nodes would not make a grid.
    EXPECT_EQ(from_launch({0, 1, 0, 1}, 2).machine, cluster_machine(2, 2));
    EXPECT_EQ(error_of([] { from_launch({0, 0, 0, 0}, 3); }),
              "--nodes 3: the job's 4 ranks do not split into 3 nodes of the same size; give a --nodes that divides 4");
    expect_error([] { from_launch({0}, 2); }, "--nodes 2: the job's 1 rank does not split into 2 nodes");
}

TEST(JobMachine, FileGivesTheLevelsAndSpeeds) {
    const std::string two = machine_file("2x2.json", kNode2 + "," + kGpu2);
    JobMachine pretend = from_launch({0, 0, 0, 0}, 2, two);
    EXPECT_EQ(pretend.machine, load_machine(two));
    EXPECT_EQ(pretend.description, "machine 2 nodes x 2 gpus (4 devices) from --machine " + two +
                                       ", --nodes 2: pretend nodes of 2 consecutive ranks | links node 1 GB/s 50 us, "
                                       "gpu 100 GB/s 2 us");
    EXPECT_EQ(from_launch({0, 0, 1, 1}, 0, two).machine, load_machine(two));
    const std::string flat = machine_file("4.json", R"({"name": "gpu", "count": 4, "bandwidth_gbps": 50})");
    EXPECT_EQ(from_launch({0, 0, 0, 0}, 0, flat).machine, load_machine(flat));
    // One rank per node: the node level alone.
    const std::string nodes = machine_file("4n.json", R"({"name": "node", "count": 4, "bandwidth_gbps": 10})");
    EXPECT_EQ(from_launch({0, 1, 2, 3}, 0, nodes).machine, load_machine(nodes));
}

TEST(JobMachine, FileMismatchesNameBothNumbers) {
    const std::string two = machine_file("2x2.json", kNode2 + "," + kGpu2);
    EXPECT_EQ(error_of([&] { from_launch({0, 0, 0, 0, 0, 0, 0, 0}, 0, two); }),
              "--machine " + two + " describes 2 nodes x 2 gpus (4 devices), but this job has 8 ranks");
    EXPECT_EQ(error_of([&] { from_launch({0, 0, 0, 0}, 0, two); }),
              "--machine " + two + " describes 2 nodes x 2 gpus (4 devices): 2 at its outermost level, but this "
              "job runs on one node (4 ranks); to plan on its levels anyway (on one host too), group the ranks into "
              "nodes of consecutive ranks with --nodes 2");
    EXPECT_EQ(error_of([&] { from_launch({0, 0, 0, 0}, 4, two); }),
              "--machine " + two + " describes 2 nodes x 2 gpus (4 devices): 2 at its outermost level, but this "
              "job runs on 4 nodes of 1 rank (--nodes 4); describe its nodes as the outermost level");
    const std::string flat = machine_file("4.json", R"({"name": "gpu", "count": 4, "bandwidth_gbps": 50})");
    expect_error([&] { from_launch({0, 0, 1, 1}, 0, flat); },
                 "describes 4 gpus (4 devices): 4 at its outermost level, but this job runs on 2 nodes of 2 ranks");
    expect_error([&] { from_launch({0, 0, 0, 1}, 0, two); }, "this job runs on 4 ranks planned flat: its 2 nodes");
    expect_error([&] { from_launch({0, 0, 0, 0}, 2, "/nonexistent/m.json"); },
                 "cannot read the machine description '/nonexistent/m.json'");
}

}  // namespace
}  // namespace tessera
