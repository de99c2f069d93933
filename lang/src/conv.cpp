// Convolution and pooling: shapes and attribute validation, variant selection and
// kernel dispatch. Layout NCHW; weights [Co, Ci, KH, KW]. The window attributes are
// scalars: stride_h, stride_w (default 1 for convolutions, the kernel size for
// pooling), pad_h, pad_w (default 0); kernel_h, kernel_w for pooling and for
// conv2d_grad_weight; in_h, in_w where a gradient cannot recover the input size
// from its inputs (a strided window may skip the last rows).
//
// The three convolutions have two implementations, chosen by the GEMM backend
// (set_gemm_backend, TESSERA_GEMM): the Halide kernels generated from the
// descriptions, which are the definition, and im2col/col2im around OpenBLAS
// sgemm, the default, which is faster on CPUs.
#include <HalideRuntime.h>
#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "family.h"

namespace tessera::lang {

namespace {

bool is_pool(OpKind k) {
    return k == OpKind::MaxPool2d || k == OpKind::MaxPool2dGrad || k == OpKind::AvgPool2d ||
           k == OpKind::AvgPool2dGrad;
}

bool is_global(OpKind k) { return k == OpKind::GlobalAvgPool || k == OpKind::GlobalAvgPoolGrad; }

// Window attributes of one call, validated.
struct Window {
    int64_t kh = 0, kw = 0;  // kernel extents (from attributes or the weight)
    int64_t sh, sw, ph, pw;
};

Window window_attrs(const OpCall &c, int64_t kh, int64_t kw) {
    Window g;
    g.kh = kh;
    g.kw = kw;
    int64_t default_h = is_pool(c.kind) ? kh : 1, default_w = is_pool(c.kind) ? kw : 1;
    g.sh = int_at_least(c, "stride_h", default_h, 1);
    g.sw = int_at_least(c, "stride_w", default_w, 1);
    g.ph = int_at_least(c, "pad_h", 0, 0);
    g.pw = int_at_least(c, "pad_w", 0, 0);
    if (is_pool(c.kind)) {
        // A window entirely in the padding would have no input to pool.
        TESSERA_CHECK(2 * g.ph <= g.kh && 2 * g.pw <= g.kw, c.who(), ": padding (", g.ph, ", ", g.pw,
                      ") must be at most half the kernel (", g.kh, ", ", g.kw, ")");
    }
    return g;
}

// Output extent of a window sweep over `in` rows; errors name the dimension.
int64_t out_extent(const OpCall &c, const char *dim, int64_t in, int64_t k, int64_t pad, int64_t stride) {
    TESSERA_CHECK(in + 2 * pad >= k, c.who(), ": the input ", dim, " ", in, " with padding ", pad,
                  " on each side is smaller than the kernel ", dim, " ", k, "; the output would be empty");
    return (in + 2 * pad - k) / stride + 1;
}

// Output [N, C, OH, OW] of a window sweep over input shape [N, C, H, W].
Shape swept(const OpCall &c, const Shape &in, int64_t channels, const Window &g) {
    return {in[0], channels, out_extent(c, "height", in[2], g.kh, g.ph, g.sh),
            out_extent(c, "width", in[3], g.kw, g.pw, g.sw)};
}

void expect_dy_shape(const OpCall &c, const Shape &dy, const Shape &want, const char *why) {
    TESSERA_CHECK(dy == want, c.who(), ": dy has shape ", shape_str(dy), " but ", why, " gives ",
                  shape_str(want));
}

int64_t required_extent(const OpCall &c, const char *name) { return int_at_least(c, name, 1); }

// The window of an operator whose kernel extents are attributes (checked in order,
// so that a missing kernel_h is reported before kernel_w).
Window kernel_window(const OpCall &c) {
    int64_t kh = required_extent(c, "kernel_h");
    int64_t kw = required_extent(c, "kernel_w");
    return window_attrs(c, kh, kw);
}

}  // namespace

std::vector<TensorType> infer_conv(const OpCall &c, const std::vector<TensorType> &in) {
    switch (c.kind) {
    case OpKind::Conv2d: {
        expect_dtype(c, in, 0, "x", DType::F32);
        expect_dtype(c, in, 1, "w", DType::F32);
        expect_rank(c, in, 0, "x", 4);
        expect_rank(c, in, 1, "w", 4);
        const Shape &x = in[0].shape, &w = in[1].shape;
        TESSERA_CHECK(x[1] == w[1], c.who(), ": input has ", x[1], " channels but the weight expects ", w[1]);
        Window g = window_attrs(c, w[2], w[3]);
        return {{DType::F32, swept(c, x, w[0], g)}};
    }
    case OpKind::Conv2dGradInput: {
        expect_dtype(c, in, 0, "dy", DType::F32);
        expect_dtype(c, in, 1, "w", DType::F32);
        expect_rank(c, in, 0, "dy", 4);
        expect_rank(c, in, 1, "w", 4);
        const Shape &dy = in[0].shape, &w = in[1].shape;
        TESSERA_CHECK(dy[1] == w[0], c.who(), ": dy has ", dy[1], " channels but the weight has ", w[0],
                      " output channels");
        Window g = window_attrs(c, w[2], w[3]);
        Shape x = {dy[0], w[1], required_extent(c, "in_h"), required_extent(c, "in_w")};
        expect_dy_shape(c, dy, swept(c, x, w[0], g), "the convolution of an input of height in_h and width in_w");
        return {{DType::F32, x}};
    }
    case OpKind::Conv2dGradWeight: {
        expect_dtype(c, in, 0, "dy", DType::F32);
        expect_dtype(c, in, 1, "x", DType::F32);
        expect_rank(c, in, 0, "dy", 4);
        expect_rank(c, in, 1, "x", 4);
        const Shape &dy = in[0].shape, &x = in[1].shape;
        Window g = kernel_window(c);
        expect_dy_shape(c, dy, swept(c, x, dy[1], g), "the convolution of x with kernel_h and kernel_w");
        return {{DType::F32, {dy[1], x[1], g.kh, g.kw}}};
    }
    case OpKind::MaxPool2d:
    case OpKind::AvgPool2d: {
        expect_dtype(c, in, 0, "x", DType::F32);
        expect_rank(c, in, 0, "x", 4);
        Window g = kernel_window(c);
        return {{DType::F32, swept(c, in[0].shape, in[0].shape[1], g)}};
    }
    case OpKind::MaxPool2dGrad: {
        expect_dtype(c, in, 0, "dy", DType::F32);
        expect_dtype(c, in, 1, "x", DType::F32);
        expect_rank(c, in, 0, "dy", 4);
        expect_rank(c, in, 1, "x", 4);
        Window g = kernel_window(c);
        expect_dy_shape(c, in[0].shape, swept(c, in[1].shape, in[1].shape[1], g), "pooling x");
        return {in[1]};
    }
    case OpKind::AvgPool2dGrad: {
        expect_dtype(c, in, 0, "dy", DType::F32);
        expect_rank(c, in, 0, "dy", 4);
        const Shape &dy = in[0].shape;
        Window g = kernel_window(c);
        Shape x = {dy[0], dy[1], required_extent(c, "in_h"), required_extent(c, "in_w")};
        expect_dy_shape(c, dy, swept(c, x, dy[1], g), "pooling an input of height in_h and width in_w");
        return {{DType::F32, x}};
    }
    case OpKind::GlobalAvgPool:
        expect_dtype(c, in, 0, "x", DType::F32);
        expect_rank(c, in, 0, "x", 4);
        return {{DType::F32, {in[0].shape[0], in[0].shape[1]}}};
    case OpKind::GlobalAvgPoolGrad:
        expect_dtype(c, in, 0, "dy", DType::F32);
        expect_rank(c, in, 0, "dy", 2);
        return {{DType::F32, {in[0].shape[0], in[0].shape[1], required_extent(c, "in_h"),
                              required_extent(c, "in_w")}}};
    default: TESSERA_INTERNAL_ASSERT(false, c.who(), " is not a conv-family operator");
    }
}

// One description variant per operator: every window attribute is a scalar.
StructMap structural_conv(const OpCall &, const std::vector<TensorType> &) { return {}; }

void fill_defaults_conv(OpCall &c) {
    if (is_global(c.kind)) return;
    auto set_default = [&](const char *name, int64_t v) {
        if (!c.attrs.has(name)) c.attrs.set(name, v);
    };
    if (is_pool(c.kind)) {
        // Pooling strides default to the kernel; without a kernel there is nothing
        // to default to, and shape inference reports the missing attribute.
        if (c.attrs.has("kernel_h")) set_default("stride_h", c.attrs.get_int(c.who(), "kernel_h"));
        if (c.attrs.has("kernel_w")) set_default("stride_w", c.attrs.get_int(c.who(), "kernel_w"));
    } else {
        set_default("stride_h", 1);
        set_default("stride_w", 1);
    }
    set_default("pad_h", 0);
    set_default("pad_w", 0);
}

namespace {

// ---- The BLAS path ---------------------------------------------------------------
//
// Per image n, with the columns col[K, P] of its input (K = Ci*KH*KW rows, one per
// (ci, kh, kw) tap; P = OH*OW columns, one per output pixel):
//   conv2d:             y[n][Co, P]  = w[Co, K] . col
//   conv2d_grad_weight: dw[Co, K]   += dy[n][Co, P] . col^T
//   conv2d_grad_input:  col = w^T . dy[n][Co, P], added back into dx[n] at the
//                       pixels each column read (col2im). (At stride 1 this could
//                       be a convolution of dy with the flipped kernel, but its GEMM
//                       has only Ci rows and twice the columns to pack: slower.)
// The columns are built for a block of images at a time (or, for an image too
// large for the budget, a band of its output rows), split into tasks on the Halide
// runtime's thread pool; the GEMMs, one per image, run on OpenBLAS's threads.

struct ConvGeo {
    int64_t n, ci, h, w;  // input (or dx)
    int64_t co, kh, kw;   // weight
    int64_t oh, ow;       // output (or dy)
    int64_t sh, sw, ph, pw;
    int64_t taps() const { return ci * kh * kw; }  // K
    int64_t pixels() const { return oh * ow; }     // P
    int64_t in_plane() const { return h * w; }
    // A 1x1 kernel at stride 1 without padding reads the image as it is: its
    // columns are the input planes themselves.
    bool pointwise() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
    // Stride 1 with the output as wide as the input ("same" padding): a tap's
    // column row is its input plane shifted, one contiguous copy.
    bool shifted_planes() const { return sh == 1 && sw == 1 && ow == w; }
};

ConvGeo conv_geo(const OpCall &c, const Shape &x, const Shape &w, const Shape &y) {
    auto attr = [&](const char *name) { return c.attrs.get_int(c.who(), name); };
    return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3],
            attr("stride_h"), attr("stride_w"), attr("pad_h"), attr("pad_w")};
}

