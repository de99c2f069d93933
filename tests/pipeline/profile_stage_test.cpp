// pipeline/profile_stage.h: the profile stage on the CPU device, against the
// profiling pass's own functions (exec/profile.h) called here.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/exec/cpu_device.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"
#include "tessera/pipeline/profile_stage.h"
#include "tessera/pipeline/rank_stages.h"

namespace tessera {
namespace {

constexpr const char *kModel = "mlp:layers=2,hidden=32,input=16,classes=4";

TEST(ProfileStage, TimesEveryOperatorOfTheOrderTheUpdatesOnTheHostAndTheLink) {
    Model m = build_model(kModel, 8);
    make_training_graph(m.graph, m.loss, OptimizerConfig{});
    const RankMemory memory = plan_rank_memory(m.graph);
    CpuDevice device(memory.memory.arena_bytes);
    const OpTimes t = profile_op_times(m.graph, memory.order, device, false);
    ASSERT_EQ(t.node_time_s.size(), static_cast<size_t>(m.graph.num_nodes()));
    ASSERT_EQ(t.host_node_time_s.size(), static_cast<size_t>(m.graph.num_nodes()));
    int updates = 0;
    for (NodeId n : memory.order) {
        const bool update = m.graph.node(n).call.name.ends_with(".update");
        updates += update;
        if (update) EXPECT_GT(t.host_node_time_s[n], 0) << m.graph.node(n).call.name;
        else EXPECT_EQ(t.host_node_time_s[n], 0) << m.graph.node(n).call.name;
    }
    EXPECT_GT(updates, 0);
    double device_s = 0;
    for (double s : t.node_time_s) device_s += s;
    EXPECT_GT(device_s, 0);
    EXPECT_GT(t.h2d_bytes_per_s, 0);
    EXPECT_GT(t.d2h_bytes_per_s, 0);
}

TEST(ProfileStage, TheProfilerMakesTheDeviceWithTheBudgetAsItsArenaOnce) {
    Model m = build_model(kModel, 8);
    make_training_graph(m.graph, m.loss, OptimizerConfig{});
    const RankMemory memory = plan_rank_memory(m.graph);
    const int64_t budget = memory.memory.arena_bytes;
    std::unique_ptr<CpuDevice> device;
    std::vector<int64_t> asked;
    DeviceSource source = [&](int64_t arena) -> Device & {
        asked.push_back(arena);
        if (!device) device = std::make_unique<CpuDevice>(arena);
        return *device;
    };
    const OpTimer profiler = device_profiler(source, false);
    const OpTimes t = profiler(m.graph, memory.order, budget);
    EXPECT_EQ(asked, std::vector<int64_t>{budget});
    ASSERT_TRUE(device);
    EXPECT_EQ(device->arena_bytes(), budget);
    EXPECT_EQ(t.node_time_s.size(), static_cast<size_t>(m.graph.num_nodes()));
}

}  // namespace
}  // namespace tessera
