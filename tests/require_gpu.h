// The one rule for when a GPU test may skip, and TESSERA_REQUIRE_GPU(), which
// every GPU test (ctest label gpu) opens with.
//
// A GPU test skips only where there is plainly no GPU to test: a build
// without CUDA, CUDA reporting no device (cudaErrorNoDevice, or a count of 0),
// or no NVIDIA driver installed at all (cudaErrorInsufficientDriver with no
// driver version: libcuda.so.1 is absent, as on a CI machine). Every other
// failure of cudaGetDeviceCount means a GPU that CUDA cannot use: a driver
// older than the runtime, a driver/runtime mismatch
// (cudaErrorSystemDriverMismatch), a forward-compatibility package on a GPU
// that does not support it (cudaErrorCompatNotSupportedOnDevice), the
// toolkit's stub libcuda found before the real one (cudaErrorStubLibrary).
// Those fail the test, naming the error and the versions, instead of letting
// every GPU test "pass" by skipping on a broken machine.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "tessera/exec/cuda_device.h"

namespace tessera::test {

enum class GpuTestVerdict { Run, Skip, Fail };

struct GpuTestDecision {
    GpuTestVerdict verdict = GpuTestVerdict::Run;
    std::string why;  // why it skips or fails; "" when it runs
};

// "13.0" for 13000; "none" for 0.
inline std::string cuda_version_text(int v) {
    return v == 0 ? std::string("none") : std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

inline GpuTestDecision decide_gpu_test(const CudaProbe &p) {
    using V = GpuTestVerdict;
    if (!p.built) return {V::Skip, "this build has no CUDA backend"};
    if (p.error == 0) {
        if (p.device_count > 0) return {V::Run, ""};
        return {V::Skip, "CUDA reports no device"};
    }
    if (p.error_name == "cudaErrorNoDevice") return {V::Skip, "CUDA reports " + p.error_text};
    if (p.error_name == "cudaErrorInsufficientDriver" && p.driver_version == 0)
        return {V::Skip, "no NVIDIA driver is installed (libcuda.so.1 is absent)"};
    return {V::Fail, "CUDA is installed but cannot be used: cudaGetDeviceCount failed with " + p.error_name + " (" +
                         p.error_text + "); driver " + cuda_version_text(p.driver_version) + ", runtime " +
                         cuda_version_text(p.runtime_version) +
                         ". A GPU test skips only where there is no GPU or no driver at all"};
}

}  // namespace tessera::test

// Runs the rest of the test, skips it, or fails it, by decide_gpu_test().
#define TESSERA_REQUIRE_GPU()                                                                                 \
    do {                                                                                                      \
        const ::tessera::test::GpuTestDecision gpu_decision_ =                                                \
            ::tessera::test::decide_gpu_test(::tessera::probe_cuda());                                        \
        if (gpu_decision_.verdict == ::tessera::test::GpuTestVerdict::Skip)                                   \
            GTEST_SKIP() << "no GPU: " << gpu_decision_.why;                                                  \
        if (gpu_decision_.verdict == ::tessera::test::GpuTestVerdict::Fail) FAIL() << gpu_decision_.why;      \
    } while (0)
