// Reshapes as views: the memory plan gives a reshape's output its input's
// storage (memory_plan.h states when), the verifier holds programs to it,
// and the executor runs nothing for such a reshape. Training with views on
// and off must give the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "test_graphs.h"
#include "expect_error.h"
#include "tessera/exec/cpu_device.h"
#include "tessera/exec/executor.h"
#include "tessera/graph/optimizer.h"
#include "tessera/models/zoo.h"
#include "tessera/program/memory_plan.h"
#include "tessera/program/program.h"
#include "tessera/program/verify.h"
#include "zoo_training_graph.h"

namespace tessera {
namespace {

using test::error_of;

using test::f32;

MemoryPlan plan(const Graph &g, bool views) {
    MemoryPlanOptions o;
    o.reshape_views = views;
    return plan_memory(g, default_order(g), o);
}

int count_views(const MemoryPlan &p) {
    int n = 0;
    for (TensorId x : p.view_of) n += x != kNoTensor;
    return n;
}

TensorId reshape(Graph &g, const std::string &name, TensorId x, Shape shape) {
    return g.add_node({OpKind::Reshape, name, {{"shape", std::move(shape)}}}, {x})[0];
}

// x -> a = 2x -> y = reshape(a) -> c = relu(x) -> d = y + c (an output).
// a's last reader is the reshape, y's is d: a's bytes must stay until d.
struct Chain {
    Graph g;
    TensorId x, a, y, c, d;
    Chain() {
        x = g.add_data("x", f32({16, 16}));
        a = g.add_node({OpKind::Scale, "a", {{"alpha", 2.0}}}, {x})[0];
        y = reshape(g, "y", a, {8, 32});
        c = g.add_node({OpKind::Relu, "c", {}}, {reshape(g, "x2", x, {8, 32})})[0];
        d = g.add_node({OpKind::Add, "d", {}}, {y, c})[0];
        g.set_output("d", d);
    }
};

TEST(ReshapeViews, AReshapesOutputHasItsInputsOffsetAndTheArenaShrinks) {
    Chain ch;
    MemoryPlan on = plan(ch.g, true), off = plan(ch.g, false);
    ASSERT_TRUE(on.is_view(ch.y));
    EXPECT_EQ(on.view_of[ch.y], ch.a);
    EXPECT_EQ(on.offset[ch.y], on.offset[ch.a]);
    EXPECT_EQ(storage_root(ch.g, on, ch.y), ch.a);
    // The reshape of the persistent x is a view of x too.
    const TensorId x2 = ch.g.node(ch.g.tensor(ch.c).producer).inputs[0];
    EXPECT_EQ(on.offset[x2], on.offset[ch.x]);
    EXPECT_EQ(count_views(on), 2) << on.summary();
    EXPECT_NE(on.summary().find("; 2 reshapes are views"), std::string::npos) << on.summary();

    EXPECT_TRUE(off.view_of.empty());
    EXPECT_NE(off.offset[ch.y], off.offset[ch.a]);
    // 1 KiB tensors: without views x, d and at the add y, c (and a or x2
    // before it) live together; with them x, d, a (= y) and c: 4 KiB.
    EXPECT_EQ(on.lower_bound, 4 * 1024);
    EXPECT_LT(on.lower_bound, off.lower_bound);
    EXPECT_LT(on.arena_bytes, off.arena_bytes);
    EXPECT_NO_THROW(check_memory_plan(ch.g, on));
    EXPECT_NO_THROW(verify_program(ch.g, build_program(ch.g, on.order), on));
    EXPECT_EQ(plan(ch.g, true), on) << "planning is deterministic";
}

TEST(ReshapeViews, ReshapesOfReshapesShareOneRoot) {
    Graph g;
    TensorId x = g.add_data("x", f32({4, 6}));
    TensorId a = g.add_node({OpKind::Relu, "a", {}}, {x})[0];
    TensorId b = reshape(g, "b", a, {6, 4});
    TensorId c = reshape(g, "c", b, {24});
    g.set_output("y", g.add_node({OpKind::Relu, "y", {}}, {c})[0]);
    MemoryPlan p = plan(g, true);
    EXPECT_EQ(p.view_of[b], a);
    EXPECT_EQ(p.view_of[c], b);
    EXPECT_EQ(storage_root(g, p, c), a);
    EXPECT_EQ(p.offset[c], p.offset[a]);
    EXPECT_NO_THROW(verify_program(g, build_program(g, p.order), p));
}

TEST(ReshapeViews, GraphOutputsKeepTheirOwnStorage) {
    Graph g;
    TensorId x = g.add_data("x", f32({4, 6}));
    TensorId a = g.add_node({OpKind::Relu, "a", {}}, {x})[0];
    TensorId y = reshape(g, "y", a, {24});
    g.set_output("y", y);
    MemoryPlan p = plan(g, true);
    EXPECT_FALSE(p.is_view(y));
    EXPECT_NE(p.offset[y], p.offset[a]);
}

// w is updated in place by the optimizer; a reshape of w that is read after
// the update would see w', so it must copy. Read before, it is a view.
struct Updated {
    Graph g;
    TensorId w, y, upd;
    explicit Updated(bool read_after_update) {
        w = g.add_param("w", f32({4, 8}), Init::zeros());
        TensorId gw = g.add_data("gw", f32({4, 8}));
        TensorId v = g.add_opt_state("w.v", f32({4, 8}));
        y = reshape(g, "y", w, {32});
        auto update = [&] {
            auto outs = g.add_node({OpKind::SgdMomentum, "w.update", {{"lr", 0.1}}}, {w, gw, v});
            g.set_updates(outs[0], w);
            g.set_updates(outs[1], v);
            upd = outs[0];
        };
        if (read_after_update) update();
        g.set_output("z", g.add_node({OpKind::Relu, "z", {}}, {y})[0]);
        if (!read_after_update) update();
    }
};

TEST(ReshapeViews, AReshapeOfAWeightReadAfterItsInPlaceUpdateCopies) {
    Updated before(false), after(true);
    MemoryPlan pb = plan(before.g, true), pa = plan(after.g, true);
    EXPECT_TRUE(pb.is_view(before.y));
    EXPECT_EQ(pb.offset[before.y], pb.offset[before.w]);
    EXPECT_FALSE(pa.is_view(after.y));
    EXPECT_NO_THROW(verify_program(before.g, build_program(before.g, pb.order), pb));
    EXPECT_NO_THROW(verify_program(after.g, build_program(after.g, pa.order), pa));

    // Forced, the view passes the plan's own check (offsets agree) but not
    // the verifier: z would read w', not w.
    MemoryPlan forced = pa;
    forced.view_of.assign(after.g.num_tensors(), kNoTensor);
    forced.view_of[after.y] = after.w;
    forced.offset[after.y] = forced.offset[after.w];
    EXPECT_NO_THROW(check_memory_plan(after.g, forced));
    EXPECT_EQ(error_of([&] { verify_program(after.g, build_program(after.g, forced.order), forced); }),
              "program instruction 2 (compute 'z' on the compute stream) reads 'y', which the memory plan makes a "
              "view of 'w', but instruction 1 (compute 'w.update' on the compute stream) has written over 'w' "
              "since the view was made; the reshape must copy (plan memory without that view)");
}

TEST(ReshapeViews, TheVerifierRejectsARootThatDiesBeforeItsViewsLastReader) {
    Chain ch;
    MemoryPlan p = plan(ch.g, true);
    const Program prog = build_program(ch.g, p.order);
    ASSERT_NO_THROW(verify_program(ch.g, prog, p));
    // c is produced after a's own last reader (the reshape) but before y's
    // last reader (d): placed over a, it destroys y.
    MemoryPlan bad = p;
    bad.offset[ch.c] = p.offset[ch.a];
    EXPECT_NO_THROW(check_memory_plan(ch.g, bad));
    const std::string e = error_of([&] { verify_program(ch.g, prog, bad); });
    EXPECT_NE(e.find("(compute 'd' on the compute stream) reads 'y', which is not in the arena: it was written over"),
              std::string::npos)
        << e;
    // Without the view, a could die at the reshape: the same placement is fine.
    MemoryPlan copying = plan(ch.g, false);
    EXPECT_NE(copying.offset[ch.y], copying.offset[ch.a]);
}

TEST(ReshapeViews, CheckRejectsMalformedViews) {
    Chain ch;
    const MemoryPlan p = plan(ch.g, true);
    MemoryPlan moved = p;
    moved.offset[ch.y] = p.offset[ch.d];
    EXPECT_EQ(error_of([&] { check_memory_plan(ch.g, moved); }),
              "memory plan: tensor 'y' is a view of 'a', so it must have the same offset (" +
                  std::to_string(p.offset[ch.a]) + "), not " + std::to_string(p.offset[ch.d]));
    MemoryPlan not_reshape = p;
    not_reshape.view_of[ch.c] = ch.x;
    EXPECT_EQ(error_of([&] { check_memory_plan(ch.g, not_reshape); }),
              "memory plan: tensor 'c' is a view of 'x', but only the output of a reshape of 'x' can be");
    MemoryPlan other_input = p;
    other_input.view_of[ch.y] = ch.x;
    other_input.offset[ch.y] = p.offset[ch.x];
    EXPECT_EQ(error_of([&] { check_memory_plan(ch.g, other_input); }),
              "memory plan: tensor 'y' is a view of 'x', but only the output of a reshape of 'x' can be");
    MemoryPlan short_list = p;
    short_list.view_of.pop_back();
    EXPECT_EQ(error_of([&] { check_memory_plan(ch.g, short_list); }),
              "memory plan: has views for " + std::to_string(ch.g.num_tensors() - 1) + " tensors but the graph has " +
                  std::to_string(ch.g.num_tensors()) + "; give one entry per tensor (-1: not a view), or none");

    // A graph output needs storage of its own.
    Graph g;
    TensorId x = g.add_data("x", f32({4, 6}));
    TensorId a = g.add_node({OpKind::Relu, "a", {}}, {x})[0];
    TensorId y = reshape(g, "y", a, {24});
    g.set_output("y", y);
    MemoryPlan out = plan(g, true);
    out.view_of.assign(g.num_tensors(), kNoTensor);
    out.view_of[y] = a;
    out.offset[y] = out.offset[a];
    EXPECT_EQ(error_of([&] { check_memory_plan(g, out); }),
              "memory plan: tensor 'y' is a view of 'a', but it persists or is updated in place, so it needs "
              "storage of its own");
}

TEST(ReshapeViews, RoundTripsThroughJson) {
    Chain ch;
    const MemoryPlan p = plan(ch.g, true);
    const nlohmann::json j = memory_plan_to_json(p);
    ASSERT_TRUE(j.contains("view_of"));
    EXPECT_EQ(memory_plan_from_json(j), p);
    EXPECT_FALSE(memory_plan_to_json(plan(ch.g, false)).contains("view_of"));
}

// ---- the zoo's training graphs ----

Graph training_graph(const std::string &spec, int64_t batch, OptimizerConfig::Kind opt) {
    return test::zoo_training_graph(spec, batch, test::optimizer_config(opt, 0.01));
}

const char *kTransformer = "transformer:layers=2,d_model=64,heads=4,seq=16,vocab=100";
const char *kCnn = "cnn:convs=2,channels=4,hidden=32";

TEST(ReshapeViews, ZooTrainingGraphsPlanNoLargerArenas) {
    for (const char *spec : {kTransformer, kCnn}) {
        for (int64_t batch : {4, 128}) {
            Graph g = training_graph(spec, batch, OptimizerConfig::Kind::Adam);
            MemoryPlan on = plan(g, true), off = plan(g, false);
            std::printf("%s batch %lld\n  views: %s\n  copies: %s\n", spec, static_cast<long long>(batch),
                        on.summary().c_str(), off.summary().c_str());
            EXPECT_GT(count_views(on), 0) << spec;
            EXPECT_LE(on.arena_bytes, off.arena_bytes) << spec;
            EXPECT_LE(on.lower_bound, off.lower_bound) << spec;
            EXPECT_EQ(on.persistent_bytes, off.persistent_bytes) << spec;
            EXPECT_NO_THROW(check_memory_plan(g, on));
            EXPECT_NO_THROW(verify_program(g, build_program(g, on.order), on));
            for (TensorId t = 0; t < g.num_tensors(); t++) {
                if (on.is_view(t)) {
                    EXPECT_EQ(on.offset[t], on.offset[on.view_of[t]]) << g.tensor(t).name;
                }
            }
        }
    }
}

// The transformer of the GPU benchmarks: planned only.
TEST(ReshapeViews, TheBenchmarkTransformersArena) {
    Graph g = training_graph("transformer:layers=24,d_model=768,heads=12,seq=256", 16, OptimizerConfig::Kind::Adam);
    MemoryPlan on = plan(g, true), off = plan(g, false);
    std::printf("transformer 24 layers, d_model 768, seq 256, batch 16\n  views: %s\n  copies: %s\n",
                on.summary().c_str(), off.summary().c_str());
    EXPECT_GT(count_views(on), 0);
    EXPECT_LE(on.arena_bytes, off.arena_bytes);
    EXPECT_LE(on.lower_bound, off.lower_bound);
}

struct Trace {
    std::vector<float> losses;
    std::vector<std::vector<std::byte>> state;  // every persistent storage root after the last step
    std::vector<int64_t> peaks;
    std::vector<double> reshape_times;  // the last step's time of each reshape node
};

Trace train(const Graph &g, bool views, int steps) {
    MemoryPlan p = plan(g, views);
    CpuDevice dev(p.arena_bytes);
    Executor ex(g, dev, p);
    ex.set_node_timing(true);
    const Program step = build_program(g, p.order);
    ex.initialize(7);
    Trace tr;
    for (int s = 0; s < steps; s++) {
        test::feed_random(ex, s, 100 + static_cast<uint32_t>(s));
        tr.peaks.push_back(ex.run(step).peak_live_bytes);
        tr.losses.push_back(ex.read_vector<float>(g.output("loss"))[0]);
    }
    const std::vector<bool> persistent = persistent_tensors(g);
    for (TensorId t = 0; t < g.num_tensors(); t++) {
        if (!persistent[t] || storage_root(g, t) != t) continue;
        std::vector<std::byte> v(static_cast<size_t>(g.tensor(t).type.bytes()));
        ex.read(t, v.data(), v.size());
        tr.state.push_back(std::move(v));
    }
    for (NodeId n = 0; n < g.num_nodes(); n++)
        if (g.node(n).call.kind == OpKind::Reshape && !g.node(n).comm) tr.reshape_times.push_back(ex.node_times()[n]);
    return tr;
}

void expect_same_training(const std::string &spec, OptimizerConfig::Kind opt) {
    Graph g = training_graph(spec, 4, opt);
    const std::string what = spec + " " + optimizer_name(opt);
    Trace on = train(g, true, 3), off = train(g, false, 3);
    ASSERT_EQ(on.losses.size(), off.losses.size());
    for (size_t s = 0; s < on.losses.size(); s++) {
        EXPECT_EQ(std::memcmp(&on.losses[s], &off.losses[s], sizeof(float)), 0)
            << what << ": step " << s << " loss " << on.losses[s] << " with views, " << off.losses[s] << " without";
        EXPECT_TRUE(std::isfinite(on.losses[s])) << what;
        EXPECT_LE(on.peaks[s], off.peaks[s]) << what << ": measured peak";
    }
    ASSERT_EQ(on.state.size(), off.state.size());
    for (size_t k = 0; k < on.state.size(); k++)
        EXPECT_TRUE(on.state[k] == off.state[k]) << what << ": persistent tensor #" << k << " differs";
    // The views ran nothing (timed 0); without views every reshape ran.
    const MemoryPlan p = plan(g, true);
    size_t k = 0, views = 0;
    for (NodeId n = 0; n < g.num_nodes(); n++) {
        if (g.node(n).call.kind != OpKind::Reshape || g.node(n).comm) continue;
        const bool view = p.is_view(g.node(n).outputs[0]);
        views += view;
        if (view) {
            EXPECT_EQ(on.reshape_times[k], 0.0) << what << ": '" << g.node(n).call.name << "' ran";
        }
        EXPECT_GT(off.reshape_times[k], 0.0) << what << ": '" << g.node(n).call.name << "' did not run";
        k++;
    }
    EXPECT_GT(views, 0u) << what;
}

TEST(ReshapeViews, TransformerTrainsBitIdenticallyWithAndWithoutViews) {
    expect_same_training(kTransformer, OptimizerConfig::Kind::Adam);
    expect_same_training(kTransformer, OptimizerConfig::Kind::Sgd);
}

TEST(ReshapeViews, CnnTrainsBitIdenticallyWithAndWithoutViews) {
    expect_same_training(kCnn, OptimizerConfig::Kind::Adam);
    expect_same_training(kCnn, OptimizerConfig::Kind::Sgd);
}

}  // namespace
}  // namespace tessera
