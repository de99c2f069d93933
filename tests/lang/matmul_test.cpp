// matmul and batch_matmul against plain loops; their backward (matmuls with
// transposes) against central finite differences of a double-precision loop.
#include "test_util.h"

namespace tessera::test {
namespace {

struct Dims {
    int64_t m, k, n;
};

// y[m, n] = sum_k X[m, k] W[k, n], reading x and w through the transposes.
std::vector<double> ref_matmul(const std::vector<double> &x, const std::vector<double> &w, Dims d, bool ta,
                               bool tb) {
    std::vector<double> y(d.m * d.n, 0.0);
    for (int64_t i = 0; i < d.m; i++)
        for (int64_t j = 0; j < d.n; j++) {
            double s = 0;
            for (int64_t p = 0; p < d.k; p++) {
                double xv = ta ? x[p * d.m + i] : x[i * d.k + p];
                double wv = tb ? w[j * d.k + p] : w[p * d.n + j];
                s += xv * wv;
            }
            y[i * d.n + j] = s;
        }
    return y;
}

OpCall mm(bool ta, bool tb) { return {OpKind::Matmul, "fc", {{"transpose_a", int64_t(ta)}, {"transpose_b", int64_t(tb)}}}; }

// Every test runs with both GEMM backends: the Halide kernel generated from the
// description, and the OpenBLAS dispatch.
class MatmulShapes : public ::testing::TestWithParam<std::tuple<Dims, GemmBackend>> {
protected:
    void SetUp() override { set_gemm_backend(std::get<1>(GetParam())); }
    void TearDown() override { set_gemm_backend(GemmBackend::Blas); }
    Dims dims() const { return std::get<0>(GetParam()); }
};

TEST_P(MatmulShapes, ForwardAllTransposes) {
    Dims d = dims();
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            std::vector<HostTensor> in = {random_tensor(ta ? Shape{d.k, d.m} : Shape{d.m, d.k}, 1),
                                          random_tensor(tb ? Shape{d.n, d.k} : Shape{d.k, d.n}, 2)};
            auto out = run(mm(ta, tb), in);
            ASSERT_EQ(out[0].type.shape, (Shape{d.m, d.n}));
            expect_near(out[0].f, ref_matmul(to_double(in[0].f), to_double(in[1].f), d, ta, tb), 1e-5,
                        1e-4, "matmul");
        }
}

TEST_P(MatmulShapes, BatchedForward) {
    Dims d = dims();
    const int64_t B = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            std::vector<HostTensor> in = {random_tensor(ta ? Shape{B, d.k, d.m} : Shape{B, d.m, d.k}, 3),
                                          random_tensor(tb ? Shape{B, d.n, d.k} : Shape{B, d.k, d.n}, 4)};
            OpCall c{OpKind::BatchMatmul, "attn", {{"transpose_a", int64_t(ta)}, {"transpose_b", int64_t(tb)}}};
            auto out = run(c, in);
            ASSERT_EQ(out[0].type.shape, (Shape{B, d.m, d.n}));
            std::vector<double> want;
            for (int64_t b = 0; b < B; b++) {
                std::vector<double> xs(in[0].f.begin() + b * d.m * d.k, in[0].f.begin() + (b + 1) * d.m * d.k);
                std::vector<double> ws(in[1].f.begin() + b * d.k * d.n, in[1].f.begin() + (b + 1) * d.k * d.n);
                auto y = ref_matmul(xs, ws, d, ta, tb);
                want.insert(want.end(), y.begin(), y.end());
            }
            expect_near(out[0].f, want, 1e-5, 1e-4, "batch_matmul");
        }
}

// Backward of y = x.w is dx = dy.w^T and dw = x^T.dy, both matmuls.
TEST_P(MatmulShapes, BackwardMatchesFiniteDifferences) {
    Dims d = dims();
    if (d.m * d.k * d.n > 20000) GTEST_SKIP() << "finite differences only on small shapes";
    std::vector<HostTensor> in = {random_tensor({d.m, d.k}, 5), random_tensor({d.k, d.n}, 6)};
    HostTensor dy = random_tensor({d.m, d.n}, 7);
    std::vector<double> dyd = to_double(dy.f), xd = to_double(in[0].f), wd = to_double(in[1].f);

    std::vector<HostTensor> a = {dy, in[1]};
    auto dx = run(mm(false, true), a);
    std::vector<HostTensor> b = {in[0], dy};
    auto dw = run(mm(true, false), b);

    auto fx = [&](const std::vector<double> &x) { return dot(dyd, ref_matmul(x, wd, d, false, false)); };
    auto fw = [&](const std::vector<double> &w) { return dot(dyd, ref_matmul(xd, w, d, false, false)); };
    expect_near(dx[0].f, finite_diff(fx, xd), 1e-4, 1e-3, "dx");
    expect_near(dw[0].f, finite_diff(fw, wd), 1e-4, 1e-3, "dw");
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulShapes,
                         ::testing::Combine(::testing::Values(Dims{1, 1, 1}, Dims{1, 7, 1}, Dims{7, 13, 5},
                                                              Dims{5, 1, 9}, Dims{33, 17, 65}, Dims{64, 64, 64},
                                                              Dims{100, 129, 31}),
                                            ::testing::Values(GemmBackend::Halide, GemmBackend::Blas)),
                         [](const auto &info) {
                             Dims d = std::get<0>(info.param);
                             return "m" + std::to_string(d.m) + "_k" + std::to_string(d.k) + "_n" +
                                    std::to_string(d.n) +
                                    (std::get<1>(info.param) == GemmBackend::Halide ? "_halide" : "_blas");
                         });

TEST(MatmulErrors, MismatchedInnerDimension) {
    expect_error([] { infer_types(mm(false, false), {{DType::F32, {4, 5}}, {DType::F32, {6, 3}}}); },
                 "matmul 'fc': x [4, 5] has K=5 (its dim 1) but w [6, 3] has K=6 (its dim 0)");
}

TEST(MatmulErrors, WrongRank) {
    expect_error([] { infer_types(mm(false, false), {{DType::F32, {4, 5, 1}}, {DType::F32, {5, 3}}}); },
                 "input 0 (x) must have rank 2");
}

TEST(MatmulErrors, BadTransposeFlag) {
    OpCall c{OpKind::Matmul, "fc", {{"transpose_a", int64_t(2)}}};
    expect_error([&] { infer_types(c, {{DType::F32, {4, 5}}, {DType::F32, {5, 3}}}); },
                 "attribute 'transpose_a' must be 0 or 1, got 2");
}

TEST(MatmulErrors, WrongDtype) {
    expect_error([] { infer_types(mm(false, false), {{DType::I32, {4, 5}}, {DType::F32, {5, 3}}}); },
                 "input 0 (x) must be f32");
}

TEST(MatmulErrors, BatchMismatch) {
    OpCall c{OpKind::BatchMatmul, "attn", {}};
    expect_error([&] { infer_types(c, {{DType::F32, {2, 4, 5}}, {DType::F32, {3, 5, 3}}}); },
                 "x has batch 2 but w has batch 3");
}

}  // namespace
}  // namespace tessera::test
