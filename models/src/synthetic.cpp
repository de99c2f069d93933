// Synthetic datasets whose labels follow a fixed rule, so that a model can learn
// them and a training run shows a falling loss without any file on disk. Every value
// is drawn from a counter-based stream keyed on the seed (detail::draw64), never
// from <random>'s distributions, whose output differs between standard libraries.
#include <cstdint>
#include <numeric>

#include "tessera/error.h"
#include "tessera/models/data.h"

namespace tessera {
namespace {

// One key per independent stream, so that, say, the teacher does not change when
// the dataset size does.
enum Stream : uint64_t { kInputs = 1, kTeacher = 2, kRule = 3, kRestart = 4 };

uint64_t stream_key(uint64_t seed, Stream s) { return detail::mix64(seed ^ detail::mix64(s)); }

void check_spec(const SyntheticSpec &s) {
    TESSERA_CHECK(!s.sample_shape.empty(), "synthetic data needs a sample shape, got []");
    for (int64_t d : s.sample_shape)
        TESSERA_CHECK(d > 0, "synthetic sample shape ", shape_str(s.sample_shape),
                      " has a non-positive dimension");
    TESSERA_CHECK(s.size > 0, "synthetic dataset size must be positive, got ", s.size);
    if (s.dtype == DType::F32) {
        TESSERA_CHECK(s.num_classes >= 2, "synthetic f32 data needs at least 2 classes, got ",
                      s.num_classes);
        TESSERA_CHECK(s.label_elements == 1, "synthetic f32 data has one label per sample, but ",
                      s.label_elements, " labels per sample were asked for");
        return;
    }
    const int64_t tokens = num_elements(s.sample_shape);
    TESSERA_CHECK(s.vocab >= 2 && s.vocab <= INT32_MAX, "synthetic token data needs a vocabulary "
                  "of 2 to 2^31-1 ids, got ", s.vocab);
    TESSERA_CHECK(s.label_elements == 1 || s.label_elements == tokens, "synthetic token data has ",
                  "one label per sample or one per token (", tokens, " for sample shape ",
                  shape_str(s.sample_shape), "), not ", s.label_elements);
    if (s.label_elements == tokens && tokens > 1)
        TESSERA_CHECK(s.num_classes == 0 || s.num_classes == s.vocab, "synthetic next-token labels "
                      "are token ids, so num_classes must be the vocabulary ", s.vocab, ", not ",
                      s.num_classes);
    else
        TESSERA_CHECK(s.num_classes >= 2, "synthetic sequence classification needs at least 2 "
                      "classes, got ", s.num_classes);
}

}  // namespace

std::vector<float> synthetic_teacher(const SyntheticSpec &spec) {
    check_spec(spec);
    TESSERA_CHECK(spec.dtype == DType::F32, "only f32 synthetic data has a linear teacher");
    const int64_t n = spec.num_classes * num_elements(spec.sample_shape);
    const uint64_t key = stream_key(spec.seed, kTeacher);
    std::vector<float> w(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i++) w[i] = 2.0f * detail::draw_unit(key, i) - 1.0f;
    return w;
}

NextTokenRule synthetic_rule(const SyntheticSpec &spec) {
    check_spec(spec);
    TESSERA_CHECK(spec.dtype == DType::I32, "only token synthetic data has a next-token rule");
    const uint64_t key = stream_key(spec.seed, kRule);
    const uint64_t v = static_cast<uint64_t>(spec.vocab);
    NextTokenRule r;
    // a must be coprime to the vocabulary so that next() is a permutation of the ids and
    // every id appears as a label. a == 1 is allowed (vocab 2 has no other choice).
    for (uint64_t c = 0;; c++) {
        r.a = 1 + static_cast<int64_t>(detail::draw_below(key, c, v - 1));
        if (std::gcd(r.a, spec.vocab) == 1) break;
    }
    r.b = static_cast<int64_t>(detail::draw_below(key, ~0ull, v));
    return r;
}

Dataset make_synthetic(const SyntheticSpec &spec) {
    check_spec(spec);
    Dataset d;
    d.name = "synthetic";
    d.sample_shape = spec.sample_shape;
    d.dtype = spec.dtype;
    d.size = spec.size;
    d.label_elements = spec.label_elements;
    const int64_t se = num_elements(spec.sample_shape);
    const uint64_t in_key = stream_key(spec.seed, kInputs);

    if (spec.dtype == DType::F32) {
        d.num_classes = spec.num_classes;
        const std::vector<float> w = synthetic_teacher(spec);
        d.x_f32.resize(static_cast<size_t>(spec.size * se));
        d.labels.resize(static_cast<size_t>(spec.size));
        for (int64_t s = 0; s < spec.size; s++) {
            float *x = d.x_f32.data() + s * se;
            for (int64_t i = 0; i < se; i++) x[i] = 2.0f * detail::draw_unit(in_key, s * se + i) - 1.0f;
            int32_t best = 0;
            double best_score = 0;
            for (int64_t c = 0; c < spec.num_classes; c++) {
                double score = 0;
                for (int64_t i = 0; i < se; i++) score += double(w[c * se + i]) * double(x[i]);
                if (c == 0 || score > best_score) best = static_cast<int32_t>(c), best_score = score;
            }
            d.labels[s] = best;
        }
        return d;
    }

    const NextTokenRule rule = synthetic_rule(spec);
    const int64_t v = spec.vocab;
    auto next = [&](int64_t x) { return (rule.a * x + rule.b) % v; };
    const bool per_token = spec.label_elements == se && se > 1;
    d.vocab = v;
    d.num_classes = per_token ? v : spec.num_classes;
    const uint64_t restart_key = stream_key(spec.seed, kRestart);
    d.x_i32.resize(static_cast<size_t>(spec.size * se));
    d.labels.resize(static_cast<size_t>(spec.size * spec.label_elements));
    for (int64_t s = 0; s < spec.size; s++) {
        int32_t *x = d.x_i32.data() + s * se;
        for (int64_t t = 0; t < se; t++) {
            const uint64_t c = static_cast<uint64_t>(s * se + t);
            // Restarts keep the inputs varied: without them a whole sequence would be a
            // function of its first token.
            const bool restart = t == 0 || detail::draw_below(restart_key, c, 8) == 0;
            x[t] = static_cast<int32_t>(restart ? detail::draw_below(in_key, c, v) : next(x[t - 1]));
        }
        if (per_token) {
            for (int64_t t = 0; t < se; t++) d.labels[s * se + t] = static_cast<int32_t>(next(x[t]));
        } else {
            d.labels[s] = static_cast<int32_t>(next(x[se - 1]) % spec.num_classes);
        }
    }
    return d;
}

}  // namespace tessera
