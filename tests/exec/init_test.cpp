// Counter-based parameter initialisation: determinism, independence of layout,
// and the distributions' moments.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tessera/error.h"
#include "tessera/exec/init.h"

namespace tessera {
namespace {

std::vector<float> draw(const Init &init, uint64_t seed, const std::string &name, int64_t n, int64_t first = 0) {
    std::vector<float> v(static_cast<size_t>(n));
    fill_init(init, seed, name, v.data(), n, first);
    return v;
}

struct Moments {
    double mean = 0, var = 0, min = 1e300, max = -1e300;
};

Moments moments(const std::vector<float> &v) {
    Moments m;
    for (float x : v) {
        m.mean += x;
        m.min = std::min<double>(m.min, x);
        m.max = std::max<double>(m.max, x);
    }
    m.mean /= static_cast<double>(v.size());
    for (float x : v) m.var += (x - m.mean) * (x - m.mean);
    m.var /= static_cast<double>(v.size() - 1);
    return m;
}

std::string error_of(const Init &init, const std::string &name) {
    try {
        draw(init, 1, name, 4);
    } catch (const Error &e) {
        return e.what();
    }
    return "<no error>";
}

constexpr int64_t kN = 1 << 20;

TEST(Init, SameSeedAndNameGiveTheSameValues) {
    Init he = Init::he_normal(784);
    EXPECT_EQ(draw(he, 42, "fc1.w", 1000), draw(he, 42, "fc1.w", 1000));
}

TEST(Init, DifferentNamesOrSeedsGiveDifferentValues) {
    Init he = Init::he_normal(784);
    std::vector<float> a = draw(he, 42, "fc1.w", 1000), b = draw(he, 42, "fc2.w", 1000),
                       c = draw(he, 43, "fc1.w", 1000);
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < 1000; i++) {
        same_ab += a[i] == b[i];
        same_ac += a[i] == c[i];
    }
    EXPECT_EQ(same_ab, 0);
    EXPECT_EQ(same_ac, 0);
    // Nor are they shifted copies of each other (a weak counter-based mix would be).
    int shifted = 0;
    for (int i = 0; i + 1 < 1000; i++) shifted += a[i + 1] == b[i];
    EXPECT_EQ(shifted, 0);
}

TEST(Init, EachElementDependsOnlyOnItsIndexNotOnHowTheTensorIsFilled) {
    Init u = Init::uniform(0.5);
    std::vector<float> whole = draw(u, 7, "emb.table", 10000);
    std::vector<float> tail = draw(u, 7, "emb.table", 3000, 7000);  // a shard, or a chunk
    for (int i = 0; i < 3000; i++) ASSERT_EQ(tail[i], whole[7000 + i]) << i;
    std::vector<float> head = draw(u, 7, "emb.table", 10);
    for (int i = 0; i < 10; i++) ASSERT_EQ(head[i], whole[i]);
}

TEST(Init, HeNormalHasMeanZeroAndVarianceTwoOverFanIn) {
    const int64_t fan_in = 50;
    Moments m = moments(draw(Init::he_normal(fan_in), 3, "conv1.w", kN));
    double var = 2.0 / fan_in;
    // Standard error of the mean is sqrt(var / n) ~ 2e-4; of the variance, var*sqrt(2/n) ~ 5e-5.
    EXPECT_NEAR(m.mean, 0.0, 5 * std::sqrt(var / kN));
    EXPECT_NEAR(m.var, var, 5 * var * std::sqrt(2.0 / kN));
    // Gaussian tails: with 1M draws the extremes reach beyond 4.5 sigma but not 6.
    double sd = std::sqrt(var);
    EXPECT_GT(m.max, 4.5 * sd);
    EXPECT_LT(m.max, 6.5 * sd);
    EXPECT_LT(m.min, -4.5 * sd);
}

TEST(Init, NormalIsGaussianWithTheGivenStddev) {
    std::vector<float> v = draw(Init::normal(0.02), 11, "tok.embedding", kN);
    Moments m = moments(v);
    EXPECT_NEAR(m.mean, 0.0, 5 * 0.02 / std::sqrt(double(kN)));
    EXPECT_NEAR(m.var, 0.0004, 5 * 0.0004 * std::sqrt(2.0 / kN));
    // Shape: the fraction within one sigma is 68.27% for a Gaussian (vs 57.7% for a uniform of the same variance).
    int64_t within = 0;
    for (float x : v) within += std::fabs(x) < 0.02;
    EXPECT_NEAR(double(within) / kN, 0.6827, 0.003);
}

TEST(Init, XavierUniformCoversTheRangeEvenly) {
    const int64_t fan_in = 300, fan_out = 100;
    double limit = std::sqrt(6.0 / (fan_in + fan_out));
    std::vector<float> v = draw(Init::xavier_uniform(fan_in, fan_out), 5, "fc.w", kN);
    Moments m = moments(v);
    EXPECT_GE(m.min, -limit);
    EXPECT_LE(m.max, limit);
    EXPECT_GT(m.max, limit * 0.999);
    EXPECT_LT(m.min, -limit * 0.999);
    double var = limit * limit / 3;
    EXPECT_NEAR(m.mean, 0.0, 5 * std::sqrt(var / kN));
    EXPECT_NEAR(m.var, var, 5 * var * std::sqrt(0.8 / kN));  // var of x^2 for U: 4/5 var^2
    // Ten equal bins each get a tenth, within 5 standard errors.
    std::vector<int64_t> bins(10);
    for (float x : v) bins[std::min(9, static_cast<int>((x + limit) / (2 * limit) * 10))]++;
    for (int64_t b : bins) EXPECT_NEAR(double(b) / kN, 0.1, 5 * std::sqrt(0.09 / kN));
}

TEST(Init, UniformConstantAndZeros) {
    Moments m = moments(draw(Init::uniform(2.0), 9, "u", kN));
    EXPECT_GE(m.min, -2.0);
    EXPECT_LE(m.max, 2.0);
    EXPECT_NEAR(m.var, 4.0 / 3, 5 * (4.0 / 3) * std::sqrt(0.8 / kN));
    for (float x : draw(Init::constant(0.25), 1, "c", 100)) EXPECT_EQ(x, 0.25f);
    for (float x : draw(Init::zeros(), 1, "z", 100)) EXPECT_EQ(x, 0.0f);
}

TEST(Init, SuccessiveElementsAreUncorrelated) {
    std::vector<float> v = draw(Init::normal(1.0), 1, "x", kN);
    double c = 0;
    for (int64_t i = 0; i + 1 < kN; i++) c += double(v[i]) * v[i + 1];
    EXPECT_NEAR(c / (kN - 1), 0.0, 5 / std::sqrt(double(kN)));
}

TEST(Init, CausalMaskHidesTheFuture) {
    const int64_t T = 5;
    std::vector<float> v(2 * T * T);
    fill_init(Init::causal_mask(-1e9), 1, "attn.mask", Shape{2, T, T}, v.data(), 2 * T * T);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++) EXPECT_EQ(v[(b * T + i) * T + j], j > i ? -1e9f : 0.0f) << i << "," << j;
    std::string msg;
    try {
        fill_init(Init::causal_mask(), 1, "attn.mask", Shape{4, 5}, v.data(), 20);
    } catch (const Error &e) {
        msg = e.what();
    }
    EXPECT_NE(msg.find("'attn.mask': a causal mask needs a shape [..., T, T], got [4, 5]"), std::string::npos)
        << msg;
}

TEST(Init, BadParametersNameTheTensor) {
    EXPECT_NE(error_of(Init::he_normal(0), "fc1.w").find("of 'fc1.w': fan_in must be positive, got 0"),
              std::string::npos)
        << error_of(Init::he_normal(0), "fc1.w");
    EXPECT_NE(error_of(Init::xavier_uniform(3, 0), "fc2.w").find("of 'fc2.w': fan_in and fan_out must be positive"),
              std::string::npos);
    EXPECT_NE(error_of(Init::normal(-1), "e").find("the standard deviation must be finite and >= 0, got -1"),
              std::string::npos);
    EXPECT_NE(error_of(Init::uniform(-2), "u").find("the limit must be finite and >= 0, got -2"), std::string::npos);
}

}  // namespace
}  // namespace tessera
