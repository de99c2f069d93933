// Tensor types: element type and shape. Shapes are row-major, outermost first
// ([N, C, H, W]); Halide's dimension order is the reverse, and only lang/ ever
// sees Halide's order.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tessera {

// F64 holds only the statistics that batch norm sums in double precision so
// that their float value does not depend on how the sum is split across
// devices (docs/lowering.md, "Staged reductions"). BF16 and F16 are storage
// types of a reduced-precision run (graph/precision.h): operators read and
// write them and compute in f32.
enum class DType : uint8_t { F32, I32, F64, BF16, F16 };

const char *dtype_name(DType t);  // "f32", "i32", "f64", "bf16", "f16"
size_t dtype_size(DType t);
// The dtype a name from dtype_name() stands for; throws tessera::Error naming
// the valid names (`where` says whose it was).
DType dtype_from_name(const std::string &name, const std::string &where);
// F32, F64, BF16 and F16.
bool is_floating(DType t);
// BF16 and F16: 2-byte floats that operators compute on in f32.
inline bool is_half(DType t) { return t == DType::BF16 || t == DType::F16; }

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape &s);   // "[32, 64, 56, 56]"
int64_t num_elements(const Shape &s);

struct TensorType {
    DType dtype = DType::F32;
    Shape shape;

    int rank() const { return static_cast<int>(shape.size()); }
    int64_t elements() const { return num_elements(shape); }
    int64_t bytes() const { return elements() * static_cast<int64_t>(dtype_size(dtype)); }
    bool operator==(const TensorType &) const = default;
};

std::string type_str(const TensorType &t);  // "f32[32, 64]"
std::ostream &operator<<(std::ostream &os, const TensorType &t);

}  // namespace tessera
