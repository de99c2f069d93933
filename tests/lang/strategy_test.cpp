// The partition strategies derived by Halide bounds inference (tools/strategyc.cpp).
// Each expectation here is worked out by hand from the operator's definition.
#include "tessera/lang/strategy.h"

#include "test_util.h"

namespace tessera::test {
namespace {

const Strategy *find(const OpStrategies &s, const std::string &var) {
    for (const Strategy &st : s.strategies)
        if (st.var == var) return &st;
    return nullptr;
}

std::vector<TensorType> f32(std::vector<Shape> shapes) {
    std::vector<TensorType> t;
    for (auto &s : shapes) t.push_back({DType::F32, s});
    return t;
}

TEST(Strategy, MatmulHasExactlyTofusThreeStrategies) {
    OpCall c{OpKind::Matmul, "fc", {}};
    const OpStrategies *s = strategies_for(c, f32({{64, 32}, {32, 16}}));
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(s->strategies.size(), 3u);
    EXPECT_FALSE(s->opaque);

    const Strategy *rows = find(*s, "m");  // split the rows of x
    ASSERT_NE(rows, nullptr);
    EXPECT_EQ(rows->inputs[0].kind, NeedKind::Split);
    EXPECT_EQ(rows->inputs[0].dim, 0);
    EXPECT_EQ(rows->inputs[1].kind, NeedKind::Replicated);
    EXPECT_EQ(rows->outputs[0].kind, OutKind::Split);
    EXPECT_EQ(rows->outputs[0].dim, 0);

    const Strategy *cols = find(*s, "n");  // split the columns of w
    ASSERT_NE(cols, nullptr);
    EXPECT_EQ(cols->inputs[0].kind, NeedKind::Replicated);
    EXPECT_EQ(cols->inputs[1].kind, NeedKind::Split);
    EXPECT_EQ(cols->inputs[1].dim, 1);
    EXPECT_EQ(cols->outputs[0].kind, OutKind::Split);
    EXPECT_EQ(cols->outputs[0].dim, 1);

    const Strategy *red = find(*s, "k");  // split the reduction: partial sums
    ASSERT_NE(red, nullptr);
    EXPECT_TRUE(red->reduction_var);
    EXPECT_EQ(red->inputs[0].kind, NeedKind::Split);
    EXPECT_EQ(red->inputs[0].dim, 1);
    EXPECT_EQ(red->inputs[1].kind, NeedKind::Split);
    EXPECT_EQ(red->inputs[1].dim, 0);
    EXPECT_EQ(red->outputs[0].kind, OutKind::Partial);
    EXPECT_EQ(red->outputs[0].reduce, "sum");
    for (const Strategy &st : s->strategies)
        for (const InputNeed &n : st.inputs)
            if (n.kind == NeedKind::Split) EXPECT_EQ(n.halo.str(), "0") << strategy_str(st);
}

TEST(Strategy, TransposedMatmulSplitsTheTransposedDimensions) {
    OpCall c{OpKind::Matmul, "fc", {{"transpose_a", int64_t(1)}, {"transpose_b", int64_t(1)}}};
    const OpStrategies *s = strategies_for(c, f32({{32, 64}, {16, 32}}));  // x^T [K, M], w^T [N, K]
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(s->strategies.size(), 3u);
    EXPECT_EQ(find(*s, "m")->inputs[0].dim, 1);
    EXPECT_EQ(find(*s, "n")->inputs[1].dim, 0);
    EXPECT_EQ(find(*s, "k")->inputs[0].dim, 0);
    EXPECT_EQ(find(*s, "k")->inputs[1].dim, 1);
}

TEST(Strategy, ElementwiseSplitsAlongEveryDimension) {
    for (OpKind k : {OpKind::Relu, OpKind::Add, OpKind::GeluGrad, OpKind::Sigmoid}) {
        int arity = op_info(k).min_inputs;
        std::vector<Shape> shapes(arity, Shape{4, 6, 8});
        const OpStrategies *s = strategies_for({k, "", {}}, f32(shapes));
        ASSERT_NE(s, nullptr) << op_name(k);
        ASSERT_EQ(s->strategies.size(), 3u) << op_name(k);
        for (int d = 0; d < 3; d++) {
            const Strategy *st = find(*s, "d" + std::to_string(d));
            ASSERT_NE(st, nullptr);
            for (const InputNeed &n : st->inputs) {
                EXPECT_EQ(n.kind, NeedKind::Split);
                EXPECT_EQ(n.dim, d);
                EXPECT_EQ(n.halo.str(), "0");
            }
            EXPECT_EQ(st->outputs[0].kind, OutKind::Split);
            EXPECT_EQ(st->outputs[0].dim, d);
        }
    }
}

TEST(Strategy, BiasGradSplitOverBatchIsAPartialSum) {
    OpCall c{OpKind::BiasAddGrad, "b", {{"axis", int64_t(1)}}};
    const OpStrategies *s = strategies_for(c, f32({{8, 16}}));
    ASSERT_NE(s, nullptr);
    const Strategy *batch = find(*s, "d0");
    ASSERT_NE(batch, nullptr);
    EXPECT_EQ(batch->outputs[0].kind, OutKind::Partial);
    EXPECT_EQ(batch->inputs[0].kind, NeedKind::Split);
    EXPECT_EQ(batch->inputs[0].dim, 0);
}

TEST(Strategy, Conv2dOutputHeightNeedsAHaloOfKernelMinusOne) {
    for (int64_t kh : {1, 3, 5}) {
        OpCall c{OpKind::Conv2d, "conv", {{"pad_h", int64_t(kh / 2)}, {"pad_w", int64_t(kh / 2)}}};
        std::vector<TensorType> in = f32({{2, 3, 16, 16}, {4, 3, kh, kh}});
        const OpStrategies *s = strategies_for(c, in);
        ASSERT_NE(s, nullptr);
        const Strategy *oh = find(*s, "oh");
        ASSERT_NE(oh, nullptr);
        EXPECT_EQ(oh->inputs[0].kind, NeedKind::Split);
        EXPECT_EQ(oh->inputs[0].dim, 2);
        EXPECT_EQ(oh->inputs[0].halo.eval(symbol_env(c, in)), kh - 1) << oh->inputs[0].halo.str();
        EXPECT_EQ(oh->inputs[1].kind, NeedKind::Replicated);
        EXPECT_EQ(oh->outputs[0].kind, OutKind::Split);
        EXPECT_EQ(oh->outputs[0].dim, 2);
    }
}

TEST(Strategy, Conv2dStrideShrinksTheHalo) {
    OpCall c{OpKind::Conv2d, "conv", {{"stride_h", int64_t(2)}, {"stride_w", int64_t(2)}, {"pad_h", int64_t(1)}, {"pad_w", int64_t(1)}}};
    std::vector<TensorType> in = f32({{2, 3, 16, 16}, {4, 3, 3, 3}});
    const Strategy *oh = find(*strategies_for(c, in), "oh");
    ASSERT_NE(oh, nullptr);
    SymEnv env = symbol_env(c, in);
    EXPECT_EQ(oh->inputs[0].scale.eval(env), 2);
    EXPECT_EQ(oh->inputs[0].halo.eval(env), 1);  // 3 - 2: neighbouring windows overlap by one row
}

TEST(Strategy, BatchNormBatchSplitNeedsCrossDeviceStatistics) {
    OpCall c{OpKind::BatchNorm, "bn", {}};
    const OpStrategies *s = strategies_for(c, f32({{8, 4, 5, 5}, {4}, {4}}));
    ASSERT_NE(s, nullptr);
    const Strategy *batch = find(*s, "n");
    ASSERT_NE(batch, nullptr);
    EXPECT_EQ(batch->inputs[0].kind, NeedKind::Split);
    EXPECT_EQ(batch->inputs[0].dim, 0);
    EXPECT_EQ(batch->outputs[0].kind, OutKind::Split);
    ASSERT_FALSE(batch->reductions.empty()) << strategy_str(*batch);
    for (const StageReduction &r : batch->reductions) EXPECT_EQ(r.reduce, "sum");
    // Channels split cleanly: statistics are per channel.
    const Strategy *ch = find(*s, "c");
    ASSERT_NE(ch, nullptr);
    EXPECT_TRUE(ch->reductions.empty());
}

TEST(Strategy, EmbeddingIsOpaqueExceptAlongTheBatch) {
    OpCall c{OpKind::Embedding, "emb", {}};
    std::vector<TensorType> in = {{DType::F32, {100, 16}}, {DType::I32, {4, 7}}};
    const OpStrategies *s = strategies_for(c, in);
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(s->opaque);
    const Strategy *batch = find(*s, "b0");
    ASSERT_NE(batch, nullptr) << "the batch of ids must be splittable";
    EXPECT_EQ(batch->inputs[0].kind, NeedKind::Replicated);  // the table
    EXPECT_EQ(batch->inputs[1].kind, NeedKind::Split);
    EXPECT_EQ(batch->inputs[1].dim, 0);
    for (const Strategy &st : s->strategies)  // the gathered (vocabulary) dimension is never split
        EXPECT_FALSE(st.inputs[0].kind == NeedKind::Split && st.inputs[0].dim == 0) << strategy_str(st);
}

TEST(Strategy, EveryOperatorHasAnAnalysedVariant) {
    std::set<std::string> analysed;
    for (const OpStrategies &s : all_strategies()) analysed.insert(s.variant.substr(0, s.variant.find('[')));
    for (const OpInfo &o : all_ops()) EXPECT_TRUE(analysed.count(o.name)) << o.name << " has no strategies";
}

}  // namespace
}  // namespace tessera::test
