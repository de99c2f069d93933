#include <cuda_runtime.h>

#include <cstring>

#include "tessera/error.h"
#include "tessera/exec/cuda_uuid.h"

namespace tessera {

GpuUuid cuda_device_uuid(int index) {
    cudaDeviceProp prop{};
    cudaError_t rc = cudaGetDeviceProperties(&prop, index);
    if (rc != cudaSuccess) {
        cudaGetLastError();
        fail("cannot read the UUID of CUDA device ", index, ": ", cudaGetErrorString(rc));
    }
    GpuUuid id{};
    static_assert(sizeof(prop.uuid.bytes) == sizeof(GpuUuid), "cudaUUID_t is 16 bytes");
    std::memcpy(id.data(), prop.uuid.bytes, id.size());
    return id;
}

}  // namespace tessera
