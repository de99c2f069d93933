#include "tessera/types.h"

#include <sstream>

#include "tessera/error.h"

namespace tessera {

const char *dtype_name(DType t) {
    switch (t) {
    case DType::F32: return "f32";
    case DType::I32: return "i32";
    case DType::F64: return "f64";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    }
    TESSERA_INTERNAL_ASSERT(false, "unknown dtype");
}

size_t dtype_size(DType t) {
    switch (t) {
    case DType::F32: return 4;
    case DType::I32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    }
    TESSERA_INTERNAL_ASSERT(false, "unknown dtype");
}

DType dtype_from_name(const std::string &name, const std::string &where) {
    for (DType t : {DType::F32, DType::I32, DType::F64, DType::BF16, DType::F16})
        if (name == dtype_name(t)) return t;
    fail(where, ": unknown dtype '", name, "' (valid: f32, i32, f64, bf16, f16)");
}

bool is_floating(DType t) { return t != DType::I32; }

std::string shape_str(const Shape &s) {
    std::ostringstream os;
    os << "[";
    for (size_t i = 0; i < s.size(); i++) os << (i ? ", " : "") << s[i];
    os << "]";
    return os.str();
}

int64_t num_elements(const Shape &s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
}

std::string type_str(const TensorType &t) { return dtype_name(t.dtype) + shape_str(t.shape); }

std::ostream &operator<<(std::ostream &os, const TensorType &t) { return os << type_str(t); }

}  // namespace tessera
