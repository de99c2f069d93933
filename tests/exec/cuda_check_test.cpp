// The CUDA, cuBLAS and cuDNN checks say where (exec/src/cuda_check.h): the
// error, the call as written, what it was for, the file relative to the tree
// and the line. Calls that fail with or without a GPU, so that it runs in CI.
#include "cuda_check.h"

#include <gtest/gtest.h>

#include <string>

#include "expect_error.h"
#include "tessera/error.h"

namespace tessera {
namespace {

using test::error_of;

TEST(CudaCheck, AFailedCudaCallNamesTheCallTheFileAndTheLine) {
    const int line = __LINE__ + 1;
    const std::string e = error_of([] { TESSERA_CUDA_CHECK(cudaSetDevice(1 << 20), "choosing the device"); });
    // No such device where there is a GPU; no driver where there is none.
    EXPECT_EQ(e.rfind("CUDA error cudaError", 0), 0u) << e;
    EXPECT_NE(e.find(" in cudaSetDevice(1 << 20) (choosing the device) at tests/exec/cuda_check_test.cpp:" +
                     std::to_string(line)),
              std::string::npos)
        << e;
}

TEST(CudaCheck, WhatIsLeftOutWhenTheCallSaysItAndUsedAloneForAStatusVariable) {
    const std::string said = error_of([] { TESSERA_CUDA_CHECK(cudaSetDevice(1 << 20), "cudaSetDevice"); });
    EXPECT_NE(said.find(" in cudaSetDevice(1 << 20) at "), std::string::npos) << said;
    const std::string bare = error_of([] {
        const cudaError_t rc = cudaErrorInvalidValue;
        TESSERA_CUDA_CHECK(rc, "cudaEventQuery");
    });
    EXPECT_EQ(bare.rfind("CUDA error cudaErrorInvalidValue (invalid argument) in cudaEventQuery at "
                         "tests/exec/cuda_check_test.cpp:", 0),
              0u)
        << bare;
}

TEST(CudaCheck, AFailedCublasCallNamesItsStatus) {
    const std::string e = error_of([] { TESSERA_CUBLAS_CHECK(cublasSetStream(nullptr, nullptr), "cublasSetStream"); });
    EXPECT_EQ(e.rfind("cuBLAS error CUBLAS_STATUS_NOT_INITIALIZED (", 0), 0u) << e;
    EXPECT_NE(e.find(" in cublasSetStream(nullptr, nullptr) at tests/exec/cuda_check_test.cpp:"), std::string::npos)
        << e;
}

}  // namespace
}  // namespace tessera