// Bytes of columns per block: a few images of the small sizes, so that the thread
// pool sees sizeable work, while the block stays well within one core's L2 (2 MB
// here; 256 KB to 2 MB measured alike on the zoo's cnn).
constexpr int64_t kColumnBudget = int64_t{1} << 20;

// Images [n0, n1) and output rows [r0, r1) whose columns are built at once: either
// whole images, or one band of one image.
struct Block {
    int64_t n0, n1, r0, r1;
};

template <typename Fn>
void for_each_block(const ConvGeo &g, Fn fn) {
    if (g.n == 0) return;
    int64_t image_bytes = g.taps() * g.pixels() * int64_t(sizeof(float));
    if (image_bytes <= kColumnBudget) {
        int64_t images = std::clamp<int64_t>(kColumnBudget / image_bytes, 1, g.n);
        for (int64_t n0 = 0; n0 < g.n; n0 += images) fn(Block{n0, std::min(g.n, n0 + images), 0, g.oh});
        return;
    }
    int64_t row_bytes = g.taps() * g.ow * int64_t(sizeof(float));
    int64_t rows = std::clamp<int64_t>(kColumnBudget / row_bytes, 1, g.oh);
    for (int64_t n = 0; n < g.n; n++)
        for (int64_t r0 = 0; r0 < g.oh; r0 += rows) fn(Block{n, n + 1, r0, std::min(g.oh, r0 + rows)});
}

