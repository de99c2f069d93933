// Datasets for training: Fashion-MNIST from its IDX files, learnable synthetic
// data for any model, and a stateless batcher.
//
// A Dataset is a plain value holding every sample in memory, flattened row-major.
// The Batcher's order is a pure function of (seed, epoch), so a run resumed from a
// checkpoint at (epoch, batch index) sees exactly the batches it would have seen.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/types.h"

namespace tessera {

struct Dataset {
    std::string name;             // "fashion-mnist", "synthetic"; used in error messages
    Shape sample_shape;           // one sample, without the batch dimension
    DType dtype = DType::F32;     // F32 values in x_f32, or I32 token ids in x_i32
    int64_t size = 0;             // number of samples
    std::vector<float> x_f32;     // size * sample elements when dtype is F32, else empty
    std::vector<int32_t> x_i32;   // size * sample elements when dtype is I32, else empty
    int64_t vocab = 0;            // token ids lie in [0, vocab) when dtype is I32
    int64_t label_elements = 1;   // labels per sample: 1 for a classifier, T for a sequence
    std::vector<int32_t> labels;  // size * label_elements, each in [0, num_classes)
    int64_t num_classes = 0;

    int64_t sample_elements() const { return num_elements(sample_shape); }
    bool operator==(const Dataset &) const = default;
};

// ---- Fashion-MNIST ----------------------------------------------------------------

constexpr const char *kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";
// The mean and standard deviation of the training pixels scaled to [0, 1]. Every
// pixel p in [0, 255] becomes (p / 255 - mean) / std, so inputs are roughly zero-mean
// and unit-variance and the usual initialisers keep activations in range.
constexpr float kFashionMnistMean = 0.2860f;
constexpr float kFashionMnistStd = 0.3530f;

// Reads the training (60000) or test (10000) split from the gzipped IDX files in
// `dir` (train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz, or the t10k-
// pair), as shipped by Debian's `dataset-fashion-mnist`. Samples have shape [784]
// (28x28 row-major), normalised as above; labels are one class in [0, 10) each.
// Throws tessera::Error naming the file for a missing directory or file, a bad
// magic number or dimension, a truncated or corrupt file, image and label counts
// that differ, or a label out of range.
Dataset load_fashion_mnist(const std::string &dir, bool train);

// ---- Synthetic data -----------------------------------------------------------------

// Data that a model can learn, so that a training run shows a falling loss.
//
//  * F32 inputs: each value uniform in [-1, 1); the label is the argmax over classes
//    of a fixed random linear map of the flattened sample (a "teacher", see
//    synthetic_teacher). label_elements must be 1.
//  * I32 inputs (token ids in [0, vocab)): sample_shape is [T] (or any shape with T
//    elements). Labels follow the next-token rule next(x) = (a*x + b) mod vocab, with
//    a coprime to vocab and a, b drawn from the seed:
//      - label_elements == T: labels[t] = next(x[t]) and num_classes == vocab. The
//        sequence itself follows x[t+1] = next(x[t]) except for random restarts (one
//        step in 8), so the labels are mostly the input shifted by one.
//      - label_elements == 1: a sequence classifier; the label is
//        next(x[T-1]) mod num_classes, which needs the model to carry the last token.
// Everything is a function of the spec alone: the same spec gives the same data.
struct SyntheticSpec {
    Shape sample_shape;
    DType dtype = DType::F32;
    int64_t vocab = 0;          // I32 inputs only
    int64_t num_classes = 10;   // for I32 inputs with per-token labels: 0 or vocab
    int64_t label_elements = 1;
    int64_t size = 1024;
    uint64_t seed = 0;
};

Dataset make_synthetic(const SyntheticSpec &spec);

// The teacher of an F32 synthetic spec: a [num_classes, sample elements] row-major
// matrix W, and label = argmax_c sum_i W[c, i] * x[i] (the first maximum on ties).
std::vector<float> synthetic_teacher(const SyntheticSpec &spec);

// The (a, b) of the next-token rule of an I32 synthetic spec.
struct NextTokenRule {
    int64_t a = 1, b = 0;
};
NextTokenRule synthetic_rule(const SyntheticSpec &spec);

// ---- Fitting a dataset to a model -------------------------------------------------

// Checks that `data` can feed a model whose input is `input` ([batch, ...]) and whose
// labels are `labels` ([batch, ...], i32). Per-sample element counts are compared,
// so a model may view the samples in another shape (a CNN's [B, 1, 28, 28] takes
// Fashion-MNIST's [784]). num_classes and vocab, when positive, are the model's
// number of classes and embedding rows; they must cover the dataset's. Throws
// tessera::Error naming the model and the dataset, for example
//   model 'mlp' takes inputs of 3072 values per sample but fashion-mnist gives 784
//   (sample shape [784])
void check_fits(const Dataset &data, const TensorType &input, const TensorType &labels,
                const std::string &model, int64_t num_classes = 0, int64_t vocab = 0);

// ---- Batching ---------------------------------------------------------------------

// Cuts a dataset into batches. Training batches (fill) drop the last partial batch
// and, with shuffle, visit the samples of epoch e in a permutation that depends only
// on (seed, e). Evaluation batches (fill_eval) walk the whole dataset in order and
// pad the last batch. The Batcher keeps a pointer to `data`, which must outlive it.
// It caches the permutation of the last epoch asked for; calls from several threads
// are safe but serialise on that cache.
class Batcher {
public:
    Batcher(const Dataset &data, int64_t batch, uint64_t seed, bool shuffle);

