// ONNX import in a build without Debian's libonnx-dev: every entry point says so.
#include "tessera/error.h"
#include "tessera/models/onnx_import.h"

namespace tessera {

bool onnx_import_built() { return false; }

Model import_onnx(const ModelSpec &spec, int64_t) {
    fail("ONNX model '", spec.name, "': this build of Tessera cannot import ONNX (it was configured without ",
         "libonnx-dev); install it (scripts/deps.sh) and rebuild");
}

std::vector<std::string> onnx_supported_operators() { return {}; }

}  // namespace tessera