// Kernel workspace: the columns of one block, per thread, grown to the largest
// block seen and then reused, so that steady-state training allocates nothing per
// call. A block is at most max(kColumnBudget, one output row of one image).
float *column_workspace(int64_t floats) {
    thread_local std::vector<float> columns;
    if (static_cast<int64_t>(columns.size()) < floats) columns.resize(floats);
    return columns.data();
}

// fn(task) for task in [0, tasks), on the Halide runtime's thread pool (the one the
// generated kernels use), the calling thread included.
template <typename Fn>
void parallel_tasks(int64_t tasks, const Fn &fn) {
    if (tasks <= 1) {
        if (tasks == 1) fn(0);
        return;
    }
    auto body = [](void *, int task, uint8_t *closure) {
        (*reinterpret_cast<const Fn *>(closure))(task);
        return 0;
    };
    halide_do_par_for(nullptr, body, 0, static_cast<int>(tasks),
                      reinterpret_cast<uint8_t *>(const_cast<Fn *>(&fn)));
}

// Splits `items` (column rows, or planes) of `item_floats` each into tasks of at
// least kTaskFloats, so that small blocks are not scattered over the threads.
constexpr int64_t kTaskFloats = 1 << 14;

int64_t task_count(int64_t items, int64_t item_floats) {
    return std::clamp<int64_t>(items * item_floats / kTaskFloats, 1, std::min<int64_t>(items, 64));
}