    int64_t batch() const { return batch_; }
    int64_t batches_per_epoch() const { return data_->size / batch_; }
    int64_t eval_batches() const { return (data_->size + batch_ - 1) / batch_; }

    // The order of epoch `epoch`: a permutation of [0, size), the identity without
    // shuffle.
    std::vector<int64_t> order(int64_t epoch) const;

    // Writes training batch `index` of `epoch`: batch * sample elements inputs into x
    // (F32 data) or xi (I32 data), the other may be null, and batch * label_elements
    // labels.
    void fill(int64_t epoch, int64_t index, float *x, int32_t *xi, int32_t *labels) const;

    // Writes evaluation batch `index` (rows index*batch, ... in dataset order) and
    // returns how many rows are real samples. The rest are padding: zero inputs and
    // label 0, to be left out of any metric.
    int64_t fill_eval(int64_t index, float *x, int32_t *xi, int32_t *labels) const;

private:
    void copy_row(int64_t sample, int64_t row, float *x, int32_t *xi, int32_t *labels) const;

    const Dataset *data_;
    int64_t batch_;
    uint64_t seed_;
    bool shuffle_;
    mutable std::mutex mu_;
    mutable int64_t cached_epoch_ = -1;
    mutable std::vector<int64_t> cached_order_;
};

namespace detail {
// splitmix64's finaliser: a bijective 64-bit mix. Random streams in the datasets are
// counter based, mix(key ^ mix(counter)), so any element can be drawn on its own.
uint64_t mix64(uint64_t x);
inline uint64_t draw64(uint64_t key, uint64_t counter) {
    return mix64(key ^ mix64(counter + 0x9e3779b97f4a7c15ull));
}
// Uniform in [0, 1) from the top 24 bits, exact in float.
inline float draw_unit(uint64_t key, uint64_t counter) {
    return static_cast<float>(draw64(key, counter) >> 40) * (1.0f / 16777216.0f);
}
// Uniform integer in [0, n), n > 0, by multiply-shift (each value's probability is
// off by at most 2^-64).
inline uint64_t draw_below(uint64_t key, uint64_t counter, uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(draw64(key, counter)) * n) >> 64);
}
}  // namespace detail

}  // namespace tessera
