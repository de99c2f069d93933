// Fused collectives (lower.h, fuse_collectives): each rank's graph lowered
// with buckets against the same plan lowered without. Checked here without
// running: every tensor still produced, the bytes unchanged, buckets of the
// size asked for, each bucket issued right after its last member's tensor is
// made, and ranks agreeing on every bucket. That fused results equal unfused
// ones bit for bit is checked under mpirun (tests/mpi) and in the
// communicator's tests.
#include <algorithm>
#include <map>

#include <gtest/gtest.h>

#include "expect_error.h"
#include "tessera/graph/comm_attrs.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"
#include "tessera/partition/lower.h"
#include "tessera/partition/partition.h"
#include "zoo_training_graph.h"

namespace tessera {
namespace {

Graph training_graph(const std::string &spec, int64_t batch) { return test::zoo_training_graph(spec, batch); }

Plan plan_with_buckets(const Graph &g, int devices, PartitionStrategy s, int64_t bucket_bytes) {
    PartitionOptions o;
    o.strategy = s;
    o.executable = true;
    o.bucket_bytes = bucket_bytes;
    return partition(g, flat_machine(devices), o);
}

struct CommSummary {
    int nodes = 0;               // communication nodes
    int64_t bytes = 0;           // their "bytes" summed
    std::vector<std::string> members;  // every member's output tensor, sorted
};

CommSummary summarize(const Graph &g) {
    CommSummary s;
    for (const Node &n : g.nodes()) {
        if (!n.comm) continue;
        s.nodes++;
        s.bytes += read_comm_attrs(n.call, g.tensor(n.inputs[0]).type.rank()).bytes;
        for (TensorId t : n.outputs) s.members.push_back(g.tensor(t).name);
    }
    std::sort(s.members.begin(), s.members.end());
    return s;
}

int64_t gradient_bytes(const Graph &g) {
    int64_t sum = 0;
    for (const TensorInfo &t : g.tensors())
        if (t.role == TensorRole::Param) sum += t.type.bytes();
    return sum;
}

const char *kModels[] = {"mlp:hidden=64", "cnn:channels=4,hidden=16", "lstm:hidden=32,seq=4,vocab=50",
                         "transformer:layers=2,d_model=32,heads=2,seq=8,vocab=50",
                         "wresnet:depth=18,base=4,image=8"};

// Buckets change how many collectives run, not what is sent: every tensor a
// collective made alone is made by some collective fused, with the same bytes.
TEST(Fuse, BucketsKeepEveryTensorAndEveryByte) {
    for (const char *spec : kModels) {
        const Graph g = training_graph(spec, 16);
        for (int n : {2, 4})
            for (auto s : {PartitionStrategy::DataParallel, PartitionStrategy::Tofu}) {
                const Plan alone = plan_with_buckets(g, n, s, 0), fused = plan_with_buckets(g, n, s, 1 << 12);
                EXPECT_EQ(alone.rank_comm_bytes, fused.rank_comm_bytes) << spec;
                for (int r = 0; r < n; r++) {
                    const DeviceGraph a = lower(g, alone, r), f = lower(g, fused, r);
                    const CommSummary sa = summarize(a.graph), sf = summarize(f.graph);
                    const std::string where = std::string(spec) + " " + alone.strategy + " n=" +
                                              std::to_string(n) + " rank " + std::to_string(r);
                    EXPECT_EQ(sf.members, sa.members) << where;
                    EXPECT_EQ(sf.bytes, sa.bytes) << where;
                    EXPECT_EQ(sf.bytes, a.comm_bytes) << where;
                    EXPECT_LE(sf.nodes, sa.nodes) << where;
                    EXPECT_EQ(f.comm_nodes, sf.nodes) << where;
                    EXPECT_EQ(a.graph.num_tensors(), f.graph.num_tensors()) << where;
                }
            }
    }
}

// Data parallelism all-reduces every gradient: with buckets of 1/4 of the
// gradients there are at most 4 or 5 gradient buckets plus the loss's lone
// all-reduce, every bucket but the last holds at least the cap, each fused
// node comes right after the node making its last member's tensor, and the
// optimizer's updates all come after the backward pass.
TEST(Fuse, DataParallelGradientsGoInBucketsOfTheSizeAsked) {
    const Graph g = training_graph("transformer:layers=2,d_model=32,heads=2,seq=8,vocab=50", 16);
    const int64_t grads = gradient_bytes(g), cap = grads / 4;
    const Plan alone = plan_with_buckets(g, 4, PartitionStrategy::DataParallel, 0);
    const Plan fused = plan_with_buckets(g, 4, PartitionStrategy::DataParallel, cap);
    const DeviceGraph a = lower(g, alone, 1), f = lower(g, fused, 1);
    EXPECT_GT(a.comm_nodes, 20);
    EXPECT_LE(f.comm_nodes, 4 + 1 + 1);
    std::vector<int64_t> bucket_bytes;
    std::map<TensorId, int> position;
    for (int i = 0; i < f.graph.num_nodes(); i++)
        for (TensorId t : f.graph.node(i).outputs) position[t] = i;
    for (int i = 0; i < f.graph.num_nodes(); i++) {
        const Node &n = f.graph.node(i);
        if (!n.comm || n.inputs.size() < 2) continue;
        int64_t bytes = 0;
        int last = -1;
        for (TensorId t : n.inputs) {
            bytes += f.graph.tensor(t).type.bytes();
            last = std::max(last, position.at(t));
        }
        bucket_bytes.push_back(bytes);
        EXPECT_EQ(i, last + 1) << n.call.name << " waits past its last member's tensor";
    }
    // The updates wait for their buckets after the backward pass, which runs
    // on meanwhile; none sits between two backward operators.
    int last_backward = -1, first_update = f.graph.num_nodes();
    for (int i = 0; i < f.graph.num_nodes(); i++) {
        const Node &n = f.graph.node(i);
        if (n.optimizer) first_update = std::min(first_update, i);
        else if (!n.comm) last_backward = i;
    }
    EXPECT_LT(last_backward, first_update);
    ASSERT_FALSE(bucket_bytes.empty());
    for (size_t b = 0; b + 1 < bucket_bytes.size(); b++) EXPECT_GE(bucket_bytes[b], cap) << "bucket " << b;
    int64_t total = 0;
    for (int64_t b : bucket_bytes) total += b;
    EXPECT_GE(total, grads - cap) << "most gradients are fused";
}

// The collectives-per-step bar: ddp runs at most 2 ceil(gradient bytes /
// bucket) + 10 collectives per rank, at buckets of 1/6 and 1/20 of the
// gradients and at 2, 4 and 8 ranks, on a transformer and on a WResNet (batch
// norm per device); unfused, neither would meet it.
TEST(Fuse, DdpRunsFewCollectivesPerStep) {
    for (const char *spec : {"transformer:layers=4,d_model=64,heads=4,seq=16,vocab=100",
                             "wresnet:depth=18,base=4,image=8"}) {
        const Graph g = training_graph(spec, 16);
        const int64_t grads = gradient_bytes(g);
        for (int64_t parts : {6, 20})
            for (int n : {2, 4, 8}) {
                const int64_t bucket = grads / parts;
                const DeviceGraph d = lower(g, plan_with_buckets(g, n, PartitionStrategy::Ddp, bucket), n - 1);
                const DeviceGraph alone = lower(g, plan_with_buckets(g, n, PartitionStrategy::Ddp, 0), n - 1);
                const int64_t bar = 2 * ((grads + bucket - 1) / bucket) + 10;
                EXPECT_LE(d.comm_nodes, bar) << spec << " n=" << n << " bucket " << bucket;
                EXPECT_GT(alone.comm_nodes, bar) << spec << " n=" << n << ": unfused, the bar would not hold";
            }
    }
}

// Every rank runs the same communication nodes in the same order, with the
// same members in each bucket: ranks running shared collectives in different
// orders would deadlock. Uneven splits (3 and 8 ranks over batch 12 and odd
// widths) give ranks tensors of different sizes, which must not change the
// buckets.
TEST(Fuse, EveryRankRunsTheSameBucketsInTheSameOrder) {
    for (const char *spec : kModels) {
        const Graph g = training_graph(spec, 12);
        for (int n : {3, 8})
            for (auto s : {PartitionStrategy::Tofu, PartitionStrategy::Owt}) {
                const Plan p = plan_with_buckets(g, n, s, 1 << 10);
                std::vector<std::vector<std::pair<std::string, size_t>>> order(n);  // per rank: (name, members)
                for (int r = 0; r < n; r++) {
                    const DeviceGraph d = lower(g, p, r);
                    for (const Node &node : d.graph.nodes())
                        if (node.comm) order[r].emplace_back(node.call.name, node.inputs.size());
                }
                for (int r = 1; r < n; r++)
                    EXPECT_EQ(order[r], order[0]) << spec << " " << p.strategy << " n=" << n << " rank " << r;
            }
    }
}

TEST(Fuse, ABucketSizeBelowZeroIsAnError) {
    const Graph g = training_graph("mlp:hidden=8", 4);
    EXPECT_NE(test::error_of([&] { plan_with_buckets(g, 2, PartitionStrategy::DataParallel, -1); })
                  .find("bucket size for fused collectives is -1 bytes"),
              std::string::npos);
}

}  // namespace
}  // namespace tessera