// Output columns [lo, hi) whose tap at kernel column b reads inside the image:
// 0 <= ow*sw + b - pw < W.
struct Span {
    int64_t lo, hi;
};

Span inside(const ConvGeo &g, int64_t b) {
    int64_t first = g.pw - b, last = g.w - 1 + g.pw - b;  // ow*sw must lie in [first, last]
    int64_t lo = first <= 0 ? 0 : (first + g.sw - 1) / g.sw;
    int64_t hi = last < 0 ? 0 : std::min(g.ow, last / g.sw + 1);
    return {std::min(lo, hi), hi};
}

// Output rows [lo, hi) within [r0, r1) whose tap at kernel row a reads inside the
// image: 0 <= oh*sh + a - ph < H.
Span inside_rows(const ConvGeo &g, int64_t a, int64_t r0, int64_t r1) {
    int64_t first = g.ph - a, last = g.h - 1 + g.ph - a;
    int64_t lo = first <= 0 ? 0 : (first + g.sh - 1) / g.sh;
    int64_t hi = last < 0 ? 0 : last / g.sh + 1;
    lo = std::clamp(lo, r0, r1);
    return {lo, std::clamp(hi, lo, r1)};
}

// Row `tap` = (ci, a, b) of the columns of image x ([Ci, H, W]) for output rows
// [r0, r1): (r1 - r0) * OW values, zero where the tap reads the padding.
void im2col_row(const ConvGeo &g, const float *x, int64_t tap, int64_t r0, int64_t r1, float *row) {
    const int64_t b = tap % g.kw, a = tap / g.kw % g.kh, ci = tap / (g.kw * g.kh);
    const float *plane = x + ci * g.in_plane();
    Span s = inside(g, b), rs = inside_rows(g, a, r0, r1);
    std::fill(row, row + (rs.lo - r0) * g.ow, 0.0f);
    std::fill(row + (rs.hi - r0) * g.ow, row + (r1 - r0) * g.ow, 0.0f);
    if (g.shifted_planes()) {
        // Output (oh, ow) reads plane[(oh + a - ph) * W + ow + b - pw]: one shifted
        // copy of the rows, clipped to the plane; what wrapped around from the
        // neighbouring rows lands in the padding columns, zeroed after.
        int64_t shift = (a - g.ph) * g.w + b - g.pw;
        int64_t begin = std::max(rs.lo * g.ow, -shift), end = std::min(rs.hi * g.ow, g.in_plane() - shift);
        if (begin < end) std::memcpy(row + begin - r0 * g.ow, plane + begin + shift, (end - begin) * sizeof(float));
        // Column by column: the padding is a few columns of many short rows.
        for (int64_t q = 0; q < g.ow; q++) {
            if (q == s.lo) q = std::max(s.hi, q);
            if (q >= g.ow) break;
            for (int64_t r = rs.lo; r < rs.hi; r++) row[(r - r0) * g.ow + q] = 0.0f;
        }
        return;
    }
    for (int64_t r = rs.lo; r < rs.hi; r++) {
        float *out = row + (r - r0) * g.ow;
        const float *src = plane + (r * g.sh + a - g.ph) * g.w;
        std::fill(out, out + s.lo, 0.0f);
        for (int64_t q = s.lo; q < s.hi; q++) out[q] = src[q * g.sw + b - g.pw];
        std::fill(out + s.hi, out + g.ow, 0.0f);
    }
}

