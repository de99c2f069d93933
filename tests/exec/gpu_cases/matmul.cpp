// matmul and batch_matmul: every transpose pair, odd extents (not multiples of
// 4/8/32), size-1 rows, columns and reductions, a batch of one and of several.
#include <string>

#include "cases.h"

namespace tessera::test {

namespace {

// x and w in storage order for the given transposes: x [.., M, K] or [.., K, M],
// w [.., K, N] or [.., N, K].
GpuCase product(bool batched, int64_t b, int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
    Shape x = ta ? Shape{k, m} : Shape{m, k}, w = tb ? Shape{n, k} : Shape{k, n};
    if (batched) {
        x.insert(x.begin(), b);
        w.insert(w.begin(), b);
    }
    std::string label = std::string(batched ? "batch_matmul" : "matmul") + (ta ? " t" : " n") + (tb ? "t" : "n") +
                        " b" + std::to_string(b) + " m" + std::to_string(m) + " n" + std::to_string(n) + " k" +
                        std::to_string(k);
    OpCall call{batched ? OpKind::BatchMatmul : OpKind::Matmul, label,
                Attrs{{"transpose_a", int64_t{ta}}, {"transpose_b", int64_t{tb}}}};
    GpuCase c{label, call, {{DType::F32, x}, {DType::F32, w}}, {}};
    // The plain-loop GEMM of HostExec sums in another order than BLAS.
    c.rtol = 1e-4;
    c.atol = 1e-5;
    return c;
}

}  // namespace

std::vector<GpuCase> gpu_cases_matmul() {
    std::vector<GpuCase> cases;
    for (bool batched : {false, true})
        for (bool ta : {false, true})
            for (bool tb : {false, true}) {
                cases.push_back(product(batched, batched ? 3 : 1, 13, 7, 37, ta, tb));
                cases.push_back(product(batched, 1, 1, 9, 5, ta, tb));   // one row
                cases.push_back(product(batched, 2, 6, 1, 11, ta, tb));  // one column
                cases.push_back(product(batched, 2, 5, 3, 1, ta, tb));   // a reduction of one
            }
    // No attributes at all: both transposes default to 0.
    GpuCase plain{"matmul defaults", OpCall{OpKind::Matmul, "plain", {}},
                  {{DType::F32, {33, 70}}, {DType::F32, {70, 17}}}, {}};
    plain.rtol = 1e-4;
    cases.push_back(plain);
    GpuCase plain_b{"batch_matmul defaults", OpCall{OpKind::BatchMatmul, "plain", {}},
                    {{DType::F32, {4, 9, 65}}, {DType::F32, {4, 65, 10}}}, {}};
    plain_b.rtol = 1e-4;
    cases.push_back(plain_b);
    return cases;
}

}  // namespace tessera::test
