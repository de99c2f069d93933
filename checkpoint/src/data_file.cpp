#include "tessera/checkpoint/data_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/error.h"

namespace tessera {

namespace {

// The values of an I32 or I64 tensor, as int32 (token ids, labels).
std::vector<int32_t> int_values(const StFile &f, const StTensor &t) {
    if (t.dtype == StDType::I32) return t.to_i32();
    TESSERA_CHECK(t.dtype == StDType::I64, "--data ", f.path, ": tensor '", t.name, "' is ", st_dtype_name(t.dtype),
                  "; expected I32 or I64");
    std::vector<int32_t> out(static_cast<size_t>(t.elements()));
    for (size_t i = 0; i < out.size(); i++) {
        int64_t v;
        std::memcpy(&v, t.data.data() + i * sizeof v, sizeof v);
        TESSERA_CHECK(v >= INT32_MIN && v <= INT32_MAX, "--data ", f.path, ": tensor '", t.name, "' holds ", v,
                      ", beyond 32 bits");
        out[i] = static_cast<int32_t>(v);
    }
    return out;
}

// Values are checked where they are read, naming the tensor, the sample and
// the element: a NaN in the inputs would otherwise turn the weights to NaN
// while ReLU keeps the loss finite.
void check_finite(const StFile &f, const StTensor &x, const std::vector<float> &values, int64_t per_sample) {
    for (size_t i = 0; i < values.size(); i++)
        TESSERA_CHECK(std::isfinite(values[i]), "--data ", f.path, ": '", x.name, "' holds ", values[i],
                      " in sample ", static_cast<int64_t>(i) / per_sample, " (element ",
                      static_cast<int64_t>(i) % per_sample, "); the data must be finite");
}

// The largest id plus one (ids are counted as int64: an id of 2^31 - 1 has
// 2^31 classes), refusing negative ids.
int64_t id_count(const StFile &f, const StTensor &t, const std::vector<int32_t> &ids, int64_t per_sample,
                 const char *what) {
    int64_t count = 0;
    for (size_t i = 0; i < ids.size(); i++) {
        TESSERA_CHECK(ids[i] >= 0, "--data ", f.path, ": '", t.name, "' holds the negative ", what, " ", ids[i],
                      " in sample ", static_cast<int64_t>(i) / per_sample);
        count = std::max<int64_t>(count, int64_t{ids[i]} + 1);
    }
    return count;
}

Dataset read_split(const StFile &f, const std::string &input_name, const std::string &labels_name,
                   const std::string &name) {
    const StTensor &x = f.get(input_name), &y = f.get(labels_name);
    TESSERA_CHECK(!x.shape.empty() && !y.shape.empty() && x.shape[0] == y.shape[0], "--data ", f.path, ": '",
                  input_name, "' ", shape_str(x.shape), " and '", labels_name, "' ", shape_str(y.shape),
                  " must both start with the sample count");
    TESSERA_CHECK(x.shape[0] > 0, "--data ", f.path, ": '", input_name, "' ", shape_str(x.shape),
                  " holds no samples");
    Dataset d;
    d.name = name;
    d.size = x.shape[0];
    d.sample_shape.assign(x.shape.begin() + 1, x.shape.end());
    const int64_t per_sample = std::max<int64_t>(1, x.elements() / d.size);
    if (x.dtype == StDType::F32) {
        d.x_f32 = x.to_f32();
        check_finite(f, x, d.x_f32, per_sample);
    } else {
        d.dtype = DType::I32;
        d.x_i32 = int_values(f, x);
        d.vocab = id_count(f, x, d.x_i32, per_sample, "token id");
    }
    d.labels = int_values(f, y);
    d.label_elements = y.elements() / d.size;
    d.num_classes = id_count(f, y, d.labels, std::max<int64_t>(1, d.label_elements), "label");
    return d;
}

}  // namespace

bool is_data_file(const std::string &data) {
    return data.size() > 12 && data.ends_with(".safetensors");
}

DataFileSplit load_data_file(const std::string &path) {
    const StFile f = read_safetensors(path);
    DataFileSplit s;
    s.train = read_split(f, "input", "labels", path);
    s.test = f.has("test_input") ? read_split(f, "test_input", "test_labels", path + " (test split)") : s.train;
    return s;
}

}  // namespace tessera
