// The precision policy (graph/precision.h) on the zoo's models: where the casts
// go, what every tensor is stored in, what the backward pass and optimizer then
// hold, and that the activations' bytes halve.
#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "tessera/graph/optimizer.h"
#include "tessera/graph/precision.h"
#include "tessera/graph/serialize.h"
#include "tessera/models/zoo.h"

namespace tessera::test {
namespace {

const char *kTransformer = "transformer:layers=2,d_model=64,heads=4,seq=16,vocab=100";

Model model_in(const std::string &spec, Precision p, int64_t batch = 8) {
    Model m = build_model(spec, batch);
    apply_precision(m, p);
    return m;
}

int64_t bytes_of_role(const Graph &g, TensorRole r) {
    int64_t b = 0;
    for (const TensorInfo &t : g.tensors())
        if (t.role == r) b += t.type.bytes();
    return b;
}

TEST(Precision, NamesAndErrors) {
    for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16})
        EXPECT_EQ(precision_from_name(precision_name(p)), p);
    EXPECT_EQ(precision_choices(), "fp32|tf32|bf16|fp16");
    expect_error([] { precision_from_name("fp8"); }, "unknown precision 'fp8'; valid: fp32|tf32|bf16|fp16");
    EXPECT_EQ(storage_dtype(Precision::TF32), DType::F32);
    EXPECT_EQ(storage_dtype(Precision::FP16), DType::F16);
}

TEST(Precision, Fp32AndTf32LeaveTheGraphAsItWas) {
    for (Precision p : {Precision::FP32, Precision::TF32}) {
        Model plain = build_model("mlp", 4), m = model_in("mlp", p, 4);
        EXPECT_EQ(m.graph, plain.graph);
        EXPECT_EQ(m.loss, plain.loss);
    }
}

// Every weight is read through one cast; every node reads one storage type.
TEST(Precision, EachWeightHasOneWorkingCopy) {
    for (const char *spec : {"mlp", "cnn", kTransformer}) {
        Model m = model_in(spec, Precision::BF16);
        const Graph &g = m.graph;
        const auto readers = g.consumers();
        for (TensorId w : g.with_role(TensorRole::Param)) {
            ASSERT_EQ(readers[w].size(), 1u) << spec << ": " << g.tensor(w).name;
            const Node &cast = g.node(readers[w][0]);
            EXPECT_EQ(cast.call.kind, OpKind::Cast) << g.tensor(w).name;
            EXPECT_EQ(g.tensor(cast.outputs[0]).type.dtype, DType::BF16);
            EXPECT_EQ(g.tensor(cast.outputs[0]).name, g.tensor(w).name + ".bf16");
        }
        for (const Node &n : g.nodes())
            if (n.call.kind == OpKind::Matmul || n.call.kind == OpKind::BatchMatmul || n.call.kind == OpKind::Conv2d)
                for (TensorId t : n.inputs) EXPECT_EQ(g.tensor(t).type.dtype, DType::BF16) << n.call.who();
        EXPECT_EQ(g.tensor(m.logits).type.dtype, DType::BF16) << spec;
        EXPECT_EQ(g.tensor(m.loss).type, (TensorType{DType::F32, {}})) << spec;
        EXPECT_EQ(g.tensor(m.labels).type.dtype, DType::I32) << spec;
    }
}

// What stays f32 after the backward pass and the optimizer: the master
// weights, their gradients, optimizer state, the loss and batch norm's running
// statistics. Everything else floating is f16. By default (GradReduce::F32)
// each weight gradient's node keeps its f32 result (lang's kF32OutputsAttr),
// so no cast widens a gradient; with GradReduce::Low the gradients are f16
// until the working copies' casts widen them.
TEST(Precision, MasterWeightsGradientsAndStateStayF32) {
    for (GradReduce reduce : {GradReduce::F32, GradReduce::Low})
        for (const char *spec : {"mlp", "cnn", kTransformer}) {
            Model m = build_model(spec, 8);
            apply_precision(m, Precision::FP16, reduce);
            OptimizerConfig adam;
            adam.kind = OptimizerConfig::Kind::Adam;
            const std::vector<TensorId> grads = make_training_graph(m.graph, m.loss, adam);
            const Graph &g = m.graph;
            for (TensorId d : grads) EXPECT_EQ(g.tensor(d).type.dtype, DType::F32) << g.tensor(d).name;
            int widening_casts = 0, kept = 0;
            for (const Node &n : g.nodes()) {
                const bool widens = n.call.kind == OpKind::Cast && g.tensor(n.inputs[0]).type.dtype == DType::F16;
                widening_casts += widens;
                const bool all_f32 = n.optimizer || n.call.kind == OpKind::BatchNormStats ||
                                     n.call.kind == OpKind::SoftmaxXent || widens;
                const std::vector<int64_t> f32_outputs = n.call.attrs.get_ints("", kF32OutputsAttr, {});
                kept += static_cast<int>(f32_outputs.size());
                for (size_t i = 0; i < n.outputs.size(); i++) {
                    const DType d = g.tensor(n.outputs[i]).type.dtype;
                    if (d == DType::I32 || d == DType::F64) continue;
                    const bool f32 = all_f32 || std::count(f32_outputs.begin(), f32_outputs.end(), int64_t(i)) ||
                                     (n.call.kind == OpKind::Add && n.backward &&
                                      g.tensor(n.inputs[0]).type.dtype == DType::F32);
                    EXPECT_EQ(d, f32 ? DType::F32 : DType::F16) << spec << ": " << g.tensor(n.outputs[i]).name;
                }
            }
            if (reduce == GradReduce::F32) {
                EXPECT_EQ(widening_casts, 0) << spec;
                EXPECT_GE(kept, static_cast<int>(grads.size())) << spec;
            } else {
                EXPECT_EQ(widening_casts, static_cast<int>(grads.size())) << spec;
                EXPECT_EQ(kept, 0) << spec;
            }
            for (TensorId s : g.with_role(TensorRole::OptState)) EXPECT_EQ(g.tensor(s).type.dtype, DType::F32);
        }
}

