// safetensors reading and writing; the format is described in safetensors.h.
//
// The writer lays tensors out by decreasing element size, then by name, as the
// reference implementation does, so that every tensor starts aligned to its element
// size (the header is padded to a multiple of 8). The reader is as strict as the
// reference reader: a file it accepts, PyTorch's loader accepts too.
#include "tessera/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "tessera/atomic_file.h"
#include "tessera/error.h"
#include "tessera/input_file.h"
#include "tessera/half.h"
#include "tessera/json_input.h"

namespace tessera {

// The data section is the tensors' memory as is.
static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; a big-endian host needs byte swapping");

namespace {

// The reference reader refuses larger headers; so do we, before allocating one.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

std::string where(const std::string &path) { return "safetensors file '" + path + "': "; }

bool parse_dtype(const std::string &s, StDType *out) {
    for (StDType t : {StDType::F32, StDType::I32, StDType::I64, StDType::U8, StDType::F64, StDType::BF16, StDType::F16})
        if (s == st_dtype_name(t)) return *out = t, true;
    return false;
}

// The bytes a tensor of this shape needs, or UINT64_MAX if that overflows.
uint64_t shape_bytes(const Shape &shape, StDType t) {
    unsigned __int128 n = st_dtype_size(t);
    for (int64_t d : shape) {
        n *= static_cast<uint64_t>(d);
        if (n > UINT64_MAX) return UINT64_MAX;
    }
    return static_cast<uint64_t>(n);
}

bool valid_utf8(const std::string &s) {
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
        if (len == 0 || i + len > s.size()) return false;
        for (size_t k = 1; k < len; k++)
            if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
        i += len;
    }
    return true;
}

void append_json_string(std::string &out, const std::string &s) {
    out += '"';
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += ch;
        } else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += ch;
        }
    }
    out += '"';
}

struct Entry {
    StTensor tensor;
    uint64_t begin = 0, end = 0;
};

uint64_t json_uint(const nlohmann::json &v, const std::string &file, const std::string &what) {
    TESSERA_CHECK(v.is_number_unsigned(), where(file), what, " holds ", json_preview(v),
                  " where a non-negative integer belongs");
    return v.get<uint64_t>();
}

Entry parse_entry(const std::string &file, const std::string &name, const nlohmann::json &v) {
    const std::string e = "entry '" + name + "'";
    TESSERA_CHECK(v.is_object(), where(file), e, " must be an object with dtype, shape and "
                  "data_offsets, got ", json_preview(v));
    for (const auto &[key, _] : v.items())
        TESSERA_CHECK(key == "dtype" || key == "shape" || key == "data_offsets", where(file), e,
                      " has an unknown field '", key, "' (expected dtype, shape, data_offsets)");
    for (const char *key : {"dtype", "shape", "data_offsets"})
        TESSERA_CHECK(v.contains(key), where(file), e, " has no '", key, "'");
    Entry out;
    out.tensor.name = name;
    const nlohmann::json &dt = v["dtype"];
    TESSERA_CHECK(dt.is_string() && parse_dtype(dt.get<std::string>(), &out.tensor.dtype),
                  where(file), e, " has dtype ", json_preview(dt),
                  ", which Tessera does not read (supported: F32, I32, I64, U8, F64, BF16, F16)");
    const nlohmann::json &shape = v["shape"];
    TESSERA_CHECK(shape.is_array(), where(file), e, " has shape ", json_preview(shape),
                  ", not a list of extents");
    for (const nlohmann::json &d : shape) {
        const uint64_t extent = json_uint(d, file, "the shape of " + e);
        TESSERA_CHECK(extent <= uint64_t(INT64_MAX), where(file), e, " has extent ", extent,
                      ", too large");
        out.tensor.shape.push_back(static_cast<int64_t>(extent));
    }
    const nlohmann::json &off = v["data_offsets"];
    TESSERA_CHECK(off.is_array() && off.size() == 2, where(file), e, " has data_offsets ",
                  json_preview(off), ", not [begin, end]");
    out.begin = json_uint(off[0], file, "the data_offsets of " + e);
    out.end = json_uint(off[1], file, "the data_offsets of " + e);
    TESSERA_CHECK(out.begin <= out.end, where(file), e, " has data_offsets [", out.begin, ", ",
                  out.end, "] that end before they begin");
    const uint64_t need = shape_bytes(out.tensor.shape, out.tensor.dtype);
    TESSERA_CHECK(need == out.end - out.begin, where(file), e, " is ",
                  st_dtype_name(out.tensor.dtype), shape_str(out.tensor.shape), ", which needs ",
                  need, " bytes, but its data_offsets [", out.begin, ", ", out.end, "] span ",
                  out.end - out.begin);
    return out;
}

}  // namespace

