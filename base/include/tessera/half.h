// The two 16-bit float storage types of mixed precision, bf16 and fp16 (IEEE
// binary16), and their conversions to and from fp32, done in software so that
// the CPU kernels, checkpoints and tests agree bit for bit on any host:
//
//   bf16: fp32's sign and 8-bit exponent, 7 stored mantissa bits (fp32's top
//         16 bits). To bf16 rounds to nearest, ties to even; NaN stays NaN
//         (quiet, sign kept); the range is fp32's, so only values within half
//         a bf16 step of FLT_MAX's neighbourhood round to infinity.
//   fp16: 5-bit exponent (bias 15), 10 stored mantissa bits, subnormals down
//         to 2^-24. To fp16 rounds to nearest, ties to even, through the
//         subnormals; magnitudes from 65520 up become infinity; NaN stays NaN.
//
// Widening (to fp32) is exact for both.
#pragma once

#include <cstdint>

namespace tessera {

uint16_t bf16_from_float(float f);
float float_from_bf16(uint16_t h);

uint16_t f16_from_float(float f);
float float_from_f16(uint16_t h);

}  // namespace tessera
