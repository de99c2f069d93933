// embedding, embedding_grad and dropout against plain loops; the backward
// operators against central finite differences of the test's double loops.
#include <algorithm>
#include <cmath>

#include "tessera/lang/strategy.h"
#include "test_util.h"

namespace tessera::test {
namespace {

// y[n, e] = table[clamp(ids[n]), e] with ids flattened.
std::vector<double> ref_embedding(const std::vector<double> &table, int64_t V, int64_t D, const std::vector<int32_t> &ids) {
    std::vector<double> y;
    for (int32_t id : ids) {
        int64_t row = std::clamp<int64_t>(id, 0, V - 1);
        for (int64_t e = 0; e < D; e++) y.push_back(table[row * D + e]);
    }
    return y;
}

OpCall emb() { return {OpKind::Embedding, "tok", {}}; }
OpCall emb_grad(int64_t vocab) { return {OpKind::EmbeddingGrad, "tok", {{"vocab", vocab}}}; }

std::vector<TensorType> types_of(const std::vector<HostTensor> &in) {
    std::vector<TensorType> t;
    for (const auto &h : in) t.push_back(h.type);
    return t;
}

TEST(Embedding, ForwardClampsOutOfRangeIds) {
    struct Case {
        int64_t V, D;
        Shape ids;
    };
    for (const Case &k : std::vector<Case>{{1, 1, {1}}, {13, 7, {5}}, {50, 16, {3, 9}}, {5, 33, {2, 1, 3}}, {100, 3, {4, 7}}}) {
        HostTensor ids = random_ints(k.ids, 2, -3, int(k.V) + 2);  // some below 0, some past the end
        std::vector<HostTensor> in = {random_tensor({k.V, k.D}, 1), ids};
        auto out = run(emb(), in);
        Shape want = k.ids;
        want.push_back(k.D);
        ASSERT_EQ(out[0].type.shape, want);
        expect_near(out[0].f, ref_embedding(to_double(in[0].f), k.V, k.D, ids.i), 0, 0, "embedding");
        EXPECT_NE(strategies_for(emb(), types_of(in)), nullptr);
    }
}

// d/dtable of dot(dy, embedding(table, ids)): rows repeat and clamp.
TEST(Embedding, GradMatchesFiniteDifferences) {
    const int64_t V = 6, D = 5;
    for (Shape ids_shape : {Shape{9}, Shape{3, 4}, Shape{2, 2, 3}}) {
        HostTensor ids = random_ints(ids_shape, 3, -2, int(V) + 1);
        HostTensor table = random_tensor({V, D}, 4);
        Shape dy_shape = ids_shape;
        dy_shape.push_back(D);
        HostTensor dy = random_tensor(dy_shape, 5);
        std::vector<HostTensor> in = {dy, ids};
        auto dt = run(emb_grad(V), in);
        ASSERT_EQ(dt[0].type.shape, (Shape{V, D}));
        std::vector<double> dyd = to_double(dy.f);
        auto loss = [&](const std::vector<double> &t) { return dot(dyd, ref_embedding(t, V, D, ids.i)); };
        expect_near(dt[0].f, finite_diff(loss, to_double(table.f)), 1e-5, 1e-5, "embedding_grad");
        EXPECT_NE(strategies_for(emb_grad(V), types_of(in)), nullptr);
    }
}

TEST(Embedding, GradWithManyRepeatsAndWideRows) {
    // Enough ids and columns that the parallel, vectorised scatter is exercised.
    const int64_t V = 7, D = 131, N = 2000;
    HostTensor ids = random_ints({N}, 6, 0, int(V) - 1), dy = random_tensor({N, D}, 7);
    std::vector<HostTensor> in = {dy, ids};
    auto dt = run(emb_grad(V), in);
    std::vector<double> want(V * D, 0.0);
    for (int64_t n = 0; n < N; n++)
        for (int64_t e = 0; e < D; e++) want[ids.i[n] * D + e] += dy.f[n * D + e];
    expect_near(dt[0].f, want, 1e-4, 1e-5, "embedding_grad sum");
}

TEST(Embedding, GradSplitOverTheBatchIsAPartialSum) {
    const OpStrategies *s = strategies_for(emb_grad(100), {{DType::F32, {4, 7, 16}}, {DType::I32, {4, 7}}});
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(s->opaque);
    const Strategy *batch = nullptr;
    for (const Strategy &st : s->strategies)
        if (st.var == "b0") batch = &st;
    ASSERT_NE(batch, nullptr);
    EXPECT_EQ(batch->inputs[0].kind, NeedKind::Split);
    EXPECT_EQ(batch->inputs[0].dim, 0);
    EXPECT_EQ(batch->inputs[1].kind, NeedKind::Split);
    EXPECT_EQ(batch->inputs[1].dim, 0);
    EXPECT_EQ(batch->outputs[0].kind, OutKind::Partial);
    EXPECT_EQ(batch->outputs[0].reduce, "sum");
    for (const Strategy &st : s->strategies) EXPECT_NE(st.var, "v") << "the scattered row must not be split";
}

// The mask, re-derived from the definition in lang/defs/misc.cpp.
uint32_t mix32(uint32_t u) {
    u ^= u >> 16;
    u *= 0x7feb352du;
    u ^= u >> 15;
    u *= 0x846ca68bu;
    return u ^ (u >> 16);
}

bool kept(int64_t seed, int64_t index, float rate) {
    uint32_t h = mix32(mix32(uint32_t(seed)) ^ uint32_t(index));
    return float(h >> 8) * (1.0f / 16777216.0f) >= rate;
}

std::vector<double> ref_dropout(const std::vector<double> &x, double rate, int64_t seed) {
    std::vector<double> y(x.size());
    for (size_t k = 0; k < x.size(); k++) y[k] = kept(seed, int64_t(k), float(rate)) ? x[k] / (1 - rate) : 0.0;
    return y;
}

OpCall dropout(double rate, int64_t seed) { return {OpKind::Dropout, "drop", {{"rate", rate}, {"seed", seed}}}; }

TEST(Dropout, ForwardMatchesTheHashedMask) {
    for (Shape s : {Shape{1}, Shape{7}, Shape{3, 5}, Shape{2, 1, 9}, Shape{2, 3, 5, 7}, Shape{4099}})
        for (double rate : {0.0, 0.1, 0.5, 0.9})
            for (int64_t seed : {0, 1, 12345}) {
                std::vector<HostTensor> in = {random_tensor(s, 8)};
                auto out = run(dropout(rate, seed), in);
                expect_near(out[0].f, ref_dropout(to_double(in[0].f), rate, seed), 1e-6, 1e-6, "dropout");
                if (s.size() <= 4) EXPECT_NE(strategies_for(dropout(rate, seed), types_of(in)), nullptr);
            }
}

TEST(Dropout, RateZeroIsIdentity) {
    std::vector<HostTensor> in = {random_tensor({5, 11}, 9)};
    auto out = run(dropout(0.0, 77), in);
    EXPECT_EQ(out[0].f, in[0].f);
}

TEST(Dropout, KeepFractionAndScale) {
    const int64_t N = 200000;
    HostTensor ones({N});
    std::fill(ones.f.begin(), ones.f.end(), 1.0f);
    for (double rate : {0.1, 0.3, 0.5, 0.8}) {
        std::vector<HostTensor> in = {ones};
        auto out = run(dropout(rate, 2024), in);
        int64_t k = 0;
        for (float v : out[0].f) {
            if (v != 0.0f) {
                k++;
                EXPECT_NEAR(v, 1.0 / (1.0 - rate), 1e-5);
            }
        }
        double p = 1.0 - rate, frac = double(k) / N, sigma = std::sqrt(p * (1 - p) / N);
        EXPECT_NEAR(frac, p, 5 * sigma) << "rate " << rate;
        // The mean is preserved in expectation.
        EXPECT_NEAR(frac / p, 1.0, 5 * sigma / p);
    }
}

TEST(Dropout, SameSeedSameMaskOtherSeedOtherMask) {
    std::vector<HostTensor> in = {random_tensor({3000}, 10)};
    auto a = run(dropout(0.5, 7), in), b = run(dropout(0.5, 7), in), c = run(dropout(0.5, 8), in);
    EXPECT_EQ(a[0].f, b[0].f);
    int64_t differ = 0, both_kept = 0;
    for (size_t k = 0; k < a[0].f.size(); k++) {
        differ += (a[0].f[k] == 0) != (c[0].f[k] == 0);
        both_kept += a[0].f[k] != 0 && c[0].f[k] != 0;
    }
    // Independent masks at rate 0.5 disagree on about half the elements.
    EXPECT_NEAR(double(differ) / 3000, 0.5, 0.05);
    EXPECT_NEAR(double(both_kept) / 3000, 0.25, 0.04);
}

// Dropout's backward is dropout of dy with the same seed: the same mask and scale.
TEST(Dropout, BackwardIsDropoutOfDyWithTheSameSeed) {
    Shape s = {4, 9};
    for (double rate : {0.0, 0.25, 0.6}) {
        HostTensor x = random_tensor(s, 11), dy = random_tensor(s, 12);
        std::vector<HostTensor> in = {dy};
        auto dx = run(dropout(rate, 99), in);
        std::vector<double> dyd = to_double(dy.f);
        auto loss = [&](const std::vector<double> &xs) { return dot(dyd, ref_dropout(xs, rate, 99)); };
        expect_near(dx[0].f, finite_diff(loss, to_double(x.f)), 1e-5, 1e-5, "dropout backward");
    }
}

// ---- User errors: one test per message ----

TEST(MiscErrors, TableMustBeRank2) {
    expect_error([] { infer_types(emb(), {{DType::F32, {10}}, {DType::I32, {3}}}); },
                 "embedding 'tok': input 0 (table) must have rank 2, got shape [10]");
}

TEST(MiscErrors, IdsMustBeInt) {
    expect_error([] { infer_types(emb(), {{DType::F32, {10, 4}}, {DType::F32, {3}}}); },
                 "embedding 'tok': input 1 (ids) must be i32");
}

TEST(MiscErrors, TableMustBeFloat) {
    expect_error([] { infer_types(emb(), {{DType::I32, {10, 4}}, {DType::I32, {3}}}); }, "input 0 (table) must be f32");
}

TEST(MiscErrors, IdsNeedRankOne) {
    expect_error([] { infer_types(emb(), {{DType::F32, {10, 4}}, {DType::I32, {}}}); },
                 "embedding 'tok': input 1 (ids) must have rank at least 1, got shape []");
}

TEST(MiscErrors, GradDyShape) {
    expect_error([] { infer_types(emb_grad(10), {{DType::F32, {3, 5, 4}}, {DType::I32, {3, 4}}}); },
                 "embedding_grad 'tok': dy [3, 5, 4] must be the ids' shape [3, 4] followed by the embedding width");
    expect_error([] { infer_types(emb_grad(10), {{DType::F32, {3}}, {DType::I32, {3}}}); }, "must be the ids' shape");
}

TEST(MiscErrors, GradVocab) {
    expect_error([] { infer_types(emb_grad(0), {{DType::F32, {3, 4}}, {DType::I32, {3}}}); },
                 "embedding_grad 'tok': attribute 'vocab' = 0 must be at least 1");
    expect_error([] { infer_types({OpKind::EmbeddingGrad, "tok", {}}, {{DType::F32, {3, 4}}, {DType::I32, {3}}}); },
                 "missing attribute 'vocab'");
}

TEST(MiscErrors, DropoutRate) {
    expect_error([] { infer_types(dropout(1.0, 1), {{DType::F32, {3}}}); },
                 "dropout 'drop': attribute 'rate' = 1 must be in [0, 1) (the probability of dropping an element)");
    expect_error([] { infer_types(dropout(-0.1, 1), {{DType::F32, {3}}}); }, "attribute 'rate' = -0.1 must be in [0, 1)");
}

TEST(MiscErrors, DropoutSeed) {
    expect_error([] { infer_types(dropout(0.5, -1), {{DType::F32, {3}}}); },
                 "dropout 'drop': attribute 'seed' = -1 must be in [0, 2147483647]");
}

TEST(MiscErrors, DropoutNeedsSeed) {
    expect_error([] { infer_types({OpKind::Dropout, "drop", {{"rate", 0.5}}}, {{DType::F32, {3}}}); },
                 "missing attribute 'seed'");
}

}  // namespace
}  // namespace tessera::test
