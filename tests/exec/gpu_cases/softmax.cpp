// GPU kernel cases for the softmax family: the row-wise operators at ranks 1 to
// 4 with odd class counts, one class and wide rows; cross-entropy with
// labels at the ends of the range and out of range (clamped), and a dloss that
// is not 1. A test below runs them through a workspace too small for all the
// rows' statistics, so that they are processed in chunks.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "cases.h"
#include "gpu/ops_softmax.h"
#include "tessera/types.h"

namespace tessera::test {

namespace {

using Fill = std::function<void(int, std::vector<float> &, std::vector<int32_t> &)>;

TensorType f32(Shape s) { return {DType::F32, std::move(s)}; }
TensorType i32(Shape s) { return {DType::I32, std::move(s)}; }

GpuCase make(std::string label, OpCall call, std::vector<TensorType> inputs, Fill fill, double rtol) {
    return {std::move(label), std::move(call), std::move(inputs), std::move(fill), rtol, 1e-5};
}

// Grad inputs: dy in [-1, 1) and y a softmax output (positive, rows summing to
// about 1) or a log-softmax output (log of one), as the operators expect.
Fill grad_fill(bool log, int64_t classes) {
    return [log, classes](int i, std::vector<float> &f, std::vector<int32_t> &) {
        if (i == 0) return spread(f, i, -1.0f, 1.0f);
        spread(f, i, 0.5f, 1.5f);
        for (size_t r = 0; r < f.size(); r += classes) {
            float total = 0;
            for (int64_t k = 0; k < classes; k++) total += f[r + k];
            for (int64_t k = 0; k < classes; k++) {
                f[r + k] /= total;
                if (log) f[r + k] = std::log(f[r + k]);
            }
        }
    };
}

// Logits in [-4, 4) (large ones when `big`, to test the max shift) and labels
// given by `label(row)`; input 2 (dloss) is 0.75.
Fill xent_fill(bool big, int32_t (*label)(size_t, int64_t), int64_t classes) {
    return [=](int i, std::vector<float> &f, std::vector<int32_t> &n) {
        if (i == 0) {
            spread(f, 0, -4.0f, 4.0f);
            if (big)
                for (float &v : f) v = v * 20.0f + 50.0f;
        } else if (i == 1) {
            for (size_t r = 0; r < n.size(); r++) n[r] = label(r, classes);
        } else {
            f[0] = 0.75f;
        }
    };
}

int32_t labels_in_range(size_t r, int64_t classes) { return static_cast<int32_t>((r * 5 + 3) % classes); }
// Ends of the range and beyond it (the kernels clamp): -7, 0, C-1, C, C+9, ...
int32_t labels_edges(size_t r, int64_t classes) {
    const int64_t pick[] = {-7, 0, classes - 1, classes, classes + 9};
    return static_cast<int32_t>(pick[r % 5]);
}

}  // namespace

std::vector<GpuCase> gpu_cases_softmax() {
    std::vector<GpuCase> cases;
    // Rank 1, one class, size-1 and folded leading dimensions, wide rows.
    const std::vector<Shape> shapes = {{13}, {4, 1}, {2, 1, 3, 17}, {9, 301}};
    for (const Shape &s : shapes) {
        std::string sh = shape_str(s);
        // Row sums over up to 301 classes in the CPU's order; exp and log may
        // round differently from Halide's.
        cases.push_back(make("softmax " + sh, {OpKind::Softmax, "sm", {}}, {f32(s)}, {}, 1e-4));
        cases.push_back(make("log_softmax " + sh, {OpKind::LogSoftmax, "sm", {}}, {f32(s)}, {}, 1e-4));
        cases.push_back(make("softmax_grad " + sh, {OpKind::SoftmaxGrad, "sm", {}}, {f32(s), f32(s)},
                             grad_fill(false, s.back()), 1e-4));
        cases.push_back(make("log_softmax_grad " + sh, {OpKind::LogSoftmaxGrad, "sm", {}}, {f32(s), f32(s)},
                             grad_fill(true, s.back()), 1e-4));
    }
    // Large logits: without the max shift exp() would overflow.
    Fill large = [](int, std::vector<float> &f, std::vector<int32_t> &) { spread(f, 0, 80.0f, 120.0f); };
    cases.push_back(make("softmax large logits", {OpKind::Softmax, "sm", {}}, {f32({5, 23})}, large, 1e-4));
    cases.push_back(make("log_softmax large logits", {OpKind::LogSoftmax, "sm", {}}, {f32({5, 23})}, large, 1e-4));

    struct Xent {
        Shape s;
        bool big;
        int32_t (*label)(size_t, int64_t);
        const char *tag;
    };
    const Xent xents[] = {{{1, 1}, false, labels_in_range, "one class"},
                          {{6, 10}, false, labels_in_range, "labels in range"},
                          {{10, 13}, false, labels_edges, "labels clamped"},
                          {{33, 129}, true, labels_in_range, "large logits"}};
    for (const Xent &x : xents) {
        std::string tag = std::string(x.tag) + " " + shape_str(x.s);
        Fill fill = xent_fill(x.big, x.label, x.s[1]);
        cases.push_back(make("softmax_xent " + tag, {OpKind::SoftmaxXent, "xent", {}}, {f32(x.s), i32({x.s[0]})},
                             fill, 1e-4));
        cases.push_back(make("softmax_xent_grad " + tag, {OpKind::SoftmaxXentGrad, "xent", {}},
                             {f32(x.s), i32({x.s[0]}), f32({})}, fill, 1e-4));
    }
    return cases;
}

// The row statistics go to the workspace in chunks of rows when it cannot hold
// them all: with room for 70 floats (33 to 35 a row: one to three statistics
// and 32 lanes' partial sums), every operator takes 2 rows at a time, over 13
// rows (a last, partial chunk). The loss is carried from chunk to chunk.
TEST(GpuKernelsHostSoftmax, SmallWorkspaceChunksTheRows) {
    const int64_t rows = 13, classes = 7;
    std::vector<float> x(rows * classes), y(rows * classes), dy(rows * classes), dloss = {0.5f};
    spread(x, 0, -3.0f, 3.0f);
    spread(y, 1, 0.0f, 0.3f);
    spread(dy, 2, -1.0f, 1.0f);
    std::vector<int32_t> labels(rows);
    for (int64_t r = 0; r < rows; r++) labels[r] = labels_in_range(r, classes);
    TensorType m = f32({rows, classes});
    TensorRef X{x.data(), m}, Y{y.data(), m}, DY{dy.data(), m}, L{labels.data(), i32({rows})},
        D{dloss.data(), f32({})};
    struct Run {
        OpKind kind;
        std::vector<TensorRef> in;
    };
    const Run runs[] = {{OpKind::Softmax, {X}},         {OpKind::LogSoftmax, {X}},
                        {OpKind::SoftmaxGrad, {DY, Y}}, {OpKind::LogSoftmaxGrad, {DY, Y}},
                        {OpKind::SoftmaxXent, {X, L}},  {OpKind::SoftmaxXentGrad, {X, L, D}}};
    for (const Run &r : runs) {
        SCOPED_TRACE(op_name(r.kind));
        OpCall call{r.kind, "sm", {}};
        std::vector<TensorType> types;
        for (const TensorRef &t : r.in) types.push_back(t.type);
        TensorType out = infer_types(call, types)[0];
        std::vector<float> want(out.elements()), got(out.elements(), std::nanf(""));
        run_op(call, r.in, {{want.data(), out}});
        gpu::HostExec ex(70 * sizeof(float));
        gpu::run_softmax(ex, call, r.in, {{got.data(), out}});
        for (size_t e = 0; e < want.size(); e++)
            EXPECT_NEAR(got[e], want[e], 1e-5 + 1e-4 * std::fabs(want[e])) << "element " << e;
    }
}

}  // namespace tessera::test
