// Which physical GPU a CUDA device index is: its UUID, the same in every
// process whatever CUDA_VISIBLE_DEVICES renumbers. Ranks compare UUIDs to
// know whether they share a GPU (train/gpu_sharing.h).
#pragma once

#include <array>
#include <cstdint>

namespace tessera {

using GpuUuid = std::array<uint8_t, 16>;

// The UUID of CUDA device `index` (cudaDeviceProp::uuid; querying it makes
// no context). Throws tessera::Error when there is no such device or the
// build has no CUDA.
GpuUuid cuda_device_uuid(int index);

}  // namespace tessera