// Every tensor of the fp32 training graph is in the bf16 one under its name,
// with half its bytes unless it stays f32; the bf16 graph's other tensors are
// the casts (working copies, cast inputs, and the casts' gradients).
TEST(Precision, EachActivationHalvesAndTheRestAreCasts) {
    for (const char *spec : {"mlp", "cnn", kTransformer}) {
        Model full = build_model(spec, 8), half = model_in(spec, Precision::BF16);
        make_training_graph(full.graph, full.loss, {});
        make_training_graph(half.graph, half.loss, {});
        int64_t full_bytes = 0, half_bytes = 0;
        for (const TensorInfo &t : full.graph.tensors()) {
            const TensorInfo &h = half.graph.tensor(half.graph.tensor_named(t.name));
            EXPECT_EQ(h.type.shape, t.type.shape) << t.name;
            const bool halves = h.type.dtype == DType::BF16;
            EXPECT_EQ(h.type.bytes(), halves ? t.type.bytes() / 2 : t.type.bytes()) << t.name;
            // The updated weights and state (optimizer outputs) stay f32.
            if (t.role == TensorRole::Activation && t.updates == kNoTensor) {
                full_bytes += t.type.bytes();
                half_bytes += h.type.bytes();
            }
        }
        EXPECT_LE(double(half_bytes) / double(full_bytes), 0.501) << spec;
        for (const TensorInfo &h : half.graph.tensors()) {
            if (full.graph.find_tensor(h.name)) continue;
            ASSERT_NE(h.producer, kNoNode) << h.name;
            EXPECT_EQ(half.graph.node(h.producer).call.kind, OpKind::Cast) << h.name;
        }
        EXPECT_EQ(bytes_of_role(half.graph, TensorRole::Param), bytes_of_role(full.graph, TensorRole::Param));
    }
}

TEST(Precision, GraphsKeepTheirTypesThroughJson) {
    Model m = model_in(kTransformer, Precision::BF16);
    make_training_graph(m.graph, m.loss, {});
    EXPECT_EQ(graph_from_json(graph_to_json(m.graph), "g.json"), m.graph);
}

TEST(Precision, AppliesToForwardGraphsOnly) {
    Model m = build_model("mlp", 4);
    make_training_graph(m.graph, m.loss, {});
    expect_error([&] { apply_precision(m.graph, Precision::BF16); }, "applies to a forward graph, before autodiff");
}

// fp16's loss scaling in the training graph: the loss's gradient is seeded
// by the data tensor loss_scale, each weight gradient is counted once, the
// counts are summed into the named output grads.nonfinite, and every update
// reads the scale and that sum after its own inputs.
TEST(Precision, LossScalingSeedsTheLossAndGuardsEveryUpdate) {
    for (const char *spec : {"mlp", "cnn", kTransformer}) {
        Model m = build_model(spec, 8);
        apply_precision(m, Precision::FP16);
        OptimizerConfig sgd;
        sgd.loss_scaling = true;
        const std::vector<TensorId> grads = make_training_graph(m.graph, m.loss, sgd);
        const Graph &g = m.graph;
        const TensorId scale = g.tensor_named(kLossScaleTensor), total = g.output(kNonfiniteTensor);
        EXPECT_EQ(g.tensor(scale).role, TensorRole::Data);
        EXPECT_EQ(g.tensor(scale).grad_of, m.loss) << spec;
        EXPECT_EQ(g.tensor(total).name, kNonfiniteTensor);
        std::vector<TensorId> counted;
        int updates = 0;
        for (const Node &n : g.nodes()) {
            if (n.call.kind == OpKind::NonfiniteCount) counted.push_back(n.inputs[0]);
            if (!n.optimizer) continue;
            updates++;
            ASSERT_EQ(n.inputs.size(), 5u) << n.call.who();
            EXPECT_EQ(n.inputs[3], scale);
            EXPECT_EQ(n.inputs[4], total);
        }
        std::sort(counted.begin(), counted.end());
        std::vector<TensorId> want = grads;
        std::sort(want.begin(), want.end());
        EXPECT_EQ(counted, want) << spec;
        EXPECT_EQ(updates, static_cast<int>(grads.size()));
    }
}

}  // namespace
}  // namespace tessera::test
