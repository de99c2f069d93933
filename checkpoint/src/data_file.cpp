#include "tessera/checkpoint/data_file.h"

#include <algorithm>
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

Dataset read_split(const StFile &f, const std::string &input_name, const std::string &labels_name) {
    const StTensor &x = f.get(input_name), &y = f.get(labels_name);
    TESSERA_CHECK(!x.shape.empty() && !y.shape.empty() && x.shape[0] == y.shape[0], "--data ", f.path, ": '",
                  input_name, "' ", shape_str(x.shape), " and '", labels_name, "' ", shape_str(y.shape),
                  " must both start with the sample count");
    Dataset d;
    d.name = f.path;
    d.size = x.shape[0];
    d.sample_shape.assign(x.shape.begin() + 1, x.shape.end());
    if (x.dtype == StDType::F32) {
        d.x_f32 = x.to_f32();
    } else {
        d.dtype = DType::I32;
        d.x_i32 = int_values(f, x);
        d.vocab = d.x_i32.empty() ? 0 : *std::max_element(d.x_i32.begin(), d.x_i32.end()) + 1;
    }
    d.labels = int_values(f, y);
    d.label_elements = d.size ? y.elements() / d.size : 1;
    for (int32_t l : d.labels) {
        TESSERA_CHECK(l >= 0, "--data ", f.path, ": '", labels_name, "' holds the negative label ", l);
        d.num_classes = std::max<int64_t>(d.num_classes, l + 1);
    }
    return d;
}

}  // namespace

bool is_data_file(const std::string &data) {
    return data.size() > 12 && data.ends_with(".safetensors");
}

DataFileSplit load_data_file(const std::string &path) {
    const StFile f = read_safetensors(path);
    DataFileSplit s;
    s.train = read_split(f, "input", "labels");
    s.test = f.has("test_input") ? read_split(f, "test_input", "test_labels") : s.train;
    return s;
}

}  // namespace tessera
