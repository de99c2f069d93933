#include "tessera/half.h"

#include <cstring>

namespace tessera {

namespace {

uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

float float_of(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// `value` >> `shift`, rounded to nearest, ties to even (shift in 1..31).
uint32_t shift_right_even(uint32_t value, int shift) {
    const uint32_t kept = value >> shift, rest = value & ((1u << shift) - 1), half = 1u << (shift - 1);
    return kept + (rest > half || (rest == half && (kept & 1u)) ? 1u : 0u);
}

}  // namespace

uint16_t bf16_from_float(float f) {
    const uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN, made quiet
    // A carry out of the mantissa steps the exponent, up to infinity: the right rounding.
    return static_cast<uint16_t>(shift_right_even(u, 16));
}

float float_from_bf16(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

uint16_t f16_from_float(float f) {
    const uint32_t u = bits_of(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((mag >> 13) & 0x03ffu));  // NaN
    const int exp = static_cast<int>(mag >> 23) - 127;  // unbiased; -127 for zeros and subnormals
    if (exp >= 16) return static_cast<uint16_t>(sign | 0x7c00u);  // past 65504's binade (and infinity)
    if (exp >= -14) {
        // Normal in fp16: re-bias, drop 13 mantissa bits; a carry may step the
        // exponent, up to infinity (65520 and above).
        const uint32_t rebased = ((static_cast<uint32_t>(exp + 15)) << 23) | (mag & 0x007fffffu);
        return static_cast<uint16_t>(sign | shift_right_even(rebased, 13));
    }
    if (exp < -25) return sign;  // under half of the least subnormal, 2^-24: zero
    // Subnormal in fp16: the value in units of 2^-24, the implicit bit made explicit.
    const uint32_t mantissa = (mag & 0x007fffffu) | 0x00800000u;
    return static_cast<uint16_t>(sign | shift_right_even(mantissa, -exp - 1));
}

float float_from_f16(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x03ffu;
    if (exp == 0x1fu) return float_of(sign | 0x7f800000u | (mant << 13));  // infinity, NaN
    if (exp != 0) return float_of(sign | ((exp + 112u) << 23) | (mant << 13));
    // Zero or subnormal: mant * 2^-24, exact in fp32.
    const float value = static_cast<float>(mant) * float_of(0x33800000u);  // 2^-24
    return float_of(sign | bits_of(value));
}

}  // namespace tessera
