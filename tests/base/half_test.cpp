// bf16 and fp16 conversions (base/half.h) against references computed in
// double from the formats' definitions: every 16-bit pattern widened, and
// narrowing checked against the nearest representable value found by search,
// ties to the even pattern.
#include "tessera/half.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace tessera {
namespace {

float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// fp16's value from its definition: (-1)^s * 2^(e-15) * (1 + m/1024), or
// 2^-14 * m/1024 when e = 0; infinity and NaN when e = 31.
double f16_value(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const double sign = s ? -1.0 : 1.0;
    if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
    if (e == 0) return sign * std::ldexp(m / 1024.0, -14);
    return sign * std::ldexp(1.0 + m / 1024.0, e - 15);
}

// bf16's value from its definition (fp32's exponent, 7 mantissa bits).
double bf16_value(uint16_t h) {
    const int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    const double sign = s ? -1.0 : 1.0;
    if (e == 255) return m ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
    if (e == 0) return sign * std::ldexp(m / 128.0, -126);
    return sign * std::ldexp(1.0 + m / 128.0, e - 127);
}

// The nearest of the finite non-negative patterns (sorted by value, one per
// value: +0 only) to |x|, ties to the even pattern; infinity past the largest
// finite value plus half its step (IEEE round to nearest).
uint16_t nearest(double x, const std::vector<uint16_t> &patterns, double (*value)(uint16_t), double overflow) {
    const double a = std::fabs(x);
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    if (a >= overflow) return sign | static_cast<uint16_t>(value == f16_value ? 0x7c00 : 0x7f80);
    auto above = std::lower_bound(patterns.begin(), patterns.end(), a,
                                  [&](uint16_t p, double v) { return value(p) < v; });
    if (above == patterns.begin()) return sign | *above;
    const uint16_t hi = *above, lo = *(above - 1);
    const double dl = a - value(lo), dh = value(hi) - a;
    if (dl < dh) return sign | lo;
    if (dh < dl) return sign | hi;
    return sign | ((lo & 1) == 0 ? lo : hi);
}

std::vector<uint16_t> finite_non_negative(uint16_t infinity) {
    std::vector<uint16_t> p;
    for (uint32_t h = 0; h <= infinity; h++) p.push_back(static_cast<uint16_t>(h));  // ascending by value
    return p;
}

// Floats across every binade both formats meet, their boundaries and ties.
std::vector<float> probe_floats() {
    std::vector<float> fs = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e-8f, 2.9802322e-8f,
                             5.9604645e-8f, 6.1035156e-5f, std::numeric_limits<float>::max(),
                             std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()};
    std::mt19937 g(7);
    std::uniform_int_distribution<uint32_t> bits(0, 0xffffffffu);
    for (int i = 0; i < 200000; i++) {
        const float f = from_bits(bits(g));
        if (!std::isnan(f)) fs.push_back(f);
    }
    // Exact ties: halfway between neighbours of both formats.
    for (uint32_t h = 0; h < 0x7c00; h += 37) fs.push_back(static_cast<float>((f16_value(h) + f16_value(h + 1)) / 2));
    for (uint32_t h = 0; h < 0x7f80; h += 53)
        fs.push_back(static_cast<float>((bf16_value(h) + bf16_value(h + 1)) / 2));
    std::uniform_real_distribution<float> small(-70000.0f, 70000.0f);
    for (int i = 0; i < 100000; i++) fs.push_back(small(g) * (i % 2 ? 1.0f : 1e-6f));
    return fs;
}

TEST(Half, EveryF16PatternWidensToItsValue) {
    for (uint32_t h = 0; h <= 0xffff; h++) {
        const double want = f16_value(static_cast<uint16_t>(h));
        const float got = float_from_f16(static_cast<uint16_t>(h));
        if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got)) << h;
            continue;
        }
        ASSERT_EQ(static_cast<double>(got), want) << "pattern " << h;
        ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << h;
        ASSERT_EQ(f16_from_float(got), h) << "round trip of pattern " << h;
    }
}

TEST(Half, EveryBf16PatternWidensToItsValue) {
    for (uint32_t h = 0; h <= 0xffff; h++) {
        const double want = bf16_value(static_cast<uint16_t>(h));
        const float got = float_from_bf16(static_cast<uint16_t>(h));
        if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got)) << h;
            continue;
        }
        ASSERT_EQ(static_cast<double>(got), want) << "pattern " << h;
        ASSERT_EQ(bf16_from_float(got), h) << "round trip of pattern " << h;
    }
}

TEST(Half, NarrowingRoundsToTheNearestTiesToEven) {
    const std::vector<uint16_t> f16 = finite_non_negative(0x7c00), bf16 = finite_non_negative(0x7f80);
    // Past the largest finite value plus half its step, IEEE rounds to infinity.
    const double f16_overflow = 65504.0 + 16.0, bf16_overflow = bf16_value(0x7f7f) + std::ldexp(1.0, 127 - 8);
    int checked = 0;
    for (float f : probe_floats()) {
        ASSERT_EQ(f16_from_float(f), nearest(f, f16, f16_value, f16_overflow)) << "fp16 of " << f;
        ASSERT_EQ(bf16_from_float(f), nearest(f, bf16, bf16_value, bf16_overflow)) << "bf16 of " << f;
        checked++;
    }
    EXPECT_GT(checked, 300000);
}

TEST(Half, NanStaysNanAndInfinityStaysInfinity) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    EXPECT_TRUE(std::isnan(float_from_f16(f16_from_float(nan))));
    EXPECT_TRUE(std::isnan(float_from_bf16(bf16_from_float(nan))));
    // A signalling NaN whose payload lies in the dropped bits must not become infinity.
    const float quiet_payload_low = from_bits(0x7f800001u);
    EXPECT_TRUE(std::isnan(float_from_f16(f16_from_float(quiet_payload_low))));
    EXPECT_TRUE(std::isnan(float_from_bf16(bf16_from_float(quiet_payload_low))));
    EXPECT_EQ(f16_from_float(inf), 0x7c00);
    EXPECT_EQ(f16_from_float(-inf), 0xfc00);
    EXPECT_EQ(bf16_from_float(inf), 0x7f80);
    EXPECT_EQ(bf16_from_float(-inf), 0xff80);
}

}  // namespace
}  // namespace tessera