// The columns of images [n0, n1) of x for output rows [r0, r1): image b of the
// block at col + b*K*cols, each [K, cols] with cols = (r1 - r0) * OW.
void im2col(const ConvGeo &g, const float *x, const Block &k, float *col) {
    const int64_t K = g.taps(), cols = (k.r1 - k.r0) * g.ow, images = k.n1 - k.n0;
    const int64_t per_image = task_count(K, cols);
    parallel_tasks(images * per_image, [&](int64_t task) {
        int64_t b = task / per_image, part = task % per_image;
        const float *xn = x + (k.n0 + b) * g.ci * g.in_plane();
        for (int64_t tap = K * part / per_image; tap < K * (part + 1) / per_image; tap++)
            im2col_row(g, xn, tap, k.r0, k.r1, col + (b * K + tap) * cols);
    });
}

// The adjoint of im2col_row for the taps of channel ci: adds each column entry
// into the pixel of plane ci of dx that it was read from. Clobbers the entries of
// col that read the padding.
void col2im_channel(const ConvGeo &g, float *col, int64_t ci, int64_t r0, int64_t r1, float *dx) {
    const int64_t cols = (r1 - r0) * g.ow;
    float *plane = dx + ci * g.in_plane();
    for (int64_t a = 0; a < g.kh; a++)
        for (int64_t b = 0; b < g.kw; b++) {
            float *row = col + ((ci * g.kh + a) * g.kw + b) * cols;
            Span s = inside(g, b), rs = inside_rows(g, a, r0, r1);
            if (g.shifted_planes()) {
                // The adjoint of the shifted copy: clear the padding columns, which
                // would land on the neighbouring rows, then add the rows at once.
                for (int64_t q = 0; q < g.ow; q++) {
                    if (q == s.lo) q = std::max(s.hi, q);
                    if (q >= g.ow) break;
                    for (int64_t r = rs.lo; r < rs.hi; r++) row[(r - r0) * g.ow + q] = 0.0f;
                }
                int64_t shift = (a - g.ph) * g.w + b - g.pw, first = r0 * g.ow;
                int64_t begin = std::max(rs.lo * g.ow, -shift), end = std::min(rs.hi * g.ow, g.in_plane() - shift);
                for (int64_t j = begin; j < end; j++) plane[j + shift] += row[j - first];
                continue;
            }
            for (int64_t r = rs.lo; r < rs.hi; r++) {
                const float *in = row + (r - r0) * g.ow;
                float *dst = plane + (r * g.sh + a - g.ph) * g.w;
                for (int64_t q = s.lo; q < s.hi; q++) dst[q * g.sw + b - g.pw] += in[q];
            }
        }
}

float *f32(const TensorRef &t) { return static_cast<float *>(t.data); }

// For each block of output rows (for_each_block): its im2col columns, then
// gemm(n, block, cols, columns) for each image n of the block, whose
// columns are K = taps rows of `cols`.
template <typename Gemm>
void for_each_image_columns(const ConvGeo &g, const float *x, Gemm &&gemm) {
    const int64_t K = g.taps();
    for_each_block(g, [&](const Block &k) {
        const int64_t cols = (k.r1 - k.r0) * g.ow;
        float *col = column_workspace((k.n1 - k.n0) * K * cols);
        im2col(g, x, k, col);
        for (int64_t n = k.n0; n < k.n1; n++) gemm(n, k, cols, col + (n - k.n0) * K * cols);
    });
}

void blas_conv2d(const ConvGeo &g, const float *x, const float *w, float *y) {
    const int64_t K = g.taps(), P = g.pixels();
    if (g.pointwise()) {
        for (int64_t n = 0; n < g.n; n++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.co, P, K, 1.0f, w, K, x + n * g.ci * P, P,
                        0.0f, y + n * g.co * P, P);
        return;
    }
    for_each_image_columns(g, x, [&](int64_t n, const Block &k, int64_t cols, const float *col) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.co, cols, K, 1.0f, w, K, col, cols, 0.0f,
                    y + n * g.co * P + k.r0 * g.ow, P);
    });
}

