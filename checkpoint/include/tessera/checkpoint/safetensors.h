// Checkpoints in Hugging Face's safetensors format, so that PyTorch's
// safetensors.torch.load_file (and any other safetensors reader) opens them.
//
// Layout: an 8-byte little-endian header length N; N bytes of JSON,
//   {"__metadata__": {"key": "value", ...},
//    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
// padded with spaces so that the data starts 8-byte aligned; then the tensors' raw
// little-endian bytes, row-major. Offsets count from the start of the data section,
// and the tensors tile it exactly: no gaps, no overlap, nothing after the last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/types.h"

namespace tessera {

// The safetensors element types Tessera reads and writes. Tessera's tensors are F32
// or I32 (F64 only for batch norm's statistics); I64 and U8 exist for what other
// tools store (PyTorch's int64 step counters, byte masks); BF16 and F16 for
// state_dicts exported in 16 bits (--export-dtype).
enum class StDType : uint8_t { F32, I32, I64, U8, F64, BF16, F16 };

const char *st_dtype_name(StDType t);  // "F32", "I32", "I64", "U8", "F64", "BF16", "F16"
size_t st_dtype_size(StDType t);
StDType to_st_dtype(DType t);

struct StTensor {
    std::string name;
    StDType dtype = StDType::F32;
    Shape shape;
    std::vector<std::byte> data;  // elements * st_dtype_size(dtype) bytes

    // Copies `shape`'s elements of `dtype` from `src`.
    static StTensor from(std::string name, DType dtype, Shape shape, const void *src);
    static StTensor f32(std::string name, Shape shape, const std::vector<float> &values);
    static StTensor i32(std::string name, Shape shape, const std::vector<int32_t> &values);
    static StTensor i64_scalar(std::string name, int64_t value);  // shape [], as PyTorch's step counters

    int64_t elements() const { return num_elements(shape); }
    // The values, for a tensor of that dtype (an internal error otherwise: check
    // dtype, or use StFile::get with an expected type, first).
    std::vector<float> to_f32() const;
    std::vector<int32_t> to_i32() const;
    bool operator==(const StTensor &) const = default;
};

// An F32 tensor's values narrowed to `to` (BF16 or F16, rounding to nearest
// even as base/half.h does); any other tensor as it is.
StTensor narrowed(StTensor t, DType to);

// Writes `tensors` and `metadata` to `path` atomically: into a temporary file in the
// same directory, flushed with fsync, then renamed over `path`. On any failure the
// temporary file is removed, `path` is left as it was, and tessera::Error names the
// path and the reason. Tensor names must be unique, non-empty and not
// "__metadata__"; each tensor's data must match its shape and dtype.
void write_safetensors(const std::string &path, const std::vector<StTensor> &tensors,
                       const std::map<std::string, std::string> &metadata = {});

struct StFile {
    std::string path;                             // where it was read from, for errors
    std::vector<StTensor> tensors;                // sorted by name
    std::map<std::string, std::string> metadata;  // "__metadata__"; empty if absent

    bool has(const std::string &name) const;
    // The tensor called `name`; tessera::Error naming the file and the tensor if there is none.
    const StTensor &get(const std::string &name) const;
    // As get, and also checks its dtype and shape, naming what the file holds and what
    // was expected if they differ.
    const StTensor &get(const std::string &name, DType dtype, const Shape &shape) const;
};

// Reads and validates a whole safetensors file: header length against the file size,
// the JSON, dtypes, shapes, that each data_offsets span equals the shape's bytes, and
// that the spans tile the data section; duplicate names are rejected. Every error is
// a tessera::Error naming the file and, where there is one, the entry.
StFile read_safetensors(const std::string &path);

}  // namespace tessera
