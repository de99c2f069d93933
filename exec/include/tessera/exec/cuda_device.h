// The CUDA device: the same Device interface as the CPU device, on a GPU.
//
//   * One arena: a single cudaMalloc holding the budget, followed by a fixed
//     kernel workspace (im2col columns and cuBLAS's workspace), so that
//     nothing allocates device memory after start-up. Without --device-mem
//     the budget is the GPU's free memory less a reserve and these
//     workspaces (device_budget.h), so arena and workspaces fit it together.
//   * Four real CUDA streams (non-blocking); the swap streams at the highest
//     priority the device offers, so a swap-in never queues behind compute.
//   * Events are CUDA events without timing.
//   * Host memory for copies (allocate_host) is page-locked (cudaHostAlloc),
//     allocated once per run.
//   * Operators run the GPU kernels of exec/src/gpu/ (cuBLAS for GEMMs and
//     convolutions through im2col, CUDA kernels for the rest).
//   * Host work on a stream (Stream::enqueue) runs as a CUDA host function.
//
// This header includes no CUDA header: it builds and links in a build without
// CUDA, where cuda_device_count() is 0 and make_cuda_device() throws.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/exec/device.h"

namespace tessera {

// CUDA devices this process can use: 0 when the build has no CUDA, or when
// the driver reports none or fails (no GPU, no driver). Never throws.
int cuda_device_count();
// Why cuda_device_count() is 0 ("built without CUDA", "no CUDA-capable device
// is detected", ...), or "" when it is not.
std::string cuda_unavailable_reason();

// "runtime 13.0, driver 13.0" (the driver "none" when no driver is
// installed), or "" when the build has no CUDA. Needs no GPU.
std::string cuda_versions();

// cuDNN's version as loaded ("9.24.0"), or "" in a build without cuDNN: the
// CUDA device then runs convolutions with its hand kernels alone.
std::string cudnn_version();

// What cudaGetDeviceCount answered, raw, so that a caller can tell a machine
// with no GPU (or no driver at all) from a GPU that CUDA cannot use (a driver
// older than the runtime, a driver/runtime mismatch): cuda_device_count() is 0
// in every one of these cases. Needs no GPU and makes no context.
struct CudaProbe {
    bool built = true;        // false: this build has no CUDA
    int error = 0;            // cudaGetDeviceCount's cudaError_t; 0 is cudaSuccess
    std::string error_name;   // "cudaErrorNoDevice"; "" on success
    std::string error_text;   // "no CUDA-capable device is detected"
    int device_count = 0;
    int driver_version = 0;   // cudaDriverGetVersion: 0 when no driver is installed (libcuda.so.1 absent)
    int runtime_version = 0;  // cudaRuntimeGetVersion, e.g. 13000
};
#ifdef TESSERA_HAVE_CUDA
CudaProbe probe_cuda();
#else
inline CudaProbe probe_cuda() {
    CudaProbe p;
    p.built = false;
    return p;
}
#endif

struct CudaDeviceInfo {
    int index = 0;
    std::string name;  // "NVIDIA H100 80GB HBM3"
    int major = 0, minor = 0;  // compute capability
    int64_t total_bytes = 0, free_bytes = 0;
};
// The name, compute capability and memory of device `index`. The name and
// capability need no context; the free memory does, so this makes `index`
// the calling thread's current device (creating its context, as
// make_cuda_device will) and leaves it so: call it only for the device this
// process is going to use. Throws tessera::Error when `index` is not a
// usable device.
CudaDeviceInfo cuda_device_info(int index);

inline constexpr int64_t kCudaKernelWorkspaceBytes = int64_t{64} << 20;
inline constexpr int64_t kCudaBlasWorkspaceBytes = int64_t{32} << 20;
// Where collectives on the comm stream pack their pieces (Device::comm_workspace).
inline constexpr int64_t kCudaCommWorkspaceBytes = int64_t{32} << 20;
// All three, allocated beside the arena: a budget from the GPU's free memory
// (device_budget.h) or --device-mem leaves room for them.
inline constexpr int64_t kCudaWorkspacesBytes = kCudaKernelWorkspaceBytes + kCudaBlasWorkspaceBytes +
                                                kCudaCommWorkspaceBytes;

// Makes CUDA device `index` current for this thread and allocates its arena of
// exactly `arena_bytes` (plus the fixed workspaces). Throws tessera::Error,
// naming the GPU and its free memory, when the arena does not fit, and when
// there is no such device or no CUDA in this build.
std::unique_ptr<Device> make_cuda_device(int index, int64_t arena_bytes);

}  // namespace tessera
