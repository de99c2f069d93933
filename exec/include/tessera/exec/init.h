// Parameter initialisation that does not depend on how a run is laid out.
//
// Element i of a tensor is a pure function of (seed, tensor name, i): a counter-
// based generator (splitmix64 over a hash of all three), not a sequential one.
// So the values do not change with the order tensors are created in, the number
// of threads, or, later, how a tensor is partitioned: a device holding elements
// [first, first + n) of a shard draws exactly those elements.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/graph/graph.h"

namespace tessera {

// Fills out[0, n) with elements [first, first + n) of `tensor_name` initialised
// by `init`:
//   Zeros: 0; Constant: init.value;
//   HeNormal: N(0, sqrt(2 / fan_in)); XavierUniform: U(+-sqrt(6 / (fan_in + fan_out)));
//   Normal: N(0, init.value); Uniform: U(+-init.value);
//   CausalMask: for a tensor [..., T, T], 0 at (i, j) with j <= i and
//   init.value above the diagonal (needs `shape`).
// Throws tessera::Error naming the tensor for a non-positive fan, a negative
// standard deviation or limit, or a causal mask whose shape is not [..., T, T].
void fill_init(const Init &init, uint64_t seed, const std::string &tensor_name, const Shape &shape, float *out,
               int64_t n, int64_t first = 0);
// The same for initialisers that do not depend on the shape (all but CausalMask).
void fill_init(const Init &init, uint64_t seed, const std::string &tensor_name, float *out, int64_t n,
               int64_t first = 0);

// The generator itself, exposed for tests and for other counter-based draws:
// a uniform double in (0, 1) and a standard normal for element `index` of the
// stream keyed by (seed, name).
uint64_t init_stream_key(uint64_t seed, const std::string &name);
double uniform_at(uint64_t key, int64_t index);
double normal_at(uint64_t key, int64_t index);

}  // namespace tessera
