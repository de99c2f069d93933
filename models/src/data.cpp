// The batcher and the dataset-to-model check. The loaders live in
// fashion_mnist.cpp and synthetic.cpp.
#include "tessera/models/data.h"

#include <algorithm>
#include <cstring>

#include "tessera/error.h"

namespace tessera {

namespace detail {
uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
}  // namespace detail

// ---- check_fits ------------------------------------------------------------------

void check_fits(const Dataset &data, const TensorType &input, const TensorType &labels,
                const std::string &model, int64_t num_classes, int64_t vocab) {
    TESSERA_CHECK(input.rank() >= 1 && input.shape[0] > 0, "model '", model,
                  "' has input ", type_str(input), " with no batch dimension; it cannot take ",
                  data.name, " samples");
    TESSERA_CHECK(labels.rank() >= 1 && labels.shape[0] > 0, "model '", model,
                  "' has labels ", type_str(labels), " with no batch dimension; it cannot take ",
                  data.name, " labels");
    auto kind = [](DType t) { return t == DType::F32 ? "f32 values" : "i32 token ids"; };
    TESSERA_CHECK(input.dtype == data.dtype, "model '", model, "' takes ", kind(input.dtype),
                  " as input but ", data.name, " gives ", kind(data.dtype), " (sample shape ",
                  shape_str(data.sample_shape), "); pick a model for this dataset");
    const int64_t per_sample = input.elements() / input.shape[0];
    TESSERA_CHECK(per_sample == data.sample_elements(), "model '", model, "' takes inputs of ",
                  per_sample, " values per sample but ", data.name, " gives ",
                  data.sample_elements(), " (sample shape ", shape_str(data.sample_shape),
                  "); configure the model's input size to match");
    TESSERA_CHECK(labels.dtype == DType::I32, "model '", model, "' has labels ", type_str(labels),
                  "; class labels must be i32");
    // Labels may be [batch, ...] or flattened to [batch * k] (a language model's
    // [batch * seq] rows), so they are counted per input sample.
    const int64_t batch = input.shape[0];
    TESSERA_CHECK(labels.elements() % batch == 0, "model '", model, "' has input batch ", batch,
                  " but ", labels.elements(), " labels, not a multiple of the batch");
    const int64_t labels_per_sample = labels.elements() / batch;
    TESSERA_CHECK(labels_per_sample == data.label_elements, "model '", model, "' takes ",
                  labels_per_sample, " labels per sample but ", data.name, " gives ",
                  data.label_elements);
    TESSERA_CHECK(num_classes <= 0 || num_classes >= data.num_classes, "model '", model,
                  "' predicts ", num_classes, " classes but ", data.name, " has labels in [0, ",
                  data.num_classes, "); give the model at least ", data.num_classes,
                  " classes");
    TESSERA_CHECK(vocab <= 0 || data.dtype != DType::I32 || vocab >= data.vocab, "model '",
                  model, "' embeds ", vocab, " token ids but ", data.name,
                  " has token ids in [0, ", data.vocab, "); give the model a vocabulary of at least ",
                  data.vocab);
}

// ---- Batcher ---------------------------------------------------------------------

Batcher::Batcher(const Dataset &data, int64_t batch, uint64_t seed, bool shuffle)
    : data_(&data), batch_(batch), seed_(seed), shuffle_(shuffle) {
    TESSERA_CHECK(batch > 0, "batch size must be positive, got ", batch);
    const int64_t n = data.size;
    TESSERA_INTERNAL_ASSERT(n >= 0 && static_cast<int64_t>(data.labels.size()) ==
                                          n * data.label_elements,
                            "dataset ", data.name, " has ", data.labels.size(), " labels for ", n,
                            " samples of ", data.label_elements);
    const int64_t values = n * data.sample_elements();
    TESSERA_INTERNAL_ASSERT(static_cast<int64_t>(data.dtype == DType::F32 ? data.x_f32.size()
                                                                          : data.x_i32.size()) ==
                                values,
                            "dataset ", data.name, " holds the wrong number of inputs");
}

std::vector<int64_t> Batcher::order(int64_t epoch) const {
    TESSERA_CHECK(epoch >= 0, "epoch must be non-negative, got ", epoch);
    const int64_t n = data_->size;
    std::vector<int64_t> perm(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    if (!shuffle_) return perm;
    // Fisher-Yates driven by a counter-based stream keyed on (seed, epoch): no state
    // carries from one epoch to the next, so any epoch can be rebuilt on its own.
    const uint64_t key = detail::mix64(seed_ ^ detail::mix64(static_cast<uint64_t>(epoch)));
    for (int64_t i = n - 1; i > 0; i--) {
        const int64_t j = static_cast<int64_t>(
            detail::draw_below(key, static_cast<uint64_t>(i), static_cast<uint64_t>(i + 1)));
        std::swap(perm[i], perm[j]);
    }
    return perm;
}

void Batcher::copy_row(int64_t sample, int64_t row, float *x, int32_t *xi, int32_t *labels) const {
    const int64_t se = data_->sample_elements();
    const int64_t le = data_->label_elements;
    if (data_->dtype == DType::F32)
        std::memcpy(x + row * se, data_->x_f32.data() + sample * se, sizeof(float) * se);
    else
        std::memcpy(xi + row * se, data_->x_i32.data() + sample * se, sizeof(int32_t) * se);
    std::memcpy(labels + row * le, data_->labels.data() + sample * le, sizeof(int32_t) * le);
}

namespace {
void check_buffers(const Dataset &d, const float *x, const int32_t *xi, const int32_t *labels) {
    TESSERA_INTERNAL_ASSERT(labels != nullptr, "no label buffer");
    TESSERA_INTERNAL_ASSERT(d.dtype == DType::F32 ? x != nullptr : xi != nullptr,
                            "no input buffer of the dataset's dtype ", dtype_name(d.dtype));
}
}  // namespace

void Batcher::fill(int64_t epoch, int64_t index, float *x, int32_t *xi, int32_t *labels) const {
    check_buffers(*data_, x, xi, labels);
    TESSERA_CHECK(batches_per_epoch() > 0, data_->name, " has ", data_->size,
                  " samples, fewer than one batch of ", batch_, "; use a smaller batch size");
    TESSERA_CHECK(index >= 0 && index < batches_per_epoch(), "batch index ", index,
                  " is out of range: an epoch of ", data_->name, " has ", batches_per_epoch(),
                  " batches of ", batch_);
    TESSERA_CHECK(epoch >= 0, "epoch must be non-negative, got ", epoch);
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_epoch_ != epoch) {  // -1 at first, never a valid epoch
        cached_order_ = order(epoch);
        cached_epoch_ = epoch;
    }
    for (int64_t r = 0; r < batch_; r++) copy_row(cached_order_[index * batch_ + r], r, x, xi, labels);
}

int64_t Batcher::fill_eval(int64_t index, float *x, int32_t *xi, int32_t *labels) const {
    check_buffers(*data_, x, xi, labels);
    TESSERA_CHECK(index >= 0 && index < eval_batches(), "evaluation batch index ", index,
                  " is out of range: ", data_->name, " has ", eval_batches(), " batches of ",
                  batch_);
    const int64_t begin = index * batch_;
    const int64_t valid = std::min(batch_, data_->size - begin);
    for (int64_t r = 0; r < valid; r++) copy_row(begin + r, r, x, xi, labels);
    const int64_t se = data_->sample_elements();
    const int64_t le = data_->label_elements;
    const int64_t pad = batch_ - valid;
    if (data_->dtype == DType::F32)
        std::fill(x + valid * se, x + batch_ * se, 0.0f);
    else
        std::fill(xi + valid * se, xi + batch_ * se, 0);
    std::fill(labels + valid * le, labels + (valid + pad) * le, 0);
    return valid;
}

}  // namespace tessera
