// The profiling pass on the CPU device: one time per node, shared by identical
// operators; communication from its bytes; copy bandwidth; errors.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "tessera/error.h"
#include "tessera/exec/cpu_device.h"
#include "tessera/exec/profile.h"
#include "tessera/graph/optimizer.h"
#include "tessera/program/memory_plan.h"
#include "test_graphs.h"

namespace tessera {
namespace {

using test::error_of;

using test::f32;

TEST(Profile, EveryNodeOfTheOrderGetsAPositiveTime) {
    for (auto opt : {OptimizerConfig::Kind::Sgd, OptimizerConfig::Kind::Adam}) {
        Graph g = test::mlp_training_graph(16, {32, 64, 10}, opt);
        std::vector<NodeId> order = default_order(g);
        order.pop_back();  // a node left out gets no time
        CpuDevice dev(1 << 20);
        std::vector<double> t = profile_nodes(g, order, dev);
        ASSERT_EQ(static_cast<int>(t.size()), g.num_nodes());
        for (NodeId n : order) EXPECT_GT(t[n], 0.0) << g.node(n).call.name;
        EXPECT_EQ(t[g.num_nodes() - 1], 0.0);
    }
}

TEST(Profile, IdenticalOperatorsShareOneMeasurement) {
    Graph g;
    TensorId x = g.add_data("x", f32({128, 128}));
    TensorId w1 = g.add_param("w1", f32({128, 128}), Init::zeros());
    TensorId w2 = g.add_param("w2", f32({128, 128}), Init::zeros());
    TensorId a = g.add_node({OpKind::Matmul, "a", {}}, {x, w1})[0];
    TensorId b = g.add_node({OpKind::Matmul, "b", {}}, {x, w2})[0];
    TensorId c = g.add_node({OpKind::Matmul, "c", {{"transpose_a", int64_t{1}}}}, {a, b})[0];
    g.add_node({OpKind::Relu, "d", {}}, {c});
    CpuDevice dev(1 << 20);
    std::vector<std::pair<int, int>> calls;
    ProfileOptions opts;
    opts.repeats = 5;  // the median of 5: one preempted run cannot reorder the two times below
    opts.progress = [&](int done, int total) { calls.emplace_back(done, total); };
    std::vector<double> t = profile_nodes(g, default_order(g), dev, opts);
    EXPECT_EQ(t[0], t[1]);  // same kind, attributes and input types
    // a, b; c (another attribute); d.
    EXPECT_EQ(calls, (std::vector<std::pair<int, int>>{{1, 3}, {2, 3}, {3, 3}}));
    // 4 Mflop against 16 k element-wise operations: the order is not close.
    EXPECT_GT(t[0], t[3]);
}

TEST(Profile, CommunicationNodesTakeTheirBytesOverTheGivenRate) {
    Graph g;
    TensorId x = g.add_data("x", f32({64, 64}));
    TensorId y = g.add_node({OpKind::Relu, "r", {}}, {x})[0];
    g.add_comm_node("ar", Attrs{{"comm", std::string("all_reduce")}}, {y}, f32({64, 64}), TensorRole::Activation);
    CpuDevice dev(1 << 20);
    ProfileOptions opts;
    opts.comm_bytes_per_s = 2e9;
    std::vector<double> t = profile_nodes(g, default_order(g), dev, opts);
    EXPECT_DOUBLE_EQ(t[1], 64 * 64 * 4 / 2e9);
    EXPECT_GT(t[0], 0.0);
}

TEST(Profile, AWorkingSetLargerThanTheArenaNamesTheNode) {
    Graph g;
    TensorId x = g.add_data("x", f32({64, 64}));
    TensorId w = g.add_param("w", f32({64, 64}), Init::zeros());
    g.add_node({OpKind::Matmul, "big", {}}, {x, w});
    CpuDevice dev(32768);
    EXPECT_EQ(error_of([&] { profile_nodes(g, default_order(g), dev); }),
              "profiling node 'big' (matmul) needs 49152 bytes (48.0 KiB) for its inputs and outputs, but the cpu "
              "device arena has 32768 bytes (32.0 KiB); use --device-mem 48KiB or more");
    ProfileOptions opts;
    opts.repeats = 0;
    EXPECT_EQ(error_of([&] { profile_nodes(g, default_order(g), dev, opts); }),
              "profile: repeats must be at least 1, got 0");
}

TEST(Profile, CopyBandwidthIsPositiveBothWays) {
    CpuDevice dev(4 << 20);
    EXPECT_GT(measure_copy_bandwidth(dev, CopyDirection::HostToDevice, 4 << 20), 0.0);
    EXPECT_GT(measure_copy_bandwidth(dev, CopyDirection::DeviceToHost, 1 << 20), 0.0);
    EXPECT_EQ(error_of([&] { measure_copy_bandwidth(dev, CopyDirection::HostToDevice, 8 << 20); }),
              "measure_copy_bandwidth: 8388608 bytes must be positive and fit the cpu device arena of 4194304 bytes");
}

}  // namespace
}  // namespace tessera
