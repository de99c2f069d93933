// GPU kernels of the matmul family (see exec.h for the context they run on).
// Both operators are one (strided-batched) GEMM on the context: cuBLAS on the
// device. The transposes map onto the GEMM's op(A) and op(B) directly, so no
// operand is ever copied.
#pragma once

#include <vector>

#include "exec.h"

namespace tessera::gpu {

template <class Exec>
void run_matmul(Exec &ex, const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    // infer_types() has accepted the call, so the flags are 0 or 1 and the shapes agree.
    const bool ta = c.attrs.get_int(c.who(), "transpose_a", 0) == 1;
    const bool tb = c.attrs.get_int(c.who(), "transpose_b", 0) == 1;
    const Shape &xs = in[0].type.shape, &ys = out[0].type.shape;
    const int r = static_cast<int>(xs.size());
    const int64_t batch = r == 3 ? xs[0] : 1, M = ys[r - 2], N = ys[r - 1], K = ta ? xs[r - 2] : xs[r - 1];
    // Row strides of the stored (untransposed) matrices: x is [M, K] or [K, M],
    // w is [K, N] or [N, K].
    const int64_t lda = ta ? M : K, ldb = tb ? K : N;
    ex.gemm(ta, tb, M, N, K, 1.0f, f32(in[0]), lda, f32(in[1]), ldb, 0.0f, f32_out(out[0]), N, batch, M * K, K * N,
            M * N);
}

}  // namespace tessera::gpu
