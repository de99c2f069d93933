#include "tessera/exec/init.h"

#include <cmath>

#include "tessera/error.h"

namespace tessera {

namespace {

// splitmix64's finaliser: a bijection on 64 bits that mixes every input bit
// into every output bit, which is what makes x -> mix(key + x * gamma) usable
// as a counter-based generator.
uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;

uint64_t draw(uint64_t key, uint64_t counter) { return mix(key + counter * kGamma); }

// The top 53 bits, offset by half a step: never exactly 0 or 1, so log() is safe.
double to_unit(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

}  // namespace

uint64_t init_stream_key(uint64_t seed, const std::string &name) {
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over the name
    for (unsigned char c : name) {
        h ^= c;
        h *= 0x100000001b3ULL;
    }
    return mix(mix(seed) ^ mix(h + kGamma));
}

double uniform_at(uint64_t key, int64_t index) { return to_unit(draw(key, static_cast<uint64_t>(index))); }

double normal_at(uint64_t key, int64_t index) {
    // Box-Muller with two draws of the element's own: counters 2i and 2i+1 of a
    // second stream, so that the normal and uniform draws of an index differ.
    uint64_t k = mix(key ^ 0x5bd1e9955bd1e995ULL);
    double u1 = to_unit(draw(k, 2 * static_cast<uint64_t>(index)));
    double u2 = to_unit(draw(k, 2 * static_cast<uint64_t>(index) + 1));
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

void fill_init(const Init &init, uint64_t seed, const std::string &tensor_name, float *out, int64_t n,
               int64_t first) {
    fill_init(init, seed, tensor_name, Shape{}, out, n, first);
}

void fill_init(const Init &init, uint64_t seed, const std::string &tensor_name, const Shape &shape, float *out,
               int64_t n, int64_t first) {
    TESSERA_CHECK(n >= 0 && first >= 0, "fill_init of '", tensor_name, "': bad range [", first, ", ", first + n, ")");
    uint64_t key = init_stream_key(seed, tensor_name);
    auto normal = [&](double stddev) {
        for (int64_t i = 0; i < n; i++) out[i] = static_cast<float>(stddev * normal_at(key, first + i));
    };
    auto uniform = [&](double limit) {
        for (int64_t i = 0; i < n; i++) out[i] = static_cast<float>(limit * (2 * uniform_at(key, first + i) - 1));
    };
    auto who = [&] { return "initialiser " + init_str(init) + " of '" + tensor_name + "'"; };
    switch (init.kind) {
    case Init::Kind::Zeros:
        for (int64_t i = 0; i < n; i++) out[i] = 0.0f;
        return;
    case Init::Kind::Constant:
        for (int64_t i = 0; i < n; i++) out[i] = static_cast<float>(init.value);
        return;
    case Init::Kind::HeNormal:
        TESSERA_CHECK(init.fan_in > 0, who(), ": fan_in must be positive, got ", init.fan_in);
        normal(std::sqrt(2.0 / static_cast<double>(init.fan_in)));
        return;
    case Init::Kind::XavierUniform:
        TESSERA_CHECK(init.fan_in > 0 && init.fan_out > 0, who(), ": fan_in and fan_out must be positive, got ",
                      init.fan_in, " and ", init.fan_out);
        uniform(std::sqrt(6.0 / static_cast<double>(init.fan_in + init.fan_out)));
        return;
    case Init::Kind::Normal:
        TESSERA_CHECK(init.value >= 0 && std::isfinite(init.value), who(),
                      ": the standard deviation must be finite and >= 0, got ", init.value);
        normal(init.value);
        return;
    case Init::Kind::Uniform:
        TESSERA_CHECK(init.value >= 0 && std::isfinite(init.value), who(),
                      ": the limit must be finite and >= 0, got ", init.value);
        uniform(init.value);
        return;
    case Init::Kind::CausalMask: {
        int r = static_cast<int>(shape.size());
        TESSERA_CHECK(r >= 2 && shape[r - 1] == shape[r - 2], who(), ": a causal mask needs a shape [..., T, T], got ",
                      r == 0 ? std::string("no shape") : shape_str(shape));
        int64_t T = shape[r - 1];
        for (int64_t i = 0; i < n; i++) {
            int64_t idx = first + i, col = idx % T, row = (idx / T) % T;
            out[i] = col > row ? static_cast<float>(init.value) : 0.0f;
        }
        return;
    }
    }
    TESSERA_INTERNAL_ASSERT(false, "unknown init kind ", static_cast<int>(init.kind));
}

}  // namespace tessera
