// What every build knows of ONNX files, with or without libonnx-dev: which
// specs name one, and a fingerprint of its bytes.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "tessera/error.h"
#include "tessera/input_file.h"
#include "tessera/models/onnx_import.h"

namespace tessera {

bool is_onnx_model(const ModelSpec &spec) { return spec.name.size() > 5 && spec.name.ends_with(".onnx"); }

std::string onnx_file_fingerprint(const std::string &path) {
    check_regular_file(path, "the ONNX model");
    std::ifstream in(path, std::ios::binary);
    TESSERA_CHECK(in.good(), "ONNX model '", path, "': cannot open the file (", std::strerror(errno), ")");
    uint64_t h = 14695981039346656037ull;  // FNV-1a: the same on every host and build
    int64_t bytes = 0;
    for (std::istreambuf_iterator<char> it(in), end; it != end; ++it, ++bytes)
        h = (h ^ static_cast<unsigned char>(*it)) * 1099511628211ull;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    return std::string(hex) + " (" + std::to_string(bytes) + " bytes)";
}

}  // namespace tessera
