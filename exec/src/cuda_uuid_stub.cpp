// cuda_uuid.h in a build without CUDA.
#include "tessera/error.h"
#include "tessera/exec/cuda_uuid.h"

namespace tessera {

GpuUuid cuda_device_uuid(int index) {
    fail("cannot read the UUID of CUDA device ", index, ": this build of Tessera has no CUDA backend");
}

}  // namespace tessera
