// The CUDA entry points of cuda_device.h in a build without CUDA.
#include "tessera/error.h"
#include "tessera/exec/cuda_device.h"

namespace tessera {

int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() { return "this build of Tessera has no CUDA backend (TESSERA_CUDA=OFF)"; }
std::string cuda_versions() { return ""; }
std::string cudnn_version() { return ""; }

CudaDeviceInfo cuda_device_info(int index) {
    fail("CUDA device ", index, " is not usable: ", cuda_unavailable_reason(), "; use --device cpu");
}

std::unique_ptr<Device> make_cuda_device(int index, int64_t) {
    fail("cannot create CUDA device ", index, ": ", cuda_unavailable_reason(), "; use --device cpu");
}

}  // namespace tessera
