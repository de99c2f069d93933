// The failure paths of cuda_check.h's macros.
#include "cuda_check.h"

#include <cstring>
#include <string>

#include "tessera/error.h"

namespace tessera::cuda_errors {

namespace {

// The file relative to the source tree (TESSERA_SOURCE_DIR, set by CMake).
const char *source_path(const char *file) {
#ifdef TESSERA_SOURCE_DIR
    const size_t n = std::strlen(TESSERA_SOURCE_DIR);
    if (std::strncmp(file, TESSERA_SOURCE_DIR, n) == 0) return file + n;
#endif
    return file;
}

// " in cudaMalloc(&p, n) (allocating the arena) at exec/src/cuda_device.cu:240 on cuda:0"
std::string where(const char *what, const char *call, const char *file, int line) {
    int device = -1;
    const bool known = cudaGetDevice(&device) == cudaSuccess;
    cudaGetLastError();  // a failed query must not linger as the sticky "last error"
    // The call as written, and what it was for unless the call says it ("cudaEventRecord"
    // beside cudaEventRecord(e, s)); a bare status variable says nothing, so `what` alone.
    const bool written = std::strchr(call, '(') != nullptr;
    const bool said = written && std::strncmp(call, what, std::strlen(what)) == 0;
    const std::string action = !written ? std::string(what) : said ? std::string(call)
                                                                   : detail::concat(call, " (", what, ")");
    return detail::concat(" in ", action, " at ", source_path(file), ":", line,
                          known ? detail::concat(" on cuda:", device) : std::string());
}

}  // namespace

void cuda_failed(cudaError_t rc, const char *what, const char *call, const char *file, int line) {
    fail("CUDA error ", cudaGetErrorName(rc), " (", cudaGetErrorString(rc), ")", where(what, call, file, line));
}

void cublas_failed(cublasStatus_t rc, const char *what, const char *call, const char *file, int line) {
    fail("cuBLAS error ", cublasGetStatusName(rc), " (", cublasGetStatusString(rc), ")",
         where(what, call, file, line));
}

void cudnn_failed(int rc, const char *error_string, const char *what, const char *call, const char *file, int line) {
    fail("cuDNN error ", rc, " (", error_string, ")", where(what, call, file, line));
}

}  // namespace tessera::cuda_errors