const char *st_dtype_name(StDType t) {
    switch (t) {
    case StDType::F32: return "F32";
    case StDType::I32: return "I32";
    case StDType::I64: return "I64";
    case StDType::U8: return "U8";
    case StDType::F64: return "F64";
    case StDType::BF16: return "BF16";
    case StDType::F16: return "F16";
    }
    TESSERA_INTERNAL_ASSERT(false, "unknown safetensors dtype");
}

size_t st_dtype_size(StDType t) {
    switch (t) {
    case StDType::F32: return 4;
    case StDType::I32: return 4;
    case StDType::I64: return 8;
    case StDType::U8: return 1;
    case StDType::F64: return 8;
    case StDType::BF16: return 2;
    case StDType::F16: return 2;
    }
    TESSERA_INTERNAL_ASSERT(false, "unknown safetensors dtype");
}

StDType to_st_dtype(DType t) {
    switch (t) {
    case DType::F32: return StDType::F32;
    case DType::I32: return StDType::I32;
    case DType::F64: return StDType::F64;
    case DType::BF16: return StDType::BF16;
    case DType::F16: return StDType::F16;
    }
    TESSERA_INTERNAL_ASSERT(false, "unknown dtype");
}

// ---- StTensor -------------------------------------------------------------------

StTensor narrowed(StTensor t, DType to) {
    TESSERA_INTERNAL_ASSERT(is_half(to), "narrowed: ", dtype_name(to), " is not a 16-bit float");
    if (t.dtype != StDType::F32) return t;
    const std::vector<float> v = t.to_f32();
    t.dtype = to_st_dtype(to);
    t.data.resize(v.size() * 2);
    for (size_t k = 0; k < v.size(); k++) {
        const uint16_t h = to == DType::BF16 ? bf16_from_float(v[k]) : f16_from_float(v[k]);
        std::memcpy(t.data.data() + 2 * k, &h, 2);
    }
    return t;
}

StTensor StTensor::from(std::string name, DType dtype, Shape shape, const void *src) {
    StTensor t;
    t.name = std::move(name);
    t.dtype = to_st_dtype(dtype);
    t.shape = std::move(shape);
    t.data.resize(static_cast<size_t>(t.elements()) * st_dtype_size(t.dtype));
    if (!t.data.empty()) std::memcpy(t.data.data(), src, t.data.size());
    return t;
}

StTensor StTensor::f32(std::string name, Shape shape, const std::vector<float> &values) {
    TESSERA_INTERNAL_ASSERT(int64_t(values.size()) == num_elements(shape), "tensor ", name, " has ",
                            values.size(), " values for shape ", shape_str(shape));
    return from(std::move(name), DType::F32, std::move(shape), values.data());
}

StTensor StTensor::i64_scalar(std::string name, int64_t value) {
    StTensor t;
    t.name = std::move(name);
    t.dtype = StDType::I64;
    t.data.resize(sizeof value);
    std::memcpy(t.data.data(), &value, sizeof value);  // little-endian, as the format wants
    return t;
}