void blas_conv2d_grad_weight(const ConvGeo &g, const float *dy, const float *x, float *dw) {
    const int64_t K = g.taps(), P = g.pixels();
    std::fill(dw, dw + g.co * K, 0.0f);
    if (g.pointwise()) {
        for (int64_t n = 0; n < g.n; n++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g.co, K, P, 1.0f, dy + n * g.co * P, P,
                        x + n * g.ci * P, P, 1.0f, dw, K);
        return;
    }
    for_each_image_columns(g, x, [&](int64_t n, const Block &k, int64_t cols, const float *col) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g.co, K, cols, 1.0f, dy + n * g.co * P + k.r0 * g.ow, P,
                    col, cols, 1.0f, dw, K);
    });
}

void blas_conv2d_grad_input(const ConvGeo &g, const float *dy, const float *w, float *dx) {
    const int64_t K = g.taps(), P = g.pixels();
    if (g.pointwise()) {
        for (int64_t n = 0; n < g.n; n++)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, P, g.co, 1.0f, w, K, dy + n * g.co * P, P, 0.0f,
                        dx + n * g.ci * P, P);
        return;
    }
    for_each_block(g, [&](const Block &k) {
        const int64_t cols = (k.r1 - k.r0) * g.ow, images = k.n1 - k.n0;
        float *col = column_workspace(images * K * cols);
        for (int64_t n = k.n0; n < k.n1; n++)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, cols, g.co, 1.0f, w, K,
                        dy + n * g.co * P + k.r0 * g.ow, P, 0.0f, col + (n - k.n0) * K * cols, cols);
        // Tasks own whole planes of dx, so their additions never overlap; a plane
        // is cleared by the task that adds its first band.
        const int64_t per_image = task_count(g.ci, g.kh * g.kw * cols);
        parallel_tasks(images * per_image, [&](int64_t task) {
            int64_t b = task / per_image, part = task % per_image;
            float *dxn = dx + (k.n0 + b) * g.ci * g.in_plane();
            for (int64_t ci = g.ci * part / per_image; ci < g.ci * (part + 1) / per_image; ci++) {
                if (k.r0 == 0) std::fill(dxn + ci * g.in_plane(), dxn + (ci + 1) * g.in_plane(), 0.0f);
                col2im_channel(g, col + b * K * cols, ci, k.r0, k.r1, dxn);
            }
        });
    });
}

// Runs a convolution through BLAS; false for the operators that have no BLAS path.
bool run_blas_conv(const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    switch (c.kind) {
    case OpKind::Conv2d: {
        ConvGeo g = conv_geo(c, in[0].type.shape, in[1].type.shape, out[0].type.shape);
        blas_conv2d(g, f32(in[0]), f32(in[1]), f32(out[0]));
        return true;
    }
    case OpKind::Conv2dGradInput: {
        ConvGeo g = conv_geo(c, out[0].type.shape, in[1].type.shape, in[0].type.shape);
        blas_conv2d_grad_input(g, f32(in[0]), f32(in[1]), f32(out[0]));
        return true;
    }
    case OpKind::Conv2dGradWeight: {
        ConvGeo g = conv_geo(c, in[1].type.shape, out[0].type.shape, in[0].type.shape);
        blas_conv2d_grad_weight(g, f32(in[0]), f32(in[1]), f32(out[0]));
        return true;
    }
    default: return false;
    }
}

}  // namespace

void run_conv(const OpCall &call, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    // Every integer attribute (defaults filled) is offered; each kernel takes the
    // ones its description names.
    OpCall c = with_defaults(call);
    const bool f32 = in[0].type.dtype == DType::F32;  // bf16 runs the Halide kernel's storage form
    if (f32 && gemm_backend() == GemmBackend::Blas && run_blas_conv(c, in, out)) return;
    Scalars s;
    for (const auto &[name, v] : c.attrs.values())
        if (auto *i = std::get_if<int64_t>(&v)) s.set(name, static_cast<double>(*i));
    std::vector<KernelArg> args;
    for (const TensorRef &t : in) args.push_back({t, {}});
    call_kernel(std::string("tk_") + op_name(c.kind), args, s, {{out[0], {}}});
}

}  // namespace tessera::lang
