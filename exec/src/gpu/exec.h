// Internal to exec/: the execution context that the GPU operator kernels are
// written against, so that one kernel body runs both on a CUDA device and, for
// tests, on the host.
//
// Every GPU kernel is written as a functor with a `TESSERA_HD void
// operator()(int64_t i) const` that computes output element (or row, or
// column) i, and is launched with `ex.for_each(n, functor)`. On a CUDA device
// (cuda_device.cu) for_each is a grid-stride kernel on the compute stream; in
// HostExec below it is a plain loop. The family files (ops_<family>.h) are
// templates over the context and never include CUDA headers, so the host test
// (tests/exec/gpu_kernels_host_test.cpp) runs every kernel body on machines
// with no GPU and compares it with the CPU (Halide) kernel. What that test
// cannot cover is the launch itself and the vendor library calls (cuBLAS);
// the GPU test (label gpu) covers those on a real device.
//
// The context concept (what a family file may call):
//   template <class F> void for_each(int64_t n, F f);
//       f(i) for every i in [0, n), in any order and in parallel: each i must
//       write only its own outputs and read nothing another i writes.
//   void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
//             const float *a, int64_t lda, const float *b, int64_t ldb,
//             float beta, float *c, int64_t ldc,
//             int64_t batch = 1, int64_t stride_a = 0, int64_t stride_b = 0, int64_t stride_c = 0);
//       Row-major C[m,n] = alpha * op(A) op(B) + beta * C, for `batch`
//       matrices at the given element strides; op(X) is X or its transpose.
//       A is [m,k] (or [k,m] when ta), B is [k,n] (or [n,k] when tb); lda,
//       ldb, ldc are row strides in elements.
//   float *workspace(size_t bytes);
//       Scratch device memory, valid until the next operator: `bytes` must not
//       exceed workspace_bytes().
//   size_t workspace_bytes() const;
//   void fill_zero(void *p, size_t bytes);
//   void copy(void *dst, const void *src, size_t bytes);   // device to device
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tessera/error.h"
#include "tessera/lang/kernels.h"

#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__
#else
#define TESSERA_HD
#endif

namespace tessera::gpu {

// Index helpers shared by the family files (host side).
inline int normalize_axis(int64_t axis, int rank) { return static_cast<int>(axis < 0 ? axis + rank : axis); }
inline int64_t extent_product(const Shape &s, int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= s[i];
    return p;
}

inline const float *f32(const TensorRef &t) { return static_cast<const float *>(t.data); }
inline float *f32_out(const TensorRef &t) { return static_cast<float *>(t.data); }
inline const int32_t *i32(const TensorRef &t) { return static_cast<const int32_t *>(t.data); }
inline int32_t *i32_out(const TensorRef &t) { return static_cast<int32_t *>(t.data); }

// The column-major (BLAS/cuBLAS) GEMM that computes a row-major one: row-major
// C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so the operands swap
// places, m and n swap, and each keeps its own transpose flag and leading
// dimension. The CUDA context passes these fields to cublasSgemm(StridedBatched);
// the host test checks them with a plain column-major GEMM.
struct ColumnMajorGemm {
    bool trans_first = false, trans_second = false;
    int64_t m = 0, n = 0, k = 0;
    const float *first = nullptr;
    int64_t ld_first = 0, stride_first = 0;
    const float *second = nullptr;
    int64_t ld_second = 0, stride_second = 0;
};
inline ColumnMajorGemm column_major_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                                         int64_t lda, int64_t stride_a, const float *b, int64_t ldb,
                                         int64_t stride_b) {
    return {tb, ta, n, m, k, b, ldb, stride_b, a, lda, stride_a};
}

// The host context: serial loops and a plain-loop GEMM. For tests only; it is
// not a fast CPU backend (that is run_op()).
class HostExec {
public:
    explicit HostExec(size_t workspace_bytes = size_t{64} << 20) : ws_((workspace_bytes + 3) / 4) {}

    template <class F>
    void for_each(int64_t n, F f) {
        for (int64_t i = 0; i < n; i++) f(i);
    }

    void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
              const float *b, int64_t ldb, float beta, float *c, int64_t ldc, int64_t batch = 1,
              int64_t stride_a = 0, int64_t stride_b = 0, int64_t stride_c = 0) {
        for (int64_t q = 0; q < batch; q++) {
            const float *A = a + q * stride_a, *B = b + q * stride_b;
            float *C = c + q * stride_c;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double acc = 0;
                    for (int64_t p = 0; p < k; p++) {
                        float av = ta ? A[p * lda + i] : A[i * lda + p];
                        float bv = tb ? B[j * ldb + p] : B[p * ldb + j];
                        acc += double(av) * double(bv);
                    }
                    float prior = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
                    C[i * ldc + j] = alpha * static_cast<float>(acc) + prior;
                }
        }
    }

    float *workspace(size_t bytes) {
        TESSERA_INTERNAL_ASSERT(bytes <= workspace_bytes(), "workspace of ", bytes, " bytes asked, ",
                                workspace_bytes(), " available");
        return ws_.data();
    }
    size_t workspace_bytes() const { return ws_.size() * 4; }
    void fill_zero(void *p, size_t bytes) { std::memset(p, 0, bytes); }
    void copy(void *dst, const void *src, size_t bytes) { std::memmove(dst, src, bytes); }

private:
    std::vector<float> ws_;
};

}  // namespace tessera::gpu