StTensor StTensor::i32(std::string name, Shape shape, const std::vector<int32_t> &values) {
    TESSERA_INTERNAL_ASSERT(int64_t(values.size()) == num_elements(shape), "tensor ", name, " has ",
                            values.size(), " values for shape ", shape_str(shape));
    return from(std::move(name), DType::I32, std::move(shape), values.data());
}

std::vector<float> StTensor::to_f32() const {
    TESSERA_INTERNAL_ASSERT(dtype == StDType::F32, "tensor ", name, " is ", st_dtype_name(dtype));
    std::vector<float> v(data.size() / sizeof(float));
    if (!v.empty()) std::memcpy(v.data(), data.data(), data.size());
    return v;
}

std::vector<int32_t> StTensor::to_i32() const {
    TESSERA_INTERNAL_ASSERT(dtype == StDType::I32, "tensor ", name, " is ", st_dtype_name(dtype));
    std::vector<int32_t> v(data.size() / sizeof(int32_t));
    if (!v.empty()) std::memcpy(v.data(), data.data(), data.size());
    return v;
}

// ---- Writing --------------------------------------------------------------------

void write_safetensors(const std::string &path, const std::vector<StTensor> &tensors,
                       const std::map<std::string, std::string> &metadata) {
    const std::string bad = "cannot write safetensors file '" + path + "': ";
    std::vector<const StTensor *> order;
    std::set<std::string> names;
    for (const StTensor &t : tensors) {
        TESSERA_CHECK(!t.name.empty(), bad, "a tensor has an empty name");
        TESSERA_CHECK(t.name != "__metadata__", bad, "'__metadata__' is reserved, not a tensor name");
        TESSERA_CHECK(valid_utf8(t.name), bad, "tensor name '", t.name, "' is not valid UTF-8");
        TESSERA_CHECK(names.insert(t.name).second, bad, "tensor '", t.name, "' appears twice");
        for (int64_t d : t.shape)
            TESSERA_CHECK(d >= 0, bad, "tensor '", t.name, "' has a negative extent in shape ",
                          shape_str(t.shape));
        TESSERA_CHECK(shape_bytes(t.shape, t.dtype) == t.data.size(), bad, "tensor '", t.name,
                      "' is ", st_dtype_name(t.dtype), shape_str(t.shape), ", which needs ",
                      shape_bytes(t.shape, t.dtype), " bytes, but holds ", t.data.size());
        order.push_back(&t);
    }
    for (const auto &[k, v] : metadata)
        TESSERA_CHECK(valid_utf8(k) && valid_utf8(v), bad, "metadata '", k, "' is not valid UTF-8");
    std::sort(order.begin(), order.end(), [](const StTensor *a, const StTensor *b) {
        const size_t sa = st_dtype_size(a->dtype), sb = st_dtype_size(b->dtype);
        return sa != sb ? sa > sb : a->name < b->name;
    });

    std::string header = "{";
    if (!metadata.empty()) {
        header += "\"__metadata__\":{";
        bool first = true;
        for (const auto &[k, v] : metadata) {
            if (!first) header += ',';
            first = false;
            append_json_string(header, k);
            header += ':';
            append_json_string(header, v);
        }
        header += '}';
    }
    uint64_t offset = 0;
    for (const StTensor *t : order) {
        if (header.size() > 1) header += ',';
        append_json_string(header, t->name);
        header += ":{\"dtype\":\"";
        header += st_dtype_name(t->dtype);
        header += "\",\"shape\":[";
        for (size_t i = 0; i < t->shape.size(); i++) {
            if (i) header += ',';
            header += std::to_string(t->shape[i]);
        }
        header += "],\"data_offsets\":[";
        header += std::to_string(offset);
        header += ',';
        offset += t->data.size();
        header += std::to_string(offset);
        header += "]}";
    }
    header += '}';
    header.append((8 - header.size() % 8) % 8, ' ');

    AtomicFile out(path, "safetensors file");
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = static_cast<uint8_t>(uint64_t(header.size()) >> (8 * i));
    out.write(len, sizeof len);
    out.write(header.data(), header.size());
    for (const StTensor *t : order) out.write(t->data.data(), t->data.size());
    out.commit();
}

