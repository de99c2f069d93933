// The rule for when a GPU test may skip (tests/require_gpu.h), on made-up
// answers of cudaGetDeviceCount: it skips only without a GPU or without any
// driver, and fails on every CUDA error that means a GPU CUDA cannot use.
// Runs everywhere (label exec); the probe of this machine must not be broken.
#include "require_gpu.h"

#include <gtest/gtest.h>

namespace tessera::test {
namespace {

// cudaGetDeviceCount's answer as probe_cuda() reports it (the codes are
// cudaError_t's, for the record; the rule reads the names).
CudaProbe failed_with(int code, const char *name, const char *text, int driver_version) {
    CudaProbe p;
    p.error = code;
    p.error_name = name;
    p.error_text = text;
    p.driver_version = driver_version;
    p.runtime_version = 13000;
    return p;
}

TEST(RequireGpu, RunsWhereCudaSeesADevice) {
    CudaProbe p;
    p.device_count = 2;
    p.driver_version = p.runtime_version = 13000;
    EXPECT_EQ(decide_gpu_test(p).verdict, GpuTestVerdict::Run);
}

TEST(RequireGpu, SkipsWithoutCudaInTheBuildOrWithoutADevice) {
    CudaProbe not_built;
    not_built.built = false;
    EXPECT_EQ(decide_gpu_test(not_built).verdict, GpuTestVerdict::Skip);
    EXPECT_EQ(decide_gpu_test(not_built).why, "this build has no CUDA backend");

    CudaProbe none;  // success and a count of 0
    none.driver_version = 13000;
    EXPECT_EQ(decide_gpu_test(none).verdict, GpuTestVerdict::Skip);

    const GpuTestDecision d =
        decide_gpu_test(failed_with(100, "cudaErrorNoDevice", "no CUDA-capable device is detected", 13000));
    EXPECT_EQ(d.verdict, GpuTestVerdict::Skip);
    EXPECT_EQ(d.why, "CUDA reports no CUDA-capable device is detected");
}

// What a machine without any NVIDIA driver answers (this CI machine: no
// libcuda.so.1, cudaDriverGetVersion 0).
TEST(RequireGpu, SkipsWhenNoDriverIsInstalledAtAll) {
    const GpuTestDecision d = decide_gpu_test(failed_with(
        35, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version", 0));
    EXPECT_EQ(d.verdict, GpuTestVerdict::Skip);
    EXPECT_EQ(d.why, "no NVIDIA driver is installed (libcuda.so.1 is absent)");
}

TEST(RequireGpu, FailsWhenADriverIsThereButTooOld) {
    const GpuTestDecision d = decide_gpu_test(failed_with(
        35, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version", 12020));
    EXPECT_EQ(d.verdict, GpuTestVerdict::Fail);
    EXPECT_EQ(d.why,
              "CUDA is installed but cannot be used: cudaGetDeviceCount failed with cudaErrorInsufficientDriver (CUDA "
              "driver version is insufficient for CUDA runtime version); driver 12.2, runtime 13.0. A GPU test skips "
              "only where there is no GPU or no driver at all");
}

TEST(RequireGpu, FailsOnEveryOtherCudaError) {
    for (const CudaProbe &p :
         {failed_with(803, "cudaErrorSystemDriverMismatch",
                      "system has unsupported display driver / cuda driver combination", 13000),
          failed_with(804, "cudaErrorCompatNotSupportedOnDevice",
                      "forward compatibility was attempted on non supported HW", 12080),
          failed_with(34, "cudaErrorStubLibrary", "CUDA driver is a stub library", 0),
          failed_with(3, "cudaErrorInitializationError", "initialization error", 13000),
          failed_with(999, "cudaErrorUnknown", "unknown error", 13000)}) {
        SCOPED_TRACE(p.error_name);
        const GpuTestDecision d = decide_gpu_test(p);
        EXPECT_EQ(d.verdict, GpuTestVerdict::Fail);
        EXPECT_NE(d.why.find("failed with " + p.error_name + " (" + p.error_text + ")"), std::string::npos) << d.why;
    }
}

// This machine: a GPU that works, or plainly none. A machine whose CUDA is
// broken fails here as its GPU tests do.
TEST(RequireGpu, ThisMachineIsUsableOrHasNoGpu) {
    const CudaProbe p = probe_cuda();
    const GpuTestDecision d = decide_gpu_test(p);
    EXPECT_NE(d.verdict, GpuTestVerdict::Fail) << d.why;
    std::printf("this machine: %s%s (driver %s, runtime %s)\n",
                d.verdict == GpuTestVerdict::Run ? "GPU tests run" : "GPU tests skip: ", d.why.c_str(),
                cuda_version_text(p.driver_version).c_str(), cuda_version_text(p.runtime_version).c_str());
}

}  // namespace
}  // namespace tessera::test
