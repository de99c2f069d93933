// matmul and batch_matmul: shapes, variant selection and kernel dispatch.
#include <cblas.h>

#include <atomic>

#include "tessera/error.h"
#include "tessera/tunables.h"

#include "family.h"

namespace tessera::lang {

namespace {

bool flag(const OpCall &c, const char *name) {
    int64_t v = c.attrs.get_int(c.who(), name, 0);
    TESSERA_CHECK(v == 0 || v == 1, c.who(), ": attribute '", name, "' must be 0 or 1, got ", v);
    return v == 1;
}

}  // namespace

std::vector<TensorType> infer_matmul(const OpCall &c, const std::vector<TensorType> &in) {
    bool batched = c.kind == OpKind::BatchMatmul;
    int rank = batched ? 3 : 2;
    expect_dtype(c, in, 0, "x", DType::F32);
    expect_dtype(c, in, 1, "w", DType::F32);
    expect_rank(c, in, 0, "x", rank);
    expect_rank(c, in, 1, "w", rank);
    bool ta = flag(c, "transpose_a"), tb = flag(c, "transpose_b");
    const Shape &x = in[0].shape, &w = in[1].shape;
    int xm = ta ? rank - 1 : rank - 2, xk = ta ? rank - 2 : rank - 1;
    int wk = tb ? rank - 1 : rank - 2, wn = tb ? rank - 2 : rank - 1;
    TESSERA_CHECK(x[xk] == w[wk], c.who(), ": x ", shape_str(x), " has K=", x[xk], " (its dim ", xk,
                  ") but w ", shape_str(w), " has K=", w[wk], " (its dim ", wk, ")");
    if (batched) {
        TESSERA_CHECK(x[0] == w[0], c.who(), ": x has batch ", x[0], " but w has batch ", w[0]);
        return {{DType::F32, {x[0], x[xm], w[wn]}}};
    }
    return {{DType::F32, {x[xm], w[wn]}}};
}

StructMap structural_matmul(const OpCall &c, const std::vector<TensorType> &) {
    return {{"transpose_a", flag(c, "transpose_a")}, {"transpose_b", flag(c, "transpose_b")}};
}

void fill_defaults_matmul(OpCall &c) {
    if (!c.attrs.has("transpose_a")) c.attrs.set("transpose_a", int64_t{0});
    if (!c.attrs.has("transpose_b")) c.attrs.set("transpose_b", int64_t{0});
}

std::atomic<GemmBackend> &gemm_backend_state() {
    // A value that is neither name is an error (a typo must not silently mean BLAS);
    // the programs read it at start-up (gemm_backend()), before any kernel runs.
    static std::atomic<GemmBackend> b = [] {
        const std::string e = env_choice("TESSERA_GEMM", {"blas", "halide"}, "blas", "GEMM kernel");
        return e == "halide" ? GemmBackend::Halide : GemmBackend::Blas;
    }();
    return b;
}

namespace {

// C[M, N] = op(A) . op(B), row-major, for each batch.
void blas_gemm(const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    bool ta = flag(c, "transpose_a"), tb = flag(c, "transpose_b");
    const Shape &xs = in[0].type.shape, &ys = out[0].type.shape;
    int r = static_cast<int>(xs.size());
    int64_t batch = r == 3 ? xs[0] : 1, M = ys[r - 2], N = ys[r - 1], K = ta ? xs[r - 2] : xs[r - 1];
    const float *x = static_cast<const float *>(in[0].data), *w = static_cast<const float *>(in[1].data);
    float *y = static_cast<float *>(out[0].data);
    for (int64_t b = 0; b < batch; b++)
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f,
                    x + b * M * K, ta ? M : K, w + b * K * N, tb ? K : N, 0.0f, y + b * M * N, N);
}

}  // namespace

void run_matmul(const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    // OpenBLAS has no bf16 GEMM here: bf16 runs the Halide kernel's storage form.
    if (gemm_backend_state() == GemmBackend::Blas && in[0].type.dtype == DType::F32) return blas_gemm(c, in, out);
    std::string name = c.kind == OpKind::BatchMatmul ? "tk_batch_matmul_" : "tk_matmul_";
    name += flag(c, "transpose_a") ? "t" : "n";
    name += flag(c, "transpose_b") ? "t" : "n";
    call_kernel(name, {{in[0], {}}, {in[1], {}}}, {}, {{out[0], {}}});
}

}  // namespace tessera::lang

namespace tessera {
void set_gemm_backend(GemmBackend b) { lang::gemm_backend_state() = b; }
GemmBackend gemm_backend() { return lang::gemm_backend_state(); }
}  // namespace tessera
