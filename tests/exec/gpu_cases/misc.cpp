// Cases for the misc family: lookups and scatter-adds with repeated and
// out-of-range ids at every id rank, and dropout at several rates and seeds.
// Dropout's inputs are kept away from zero, so that an element masked
// differently on the two sides shows up as an error larger than any tolerance.
#include <cstdint>
#include <random>

#include "cases.h"

namespace tessera::test {

namespace {

void uniform(std::vector<float> &f, uint32_t seed, float lo, float hi) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    for (float &v : f) v = d(g);
}

// Input 0 random floats; input 1 ids cycling through `pattern`, which holds
// repeats and ids outside [0, rows).
GpuCase with_ids(const std::string &label, OpCall call, std::vector<TensorType> in, std::vector<int32_t> pattern) {
    GpuCase c{label, std::move(call), std::move(in), {}, 1e-5, 1e-5};
    c.fill = [pattern](int i, std::vector<float> &f, std::vector<int32_t> &n) {
        if (i == 0) uniform(f, 77, -1.0f, 1.0f);
        for (size_t k = 0; k < n.size(); k++) n[k] = pattern[k % pattern.size()];
    };
    return c;
}

}  // namespace

std::vector<GpuCase> gpu_cases_misc() {
    std::vector<GpuCase> v;
    const std::vector<int32_t> ids = {3, 0, 10, 3, -4, 11, 7, 250, 3, 1, -1};
    auto emb = [&](const std::string &what, const Shape &id_shape, int64_t V, int64_t D) {
        v.push_back(with_ids("embedding " + what, {OpKind::Embedding, "emb", {}},
                             {{DType::F32, {V, D}}, {DType::I32, id_shape}}, ids));
    };
    emb("rank1", {11}, 11, 7);
    emb("rank2", {3, 4}, 11, 5);
    emb("rank3", {2, 2, 3}, 11, 1);
    emb("vocab1", {6}, 1, 9);
    auto emb_grad = [&](const std::string &what, const Shape &id_shape, int64_t vocab, int64_t D) {
        Shape dy = id_shape;
        dy.push_back(D);
        v.push_back(with_ids("embedding_grad " + what, {OpKind::EmbeddingGrad, "emb", {{"vocab", vocab}}},
                             {{DType::F32, dy}, {DType::I32, id_shape}}, ids));
    };
    emb_grad("rank1", {11}, 11, 7);
    emb_grad("rank2 many repeats", {9, 13}, 11, 5);
    emb_grad("rank3", {2, 2, 3}, 13, 1);
    emb_grad("vocab1", {6}, 1, 9);
    emb_grad("rows never hit", {4}, 40, 3);

    auto dropout = [&](const std::string &what, const Shape &s, double rate, int64_t seed) {
        GpuCase c{"dropout " + what, {OpKind::Dropout, "drop", {{"rate", rate}, {"seed", seed}}},
                  {{DType::F32, s}}, {}, 1e-6, 0};
        c.fill = [](int, std::vector<float> &f, std::vector<int32_t> &) {
            uniform(f, 91, 0.5f, 1.5f);
            for (size_t k = 0; k < f.size(); k += 2) f[k] = -f[k];
        };
        v.push_back(std::move(c));
    };
    dropout("rate0.5", {1000}, 0.5, 7);
    dropout("rank4 rate0.1 seed0", {2, 3, 4, 5}, 0.1, 0);
    dropout("rate0 max seed", {3, 17}, 0.0, INT32_MAX);
    dropout("rate0.9", {4, 257}, 0.9, 123456789);
    dropout("rate1/3", {5, 1, 7}, 1.0 / 3.0, 42);
    return v;
}

}  // namespace tessera::test
