// The whole-step simulator against an independent closed form of a DDP step:
// `ddp` on WResNet-152 (width 4), batch 128 over 8 GPUs, the h100 roofline, on
// NVLink and on PCIe links (configs/machines/8-nvlink.json, 8-pcie.json). The
// closed form is worked out here from the one-device graph at the per-GPU
// batch, without lowering, programs or the simulator:
//   - every operator takes its roofline time, one after another;
//   - the weight gradients fill 25 MiB buckets in the order the backward pass
//     makes them, and a bucket's ring all-reduce, 2(k-1) latencies plus
//     2(k-1)/k of its bytes over the link, starts once its last gradient
//     exists and the bucket before it is done;
//   - each bucket's updates run after the backward pass and after its
//     all-reduce.
// The predicted step must be within 10% of it.
#include <algorithm>
#include <map>

#include <gtest/gtest.h>

#include "tessera/partition/partition.h"
#include "tessera/pipeline/run_plan.h"
#include "tessera/predict/roofline.h"
#include "tessera/predict/step_predictor.h"

namespace tessera {
namespace {

constexpr int kDevices = 8;
constexpr int64_t kBatch = 128;
constexpr int64_t kBucket = int64_t{25} << 20;
const char *kModel = "wresnet:depth=152,width=4";

Machine eight_gpus(double bandwidth, double latency) {
    return Machine{"8 GPUs", {LinkLevel{"gpu", kDevices, bandwidth, latency}}};
}

// The gradient an optimizer update reads.
TensorId gradient_of_update(const Graph &g, const Node &update) {
    for (TensorId t : update.inputs)
        if (g.tensor(t).role == TensorRole::Gradient) return t;
    return kNoTensor;
}

double closed_form_step(const Graph &g, const std::vector<double> &node_s, const LinkLevel &link) {
    // Compute: the backward pass ends at `compute`; prefix[i] when node i ends.
    std::vector<double> prefix(static_cast<size_t>(g.num_nodes()), 0);
    double compute = 0;
    for (NodeId n = 0; n < g.num_nodes(); n++) {
        if (!g.node(n).optimizer) compute += node_s[n];
        prefix[n] = compute;
    }
    // Gradients in the order they are made, each with its update's time.
    std::vector<std::pair<NodeId, NodeId>> made;  // (producer, update)
    for (NodeId n = 0; n < g.num_nodes(); n++)
        if (g.node(n).optimizer) made.emplace_back(g.tensor(gradient_of_update(g, g.node(n))).producer, n);
    std::sort(made.begin(), made.end());
    const int k = kDevices;
    double comm_free = 0, step = compute;
    int64_t bytes = 0;
    double updates = 0;
    for (size_t i = 0; i < made.size(); i++) {
        bytes += g.tensor(gradient_of_update(g, g.node(made[i].second))).type.bytes();
        updates += node_s[made[i].second];
        if (bytes < kBucket && i + 1 < made.size()) continue;
        const double ready = prefix[made[i].first];
        const double ring = 2.0 * (k - 1) * link.latency + 2.0 * (k - 1) / k * static_cast<double>(bytes) / link.bandwidth;
        comm_free = std::max(ready, comm_free) + ring;
        step = std::max(step, comm_free) + updates;
        bytes = 0;
        updates = 0;
    }
    return step;
}

TEST(DdpClosedForm, SimulatedStepIsWithinTenPercentOnNvlinkAndPcie) {
    BenchContext ctx;
    ctx.device = roofline_device("h100");
    ctx.batch = kBatch;
    const Graph training = build_training_graph(kModel, kBatch);
    const Graph per_gpu = build_training_graph(kModel, kBatch / kDevices);
    const std::vector<double> node_s = roofline_node_times(per_gpu, ctx.device);
    for (const Machine &m : {eight_gpus(360e9, 3e-6), eight_gpus(25e9, 5e-6)}) {
        const BenchRow row = predict_partitioned(kModel, training, m, PartitionStrategy::Ddp, ctx);
        ASSERT_TRUE(row.note.empty()) << row.note;
        const double form = closed_form_step(per_gpu, node_s, m.levels[0]);
        const double link_gbps = m.levels[0].bandwidth / 1e9;
        EXPECT_NEAR(row.step_s, form, 0.10 * form) << link_gbps << " GB/s: simulated " << row.step_s * 1e3
                                                   << " ms, closed form " << form * 1e3 << " ms";
        std::cout << "ddp " << kModel << " batch " << kBatch << " on 8 GPUs at " << link_gbps
                  << " GB/s: simulated " << row.step_s * 1e3 << " ms, closed form " << form * 1e3 << " ms\n";
    }
}

}  // namespace
}  // namespace tessera