// ---- Reading --------------------------------------------------------------------

bool StFile::has(const std::string &name) const {
    return std::any_of(tensors.begin(), tensors.end(),
                       [&](const StTensor &t) { return t.name == name; });
}

const StTensor &StFile::get(const std::string &name) const {
    auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                               [](const StTensor &t, const std::string &n) { return t.name < n; });
    if (it == tensors.end() || it->name != name) {
        std::string held;
        for (size_t i = 0; i < tensors.size() && i < 8; i++)
            held += (i ? ", " : "") + tensors[i].name;
        if (tensors.size() > 8) held += ", ...";
        fail(where(path), "no tensor '", name, "' (it holds ", tensors.size(), " tensors",
             tensors.empty() ? "" : ": ", held, ")");
    }
    return *it;
}

const StTensor &StFile::get(const std::string &name, DType dtype, const Shape &shape) const {
    const StTensor &t = get(name);
    TESSERA_CHECK(t.dtype == to_st_dtype(dtype) && t.shape == shape, where(path), "tensor '", name,
                  "' is ", st_dtype_name(t.dtype), shape_str(t.shape), " but ",
                  st_dtype_name(to_st_dtype(dtype)), shape_str(shape),
                  " was expected; was the file written for another model?");
    return t;
}

namespace {

// A file opened for reading at offsets, closed when it goes.
class PositionalFile {
public:
    explicit PositionalFile(const std::string &path)
        : path_(path), fd_(open_regular_file(path, "the safetensors file")) {
        struct stat st {};
        if (::fstat(fd_, &st) != 0) {
            ::close(fd_);
            fail(where(path), std::strerror(errno));
        }
        size_ = static_cast<uint64_t>(st.st_size);
    }
    ~PositionalFile() { ::close(fd_); }
    PositionalFile(const PositionalFile &) = delete;
    PositionalFile &operator=(const PositionalFile &) = delete;
    uint64_t size() const { return size_; }
    void read(void *dst, uint64_t n, uint64_t at) const {
        char *p = static_cast<char *>(dst);
        while (n > 0) {
            const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(at));
            if (r < 0 && errno == EINTR) continue;
            TESSERA_CHECK(r > 0, where(path_), "read failed at byte ", at, ": ",
                          r == 0 ? "unexpected end of file" : std::strerror(errno));
            p += r, at += static_cast<uint64_t>(r), n -= static_cast<uint64_t>(r);
        }
    }

private:
    std::string path_;
    int fd_;
    uint64_t size_ = 0;
};

// The JSON header's text: its 8-byte little-endian length, then the header.
std::string read_header_text(const PositionalFile &f, const std::string &path) {
    const uint64_t file_size = f.size();
    TESSERA_CHECK(file_size >= 8, where(path), "the file is ", file_size,
                  " bytes, too short for the 8-byte header length");
    uint8_t len[8];
    f.read(len, 8, 0);
    uint64_t header_len = 0;
    for (int i = 0; i < 8; i++) header_len |= uint64_t(len[i]) << (8 * i);
    TESSERA_CHECK(header_len <= file_size - 8, where(path), "the header length ", header_len,
                  " runs past the end of the file (", file_size, " bytes); the file is truncated "
                  "or not safetensors");
    TESSERA_CHECK(header_len <= kMaxHeaderBytes, where(path), "the header length ", header_len,
                  " exceeds the limit of ", kMaxHeaderBytes, " bytes");
    std::string header(header_len, '\0');
    f.read(header.data(), header_len, 8);
    TESSERA_CHECK(!header.empty() && header[0] == '{', where(path),
                  "the header does not start with '{'; the file is not safetensors");
    return header;
}

