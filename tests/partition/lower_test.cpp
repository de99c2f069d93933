// Lowering: per-rank graphs from a plan. Numerical equivalence and the bytes
// the communicator really sends are checked end to end under mpirun
// (tests/mpi); here, what can be checked without running: byte counts against
// the search's own count and against a recount from the lowered graphs, the
// matching of collectives across ranks, and the errors.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "tessera/graph/builder.h"
#include "tessera/graph/optimizer.h"
#include "tessera/graph/precision.h"
#include "tessera/models/zoo.h"
#include "tessera/partition/lower.h"
#include "tessera/partition/partition.h"
#include "zoo_training_graph.h"

namespace tessera {
namespace {

using test::error_of;

Graph training_graph(const std::string &spec, int64_t batch) { return test::zoo_training_graph(spec, batch); }

Plan executable_plan(const Graph &g, int devices, PartitionStrategy s,
                     std::vector<std::pair<std::string, std::string>> force = {}) {
    PartitionOptions o;
    o.strategy = s;
    o.executable = true;
    o.force = std::move(force);
    return partition(g, flat_machine(devices), o);
}

// What all ranks send together, as lowered.
int64_t lowered_total(const Plan &p) {
    int64_t sum = 0;
    for (int64_t b : p.rank_comm_bytes) sum += b;
    return sum;
}

const char *kModels[] = {"mlp:hidden=64", "cnn:channels=4,hidden=16", "lstm:hidden=32,seq=4,vocab=50",
                         "transformer:layers=1,d_model=32,heads=2,seq=8,vocab=50", "wresnet:depth=18,base=4,image=8"};

TEST(Lower, OneCutSendsExactlyWhatTheSearchCounted) {
    for (const char *spec : kModels) {
        Graph g = training_graph(spec, 24);
        // 5 and 7 split the batch of 24 and most other dimensions unevenly.
        for (int n : {2, 3, 5, 7})
            for (auto s : {PartitionStrategy::Tofu, PartitionStrategy::DataParallel, PartitionStrategy::Owt}) {
                Plan p = executable_plan(g, n, s);
                ASSERT_EQ(p.rank_comm_bytes.size(), static_cast<size_t>(n));
                EXPECT_EQ(lowered_total(p), p.comm_bytes) << spec << " n=" << n << " " << p.strategy;
            }
    }
}

// Lowering every rank of a plan at once (PlanLowering, what the benchmark
// does) shares the work all ranks compute alike; each rank's graph is the one
// lower() builds alone, node for node and byte for byte.
TEST(Lower, AllRanksAtOnceEqualEachRankAlone) {
    for (const char *spec : kModels) {
        Graph g = training_graph(spec, 24);
        for (int n : {3, 4, 8})
            for (auto s : {PartitionStrategy::Tofu, PartitionStrategy::DataParallel}) {
                Plan p = executable_plan(g, n, s);
                const PlanLowering all(g, p);
                for (int r = 0; r < n; r++) {
                    const DeviceGraph a = all.rank(r), b = lower(g, p, r);
                    const std::string where = std::string(spec) + " n=" + std::to_string(n) + " rank " +
                                              std::to_string(r) + " " + p.strategy;
                    EXPECT_TRUE(a.graph == b.graph) << where;
                    EXPECT_EQ(a.source, b.source) << where;
                    EXPECT_EQ(a.box, b.box) << where;
                    EXPECT_EQ(a.local, b.local) << where;
                    EXPECT_EQ(a.comm_bytes, b.comm_bytes) << where;
                    EXPECT_EQ(a.comm_nodes, b.comm_nodes) << where;
                }
            }
    }
}

TEST(Lower, EachRanksGraphRecordsItsBytesAndTheCollectivesMatchUp) {
    for (const char *spec : kModels) {
        Graph g = training_graph(spec, 24);
        for (int n : {2, 4, 6, 7}) {
            Plan p = executable_plan(g, n, PartitionStrategy::Tofu);
            std::vector<std::vector<std::string>> kinds(n);
            for (int r = 0; r < n; r++) {
                DeviceGraph dg = lower(g, p, r);
                EXPECT_EQ(dg.comm_bytes, p.rank_comm_bytes[r]) << spec << " n=" << n << " rank " << r;
                // Recount from the communication nodes themselves.
                int64_t recount = 0;
                for (const Node &node : dg.graph.nodes()) {
                    if (!node.comm) continue;
                    recount += node.call.attrs.get_int(node.call.who(), "bytes");
                    const auto &v = node.call.attrs.values().at("comm");
                    kinds[r].push_back(std::get<std::string>(v));
                }
                EXPECT_EQ(recount, dg.comm_bytes) << spec << " n=" << n << " rank " << r;
                // Every training-graph tensor has a holder of its planned block.
                for (TensorId t = 0; t < g.num_tensors(); t++) {
                    ASSERT_NE(dg.local[t], kNoTensor) << g.tensor(t).name;
                    EXPECT_EQ(dg.graph.tensor(dg.local[t]).type.shape, dg.held_by(t, r).extents())
                        << spec << " " << g.tensor(t).name;
                }
            }
            // Same collectives in the same order on every rank, or they would
            // not meet.
            for (int r = 1; r < n; r++) EXPECT_EQ(kinds[r], kinds[0]) << spec << " n=" << n;
        }
    }
}

// bf16: an operator's partial sums of a bf16 tensor are made and summed in
// f32 and rounded once after the sum (one cast on the summed block), as one
// device rounds the whole sum; the search counts those f32 bytes. Weight
// gradients are f32 already (GradReduce::F32), or with GradReduce::Low are
// summed in bf16, at half the bytes.
TEST(Lower, Bf16PartialSumsAreSummedInF32AndRoundedOnce) {
    for (GradReduce reduce : {GradReduce::F32, GradReduce::Low}) {
        int rounded_once = 0;  // the mlp's tofu and owt plans have some; the transformer's none
        for (const char *spec : {"mlp:hidden=64", "transformer:layers=1,d_model=32,heads=2,seq=8,vocab=50"}) {
            Model m = build_model(spec, 24);
            apply_precision(m, Precision::BF16, reduce);
            make_training_graph(m.graph, m.loss, {});
            const Graph &g = m.graph;
            int low_gradient_sums = 0;
            for (int n : {2, 3})
                for (auto s : {PartitionStrategy::Tofu, PartitionStrategy::DataParallel, PartitionStrategy::Owt}) {
                    Plan p = executable_plan(g, n, s);
                    EXPECT_EQ(lowered_total(p), p.comm_bytes) << spec << " n=" << n << " " << p.strategy;
                    const DeviceGraph dg = lower(g, p, 0);
                    const auto readers = dg.graph.consumers();
                    for (const Node &node : dg.graph.nodes()) {
                        const std::string kind = node.comm ? node.call.attrs.get_string("", "comm") : "";
                        if (kind != "all_reduce" && kind != "reduce_scatter") continue;
                        const TensorId out = node.outputs[0], source = dg.source[out];
                        const DType summed = dg.graph.tensor(out).type.dtype;
                        const std::string where = std::string(spec) + " n=" + std::to_string(n) + " " +
                                                  p.strategy + " " + node.call.name;
                        if (source == kNoTensor || g.tensor(source).type.dtype != DType::BF16) continue;
                        if (gradient_reduced_low(g, source)) {
                            EXPECT_EQ(summed, DType::BF16) << where;
                            low_gradient_sums++;
                            continue;
                        }
                        ASSERT_EQ(summed, DType::F32) << where;
                        ASSERT_EQ(readers[out].size(), 1u) << where;
                        const Node &cast = dg.graph.node(readers[out][0]);
                        EXPECT_EQ(cast.call.kind, OpKind::Cast) << where;
                        EXPECT_EQ(dg.graph.tensor(cast.outputs[0]).type.dtype, DType::BF16) << where;
                        rounded_once++;
                    }
                }
            if (reduce == GradReduce::Low) EXPECT_GT(low_gradient_sums, 0) << spec;
            else EXPECT_EQ(low_gradient_sums, 0) << spec;
        }
        EXPECT_GT(rounded_once, 0) << "no partial sums of bf16 activations were lowered";
    }
}

TEST(Lower, BlocksTileEveryTensorForEveryLayout) {
    // Brute force: the blocks of all ranks cover each element as many times as
    // the layout replicates it. No extent divides evenly at every level.
    const std::vector<int> cuts = {2, 3, 2};
    const Shape s = {13, 17, 14};
    for (int a = -1; a < 3; a++)
        for (int b = -1; b < 3; b++)
            for (int c = -1; c < 3; c++) {
                std::vector<Layout> lay = {Layout{a}, Layout{b}, Layout{c}};
                int copies = (a < 0 ? 2 : 1) * (b < 0 ? 3 : 1) * (c < 0 ? 2 : 1);
                std::vector<int> count(13 * 17 * 14, 0);
                for (int r = 0; r < 12; r++) {
                    Box box = held_box(s, lay, cuts, r);
                    for (int64_t i = box.lo[0]; i < box.hi[0]; i++)
                        for (int64_t j = box.lo[1]; j < box.hi[1]; j++)
                            for (int64_t k = box.lo[2]; k < box.hi[2]; k++) count[(i * 17 + j) * 14 + k]++;
                }
                for (int v : count) ASSERT_EQ(v, copies) << a << " " << b << " " << c;
            }
}

// No executable subset: whatever the unrestricted search picks for a zoo
// model, lowering runs (halos, offsets, uneven blocks, staged reductions,
// whole-then-block), and for one cut it sends exactly what the search counted.
TEST(Lower, TheUnrestrictedSearchsPlansLower) {
    for (const char *spec : kModels) {
        Graph g = training_graph(spec, 24);
        for (int n : {2, 3, 4, 8})
            for (auto s : {PartitionStrategy::Tofu, PartitionStrategy::DataParallel}) {
                PartitionOptions o;
                o.strategy = s;
                Plan p = partition(g, flat_machine(n), o);
                std::vector<int64_t> bytes;
                EXPECT_NO_THROW(bytes = lowered_comm_bytes(g, p)) << spec << " n=" << n;
                int64_t sum = 0;
                for (int64_t b : bytes) sum += b;
                if (p.cuts.size() != 1) continue;  // several cuts: Tofu's estimate, not exact (README)
                EXPECT_EQ(sum, p.comm_bytes) << spec << " n=" << n << " " << p.strategy;
            }
    }
}

// Many levels of uneven splits: a dimension of 10 split 2 ways four times
// leaves blocks of 2 and 1, and the search must not split the 1s again (it
// tracks the shortest block as well as the longest). Every zoo model plans
// and lowers, on every rank, at 16 and 64 devices.
TEST(Lower, DeepHierarchiesOfUnevenSplitsLower) {
    for (const char *spec : kModels) {
        Graph g = training_graph(spec, 24);
        for (int n : {16, 64}) {
            Plan p;
            EXPECT_NO_THROW(p = executable_plan(g, n, PartitionStrategy::Tofu)) << spec << " n=" << n;
            EXPECT_EQ(p.rank_comm_bytes.size(), static_cast<size_t>(n)) << spec << " n=" << n;
        }
    }
}

// The issue's example: a batch of 32 on 7 devices is split 5,5,5,5,4,4,4, and
// every rank's graph holds its own block of the data and of the loss's input.
TEST(Lower, UnevenBatchSplitIsCeilThenFloorBlocks) {
    Graph g = training_graph("mlp:hidden=64", 32);
    Plan p = executable_plan(g, 7, PartitionStrategy::DataParallel);
    const TensorId input = *g.find_tensor("input");
    std::vector<int64_t> rows, starts;
    for (int r = 0; r < 7; r++) {
        Box b = held_box(g.tensor(input).type.shape, p.tensors[input].layout, {7}, r);
        rows.push_back(b.hi[0] - b.lo[0]);
        starts.push_back(b.lo[0]);
        DeviceGraph dg = lower(g, p, r);
        EXPECT_EQ(dg.graph.tensor(dg.local[input]).type.shape[0], rows.back()) << "rank " << r;
    }
    EXPECT_EQ(rows, (std::vector<int64_t>{5, 5, 5, 5, 4, 4, 4}));
    EXPECT_EQ(starts, (std::vector<int64_t>{0, 5, 10, 15, 20, 24, 28}));
}

// The images' reshape forced whole reads the whole batch while the rest of
// data parallelism reads batch blocks: the images are fed, so each rank
// gets the whole batch as a second input of its own and nothing is gathered,
// in the search's count and in the lowered graphs.
TEST(Lower, FedDataIsReadInAnyLayoutWithoutCommunication) {
    Graph g = training_graph("cnn:channels=4,hidden=16", 24);
    Plan p = executable_plan(g, 3, PartitionStrategy::DataParallel, {{"reshape", "replicate"}});
    for (const CommStep &s : p.comm) EXPECT_NE(s.tensor, "input") << s.node << " " << s.what;
    EXPECT_EQ(lowered_total(p), p.comm_bytes);
    const TensorId input = *g.find_tensor("input");
    const std::string whole = "input@" + Box::whole(g.tensor(input).type.shape).str();
    for (int r = 0; r < 3; r++) {
        DeviceGraph dg = lower(g, p, r);
        auto extra = dg.graph.find_tensor(whole);
        ASSERT_TRUE(extra.has_value()) << "rank " << r << " has no tensor '" << whole << "'";
        EXPECT_EQ(dg.graph.tensor(*extra).role, TensorRole::Data);
        EXPECT_EQ(dg.source[*extra], input);
        EXPECT_EQ(dg.graph.tensor(dg.local[input]).type.shape[0], 8) << "rank " << r;  // its own batch block
        for (const Node &node : dg.graph.nodes()) {
            if (!node.comm) continue;
            EXPECT_EQ(node.call.name.find(":input>"), std::string::npos) << node.call.name;
        }
    }
}

// Convolutions split along height read halos: the bytes lowered equal the
// search's count, every rank's convolution runs with its height padding off,
// and only the ranks at the tensor's true borders pad (rank 0 above, the last
// rank below; a middle rank gets all its rows from its neighbours).
TEST(Lower, SpatialSplitsReadHalosPaddedAtTheTrueBordersOnly) {
    Graph g = training_graph("cnn:channels=4,hidden=16", 24);
    for (int n : {2, 3, 5}) {
        Plan p = executable_plan(g, n, PartitionStrategy::Tofu, {{"conv1.conv2d", "oh"}, {"conv1.conv2d.dw", "oh"}});
        EXPECT_EQ(lowered_total(p), p.comm_bytes) << "n=" << n;
        for (int r = 0; r < n; r++) {
            DeviceGraph dg = lower(g, p, r);
            int pads = 0, convs = 0;
            for (const Node &node : dg.graph.nodes()) {
                if (node.call.kind == OpKind::SliceGrad && node.call.name.rfind("conv1.conv2d#pad_h", 0) == 0) pads++;
                if (node.call.name == "conv1.conv2d") {
                    convs++;
                    EXPECT_EQ(node.call.attrs.get_int("", "pad_h"), 0) << "n=" << n << " rank " << r;
                    EXPECT_EQ(node.call.attrs.get_int("", "pad_w"), 1) << "n=" << n << " rank " << r;
                }
            }
            EXPECT_EQ(convs, 1);
            // The forward convolution pads at a true border only.
            EXPECT_EQ(pads, r == 0 || r == n - 1 ? 1 : 0) << "n=" << n << " rank " << r;
        }
    }
}

// The input gradient of a convolution split along the input's height reads
// its inputs whole (bounds inference cannot express a strided gradient's
// rows): it runs whole on every rank and keeps its block, moving exactly the
// search's bytes.
TEST(Lower, WholeInputsSplitOutputRunsWholeThenKeepsTheBlock) {
    Graph g = training_graph("cnn:channels=4,hidden=16", 24);
    for (int n : {2, 3}) {
        Plan p = executable_plan(g, n, PartitionStrategy::Tofu, {{"conv2.conv2d.dx", "ih"}});
        EXPECT_EQ(lowered_total(p), p.comm_bytes) << "n=" << n;
        for (int r = 0; r < n; r++) {
            DeviceGraph dg = lower(g, p, r);
            int slices = 0;
            for (const Node &node : dg.graph.nodes()) {
                if (node.call.name != "conv2.conv2d.dx#block0_2") continue;
                slices++;
                // This rank's rows of the 14-row gradient.
                EXPECT_EQ(dg.graph.tensor(node.outputs[0]).type.shape[2], block_size(14, n, r)) << "rank " << r;
            }
            EXPECT_EQ(slices, 1) << "n=" << n << " rank " << r;
        }
    }
}

TEST(Lower, RefusesPlansItCannotRun) {
    // Dropout split into blocks would draw each block's mask from the block's
    // own element indices; only executable plans lower.
    {
        Graph d;
        Builder b(d);
        d.set_output("y", b.dropout(b.data("x", {8, 16}), 0.5, 7).id);
        PartitionOptions o;
        o.force = {{"dropout", "d0"}};
        Plan p = partition(d, flat_machine(2), o);
        std::string e = error_of([&] { lower(d, p, 0); });
        EXPECT_NE(e.find("but dropout draws its mask per element index of the whole tensor"), std::string::npos) << e;
    }
    Graph g = training_graph("cnn:channels=4,hidden=16", 24);
    Plan q = executable_plan(g, 2, PartitionStrategy::Tofu);
    EXPECT_EQ(error_of([&] { lower(g, q, 2); }), "lowering: rank 2 is outside the plan's 2 devices");
    Graph other = training_graph("cnn:channels=4,hidden=16", 12);
    EXPECT_NE(error_of([&] { lower(other, q, 0); }).find("was it made for another model or batch size?"),
              std::string::npos);
    // A plan file may hold only a gradient as partial sums, and only an add
    // may add partial sums as they are.
    Graph lstm = training_graph("lstm:hidden=16,seq=3,vocab=20", 8);
    Plan data = executable_plan(lstm, 2, PartitionStrategy::DataParallel);
    Plan bad = data;
    const TensorId w = *lstm.find_tensor("lstm1.wx");
    bad.tensors[w].layout = {Layout::partial()};
    EXPECT_EQ(error_of([&] { lower(lstm, bad, 0); }),
              "lowering: the plan holds tensor 'lstm1.wx' (param) as partial sums, which only a gradient may be");
    bad = data;
    const NodeId sum = lstm.tensor(*lstm.find_tensor("lstm1.wx.grad_sum")).producer;
    ASSERT_EQ(bad.ops[sum].strategy[0], "add partial sums");
    for (TensorId t : lstm.node(sum).inputs) bad.tensors[t].layout = {Layout::replicated()};
    EXPECT_NE(error_of([&] { lower(lstm, bad, 0); }).find("the plan adds tensor 'lstm1.t"), std::string::npos);
}

}  // namespace
}  // namespace tessera
