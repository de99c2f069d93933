// Checks of CUDA, cuBLAS and cuDNN calls that say where: a failed call is a
// tessera::Error naming the error, what was being done, the call as written,
// the source file and line, and the current CUDA device. The launcher adds the
// rank ("tessera-train: rank 2: error: CUDA error ...").
//
//   TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kind, s), "a copy to the host");
//
// A failed call is a problem of the device or the driver, not a bug in
// Tessera, so it is a tessera::Error, not an internal error.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace tessera::cuda_errors {

[[noreturn]] void cuda_failed(cudaError_t rc, const char *what, const char *call, const char *file, int line);
[[noreturn]] void cublas_failed(cublasStatus_t rc, const char *what, const char *call, const char *file, int line);
// cuDNN's status as an int, so that this header needs no cudnn.h.
[[noreturn]] void cudnn_failed(int rc, const char *error_string, const char *what, const char *call, const char *file,
                               int line);

}  // namespace tessera::cuda_errors

#define TESSERA_CUDA_CHECK(expr, what)                                                              \
    do {                                                                                            \
        const cudaError_t tessera_rc_ = (expr);                                                     \
        if (tessera_rc_ != cudaSuccess)                                                             \
            ::tessera::cuda_errors::cuda_failed(tessera_rc_, what, #expr, __FILE__, __LINE__);      \
    } while (0)

#define TESSERA_CUBLAS_CHECK(expr, what)                                                            \
    do {                                                                                            \
        const cublasStatus_t tessera_rc_ = (expr);                                                  \
        if (tessera_rc_ != CUBLAS_STATUS_SUCCESS)                                                   \
            ::tessera::cuda_errors::cublas_failed(tessera_rc_, what, #expr, __FILE__, __LINE__);    \
    } while (0)

// Only where cudnn.h is included.
#define TESSERA_CUDNN_CHECK(expr, what)                                                             \
    do {                                                                                            \
        const cudnnStatus_t tessera_rc_ = (expr);                                                   \
        if (tessera_rc_ != CUDNN_STATUS_SUCCESS)                                                    \
            ::tessera::cuda_errors::cudnn_failed(static_cast<int>(tessera_rc_),                     \
                                                 cudnnGetErrorString(tessera_rc_), what, #expr,     \
                                                 __FILE__, __LINE__);                               \
    } while (0)