// The header as JSON, refusing repeated keys (nlohmann keeps the last of
// them; the callback notices them first).
nlohmann::json parse_header(const std::string &header, const std::string &path) {
    std::vector<std::set<std::string>> open_objects;
    std::string top_key, duplicate;
    auto watch = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json &parsed) {
        using E = nlohmann::json::parse_event_t;
        if (ev == E::object_start) open_objects.emplace_back();
        if (ev == E::object_end && !open_objects.empty()) open_objects.pop_back();
        if (ev == E::key && !open_objects.empty()) {
            const std::string key = parsed.get<std::string>();
            if (depth == 1) top_key = key;
            if (!open_objects.back().insert(key).second && duplicate.empty())
                duplicate = depth == 1 ? "entry '" + key + "' appears twice"
                                       : "entry '" + top_key + "' repeats the field '" + key + "'";
        }
        return true;
    };
    const nlohmann::json doc = parse_json_input(header, where(path) + "the header", watch);
    TESSERA_CHECK(duplicate.empty(), where(path), "the header's ", duplicate);
    TESSERA_CHECK(doc.is_object(), where(path), "the header is not a JSON object");
    return doc;
}

// The tensors must tile the data section exactly, as the reference reader demands.
void check_tiling(const std::vector<Entry> &entries, uint64_t data_size, const std::string &path) {
    for (const Entry &e : entries)
        TESSERA_CHECK(e.end <= data_size, where(path), "entry '", e.tensor.name, "' has data_offsets [",
                      e.begin, ", ", e.end, "] past the end of the data section (", data_size,
                      " bytes); the file is truncated");
    std::vector<const Entry *> by_offset;
    for (const Entry &e : entries) by_offset.push_back(&e);
    std::sort(by_offset.begin(), by_offset.end(), [](const Entry *a, const Entry *b) {
        return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t covered = 0;
    const Entry *prev = nullptr;
    for (const Entry *e : by_offset) {
        TESSERA_CHECK(e->begin >= covered, where(path), "entries '", prev->tensor.name, "' and '",
                      e->tensor.name, "' overlap (data_offsets [", prev->begin, ", ", prev->end,
                      "] and [", e->begin, ", ", e->end, "])");
        TESSERA_CHECK(e->begin == covered, where(path), "bytes [", covered, ", ", e->begin,
                      ") of the data section belong to no tensor (before entry '", e->tensor.name, "')");
        covered = e->end;
        prev = e;
    }
    TESSERA_CHECK(covered == data_size, where(path), "the data section has ", data_size,
                  " bytes but the tensors cover only ", covered);
}

}  // namespace

StFile read_safetensors(const std::string &path) {
    const PositionalFile f(path);
    const std::string header = read_header_text(f, path);
    const nlohmann::json doc = parse_header(header, path);
    StFile file;
    file.path = path;
    std::vector<Entry> entries;
    for (const auto &[key, value] : doc.items()) {
        if (key == "__metadata__") {
            TESSERA_CHECK(value.is_object(), where(path), "__metadata__ must be an object of "
                          "strings, got ", json_preview(value));
            for (const auto &[mk, mv] : value.items()) {
                TESSERA_CHECK(mv.is_string(), where(path), "__metadata__ entry '", mk,
                              "' must be a string, got ", json_preview(mv));
                file.metadata[mk] = mv.get<std::string>();
            }
            continue;
        }
        entries.push_back(parse_entry(path, key, value));
    }
    check_tiling(entries, f.size() - 8 - header.size(), path);
    for (Entry &e : entries) {
        e.tensor.data.resize(e.end - e.begin);
        if (!e.tensor.data.empty()) f.read(e.tensor.data.data(), e.end - e.begin, 8 + header.size() + e.begin);
        file.tensors.push_back(std::move(e.tensor));
    }
    std::sort(file.tensors.begin(), file.tensors.end(),
              [](const StTensor &a, const StTensor &b) { return a.name < b.name; });
    return file;
}

}  // namespace tessera
