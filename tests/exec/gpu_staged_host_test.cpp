// The GPU kernels of the staged operators (exec/src/gpu/ops_staged.h), run on
// the host through HostExec, against the CPU kernels (tessera::run_op, the
// staged kernels Halide compiles from the same descriptions).
//
// Each case cuts the inputs into uneven blocks along one index variable, as
// the partition strategy of that variable cuts them (which inputs split, along
// which dimension; which stages cross blocks and how they combine), and builds
// every phase's call with staged_call(), as lowering does. Then:
//   - every phase of every block runs on both sides on the same inputs (the
//     CPU's stages, combined over the blocks), and the two agree: exactly for
//     a maximum, a picked logit and a plane's sum; within rounding where the
//     sums add in another order, and in the last phases, where the CPU kernel
//     may contract a multiply and an add into one FMA (on a target with FMA);
//   - the GPU kernels alone, their stages combined over the blocks as the
//     collective would, give the outputs of the whole operator's CPU kernel.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "gpu/ops.h"
#include "tessera/lang/staged.h"
#include "tessera/lang/strategy.h"

namespace tessera::test {
namespace {

struct HostT {
    TensorType type;
    std::vector<float> f;
    std::vector<int32_t> i;
    std::vector<double> d;

    HostT() = default;
    explicit HostT(TensorType t) : type(std::move(t)) {
        const auto n = static_cast<size_t>(type.elements());
        if (type.dtype == DType::F32) f.assign(n, std::nanf(""));  // poisoned: unwritten elements show
        else if (type.dtype == DType::F64) d.assign(n, std::nan(""));
        else i.assign(n, -12345);
    }
    TensorRef ref() {
        void *p = type.dtype == DType::F32 ? static_cast<void *>(f.data())
                  : type.dtype == DType::F64 ? static_cast<void *>(d.data())
                                             : static_cast<void *>(i.data());
        return {p, type};
    }
    // Element e as a double, whatever the dtype.
    double at(size_t e) const {
        return type.dtype == DType::F32 ? f[e] : type.dtype == DType::F64 ? d[e] : i[e];
    }
    void set(size_t e, double v) {
        if (type.dtype == DType::F32) f[e] = static_cast<float>(v);
        else d[e] = v;
    }
};

HostT floats(Shape s, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    HostT t({DType::F32, std::move(s)});
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    for (float &v : t.f) v = dist(g);
    return t;
}

HostT labels(std::vector<int32_t> v) {
    HostT t({DType::I32, {static_cast<int64_t>(v.size())}});
    t.i = std::move(v);
    return t;
}

// Elements [lo, hi) of dimension d, and the inverse.
HostT slice(const HostT &t, int d, int64_t lo, int64_t hi) {
    const Shape &s = t.type.shape;
    const int64_t outer = num_elements(Shape(s.begin(), s.begin() + d)),
                  inner = num_elements(Shape(s.begin() + d + 1, s.end())), ext = s[d];
    Shape bs = s;
    bs[d] = hi - lo;
    HostT r({t.type.dtype, bs});
    for (int64_t o = 0; o < outer; o++)
        for (int64_t x = lo; x < hi; x++)
            for (int64_t e = 0; e < inner; e++) {
                const size_t from = (o * ext + x) * inner + e, to = (o * (hi - lo) + (x - lo)) * inner + e;
                if (t.type.dtype == DType::I32) r.i[to] = t.i[from];
                else r.f[to] = t.f[from];
            }
    return r;
}

void paste(HostT &whole, const HostT &part, int d, int64_t lo) {
    const Shape &s = whole.type.shape;
    const int64_t outer = num_elements(Shape(s.begin(), s.begin() + d)),
                  inner = num_elements(Shape(s.begin() + d + 1, s.end())), ext = s[d], n = part.type.shape[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t x = 0; x < n; x++)
            for (int64_t e = 0; e < inner; e++)
                whole.f[(o * ext + lo + x) * inner + e] = part.f[(o * n + x) * inner + e];
}

std::vector<TensorType> types_of(const std::vector<HostT> &v) {
    std::vector<TensorType> t;
    for (const HostT &h : v) t.push_back(h.type);
    return t;
}

std::vector<TensorRef> refs_of(std::vector<HostT> &v) {
    std::vector<TensorRef> r;
    for (HostT &h : v) r.push_back(h.ref());
    return r;
}

enum class Side { Cpu, Gpu };

std::vector<HostT> run_side(Side side, gpu::HostExec &ex, const OpCall &call, std::vector<HostT> &in) {
    std::vector<HostT> out;
    for (const TensorType &t : infer_types(call, types_of(in))) out.emplace_back(t);
    if (side == Side::Cpu) run_op(call, refs_of(in), refs_of(out));
    else gpu::run_op(ex, call, refs_of(in), refs_of(out));
    return out;
}

// How closely the GPU kernel must match: exactly, or |gpu - cpu| <= atol + rtol |cpu|.
struct Tol {
    bool exact = false;
    double rtol = 1e-5, atol = 1e-6;
};

void expect_close(const HostT &got, const HostT &want, const Tol &tol, const std::string &what) {
    ASSERT_EQ(got.type, want.type) << what;
    int bad = 0;
    for (size_t e = 0; e < static_cast<size_t>(want.type.elements()) && bad < 5; e++) {
        const double w = want.at(e), g = got.at(e);
        const bool ok = tol.exact ? (g == w || (std::isnan(g) && std::isnan(w)))
                                  : std::fabs(g - w) <= tol.atol + tol.rtol * std::fabs(w);
        if (!ok) {
            ADD_FAILURE() << what << " element " << e << ": gpu " << g << ", cpu " << w
                          << (tol.exact ? " (must be equal)" : "");
            bad++;
        }
    }
}

// A staged operator cut into blocks of `var` (extents `sizes`, which add up
// to the split dimension's extent).
struct Case {
    std::string label;
    OpCall call;
    std::vector<HostT> inputs;
    std::string var;
    std::vector<int64_t> sizes;
    // The tolerance of phase p's outputs (per phase; the last phase's entry
    // is for the operator's outputs), and of the GPU-only chain against the
    // whole operator.
    std::vector<Tol> phase_tol;
    Tol end_tol;
};

const Strategy &strategy_of(const Case &c) {
    const OpStrategies *table = strategies_for(c.call, types_of(c.inputs));
    EXPECT_NE(table, nullptr) << c.label;
    for (const Strategy &s : table->strategies)
        if (s.var == c.var) return s;
    ADD_FAILURE() << c.label << " has no strategy '" << c.var << "'";
    return table->strategies.front();
}

// Every block's stage becomes the blocks' sum (or max), in block order, as
// the all-reduce after the phase leaves it on every rank.
void combine(std::vector<HostT> &stage, const std::string &reduce) {
    for (size_t e = 0; e < static_cast<size_t>(stage[0].type.elements()); e++) {
        double v = stage[0].at(e);
        float vf = stage[0].type.dtype == DType::F32 ? stage[0].f[e] : 0.0f;
        for (size_t b = 1; b < stage.size(); b++) {
            if (stage[0].type.dtype == DType::F32)  // added in float, as the collective does
                vf = reduce == "max" ? std::max(vf, stage[b].f[e]) : vf + stage[b].f[e];
            else v = reduce == "max" ? std::max(v, stage[b].at(e)) : v + stage[b].at(e);
        }
        for (HostT &t : stage) t.set(e, stage[0].type.dtype == DType::F32 ? vf : v);
    }
}

struct Blocks {
    std::vector<std::vector<HostT>> in;       // per block, the operator's inputs
    std::vector<Shape> whole;
    std::vector<std::vector<Shape>> origin;  // per block
    std::vector<int64_t> lo;                 // per block, along the split
};

Blocks cut(const Case &c, const Strategy &s) {
    Blocks b;
    for (const HostT &t : c.inputs) b.whole.push_back(t.type.shape);
    int64_t lo = 0;
    for (int64_t size : c.sizes) {
        std::vector<HostT> in;
        std::vector<Shape> origin;
        for (size_t i = 0; i < c.inputs.size(); i++) {
            Shape o(c.inputs[i].type.shape.size(), 0);
            if (s.inputs[i].kind == NeedKind::Split) {
                const int d = s.inputs[i].dim;
                in.push_back(slice(c.inputs[i], d, lo, lo + size));
                o[static_cast<size_t>(d)] = lo;
            } else {
                in.push_back(c.inputs[i]);
            }
            origin.push_back(o);
        }
        b.in.push_back(std::move(in));
        b.origin.push_back(std::move(origin));
        b.lo.push_back(lo);
        lo += size;
    }
    return b;
}

// Runs `c` staged: every phase on both sides, compared, the CPU's stages
// combined and given to both for the next phase. Returns the number of
// phase outputs compared.
int compare_phases(const Case &c, gpu::HostExec &ex) {
    const Strategy &s = strategy_of(c);
    EXPECT_FALSE(s.reductions.empty()) << c.label << " splitting " << c.var << " stages nothing";
    const std::vector<std::string> stages = op_stages(c.call, types_of(c.inputs));
    EXPECT_EQ(c.phase_tol.size(), stages.size() + 1) << c.label;
    Blocks b = cut(c, s);
    const size_t k = c.sizes.size();
    int compared = 0;
    for (size_t p = 0; p <= stages.size(); p++) {
        const std::string name = p < stages.size() ? "stage " + stages[p] : "the outputs";
        std::vector<HostT> cpu_stage;
        for (size_t bi = 0; bi < k; bi++) {
            SCOPED_TRACE("phase " + std::to_string(p) + " (" + name + "), block " + std::to_string(bi));
            const OpCall call = staged_call(c.call, static_cast<int>(p), b.whole, b.origin[bi]);
            std::vector<HostT> want = run_side(Side::Cpu, ex, call, b.in[bi]);
            std::vector<HostT> got = run_side(Side::Gpu, ex, call, b.in[bi]);
            for (size_t o = 0; o < want.size(); o++, compared++)
                expect_close(got[o], want[o], c.phase_tol[p], "output " + std::to_string(o));
            if (p < stages.size()) cpu_stage.push_back(want[0]);
        }
        if (p == stages.size()) break;
        auto red = std::find_if(s.reductions.begin(), s.reductions.end(),
                                [&](const StageReduction &r) { return r.stage == stages[p]; });
        if (red != s.reductions.end()) combine(cpu_stage, red->reduce);
        for (size_t bi = 0; bi < k; bi++) b.in[bi].push_back(cpu_stage[bi]);
    }
    return compared;
}

// The GPU kernels alone over the blocks, their stages combined (or, with
// `combine_stages` false, left per block), and the blocks' outputs put
// together as the strategy places them.
std::vector<HostT> gpu_blocked(const Case &c, gpu::HostExec &ex, bool combine_stages = true) {
    const Strategy &s = strategy_of(c);
    const std::vector<std::string> stages = op_stages(c.call, types_of(c.inputs));
    Blocks b = cut(c, s);
    const size_t k = c.sizes.size();
    for (size_t p = 0; p < stages.size(); p++) {
        std::vector<HostT> stage;
        for (size_t bi = 0; bi < k; bi++)
            stage.push_back(
                run_side(Side::Gpu, ex, staged_call(c.call, static_cast<int>(p), b.whole, b.origin[bi]), b.in[bi])[0]);
        auto red = std::find_if(s.reductions.begin(), s.reductions.end(),
                                [&](const StageReduction &r) { return r.stage == stages[p]; });
        if (combine_stages && red != s.reductions.end()) combine(stage, red->reduce);
        for (size_t bi = 0; bi < k; bi++) b.in[bi].push_back(stage[bi]);
    }
    std::vector<HostT> outs;
    for (const TensorType &t : infer_types(c.call, types_of(c.inputs))) outs.emplace_back(t);
    for (size_t bi = 0; bi < k; bi++) {
        const OpCall last = staged_call(c.call, static_cast<int>(stages.size()), b.whole, b.origin[bi]);
        std::vector<HostT> part = run_side(Side::Gpu, ex, last, b.in[bi]);
        for (size_t j = 0; j < outs.size(); j++) {
            if (s.outputs[j].kind == OutKind::Split) {
                paste(outs[j], part[j], s.outputs[j].dim, b.lo[bi]);
            } else if (bi == 0) {
                outs[j] = part[j];
            } else if (combine_stages) {
                EXPECT_EQ(outs[j].f, part[j].f) << c.label << ": replicated output " << j << " of block " << bi;
            }
        }
    }
    return outs;
}

OpCall op(OpKind k) { return with_defaults(OpCall{k, op_name(k), {}}); }

// Tolerances: `sums` for a stage summed in float in another order, `f64` for
// one summed in double, `elems` for element-wise formulas (a few ulp: FMAs),
// `same` where both sides compute the same operations in the same order.
const Tol same{true}, sums{false, 1e-5, 1e-6}, f64{false, 1e-13, 1e-13}, elems{false, 2e-6, 1e-7},
    end_to_end{false, 1e-5, 1e-6};

std::vector<Case> staged_cases() {
    std::vector<Case> v;
    // Batch norm over the batch (uneven blocks) and over space, both layouts.
    const HostT x4 = floats({6, 3, 5, 4}, 1, -2, 3), dy4 = floats({6, 3, 5, 4}, 2), g3 = floats({3}, 3, 0.5, 1.5),
                b3 = floats({3}, 4);
    const HostT x2 = floats({7, 5}, 5, -2, 3), dy2 = floats({7, 5}, 6), g5 = floats({5}, 7, 0.5, 1.5),
                b5 = floats({5}, 8);
    // 300 values a channel and block: more than the 256 lanes.
    const HostT xl = floats({12, 2, 10, 10}, 9, -1, 2), dyl = floats({12, 2, 10, 10}, 10), gl = floats({2}, 11);
    const std::vector<Tol> bn2{f64, f64, elems}, bn4{f64, f64, f64, f64, elems};
    v.push_back({"batch_norm nchw n 3|1|2", op(OpKind::BatchNorm), {x4, g3, b3}, "n", {3, 1, 2}, bn2, end_to_end});
    v.push_back({"batch_norm nchw h 2|3", op(OpKind::BatchNorm), {x4, g3, b3}, "h", {2, 3}, bn2, end_to_end});
    v.push_back({"batch_norm nc n 4|3", op(OpKind::BatchNorm), {x2, g5, b5}, "n", {4, 3}, bn2, end_to_end});
    v.push_back({"batch_norm lanes n 3|9", op(OpKind::BatchNorm), {xl, gl, gl}, "n", {3, 9}, bn2, end_to_end});
    v.push_back({"batch_norm_grad nchw n 1|2|3", op(OpKind::BatchNormGrad), {dy4, x4, g3}, "n", {1, 2, 3}, bn4,
                 {false, 1e-5, 1e-5}});
    v.push_back({"batch_norm_grad nchw w 3|1", op(OpKind::BatchNormGrad), {dy4, x4, g3}, "w", {3, 1}, bn4,
                 {false, 1e-5, 1e-5}});
    v.push_back({"batch_norm_grad nc n 2|5", op(OpKind::BatchNormGrad), {dy2, x2, g5}, "n", {2, 5}, bn4,
                 {false, 1e-5, 1e-5}});
    v.push_back({"batch_norm_grad lanes n 5|7", op(OpKind::BatchNormGrad), {dyl, xl, gl}, "n", {5, 7}, bn4,
                 {false, 1e-5, 1e-5}});
    OpCall stats = op(OpKind::BatchNormStats);
    stats.attrs.set("momentum", 0.25);
    const HostT rm3 = floats({3}, 12), rv3 = floats({3}, 13, 0.5, 2), rm5 = floats({5}, 14), rv5 = floats({5}, 15, 0.5, 2);
    v.push_back({"batch_norm_stats nchw n 2|4", stats, {x4, rm3, rv3}, "n", {2, 4}, bn2, end_to_end});
    v.push_back({"batch_norm_stats nc n 1|6", stats, {x2, rm5, rv5}, "n", {1, 6}, bn2, end_to_end});

    // Layer norm over the features (the last axis), rank 2 and 3, a non-default eps.
    const HostT lx = floats({2, 3, 10}, 20, -2, 3), ldy = floats({2, 3, 10}, 21), lg = floats({10}, 22, 0.5, 1.5),
                lb = floats({10}, 23);
    OpCall ln = op(OpKind::LayerNorm), lng = op(OpKind::LayerNormGrad);
    ln.attrs.set("eps", 0.01);
    lng.attrs.set("eps", 0.01);
    v.push_back({"layer_norm d2 4|3|3", ln, {lx, lg, lb}, "d2", {4, 3, 3}, {sums, sums, elems}, end_to_end});
    v.push_back({"layer_norm_grad d2 6|4", lng, {ldy, lx, lg}, "d2", {6, 4}, {sums, sums, sums, sums, elems},
                 {false, 1e-4, 1e-5}});
    const HostT wx = floats({5, 301}, 24), wdy = floats({5, 301}, 25), wg = floats({301}, 26, 0.5, 1.5);
    v.push_back({"layer_norm_grad wide d1 100|201", op(OpKind::LayerNormGrad), {wdy, wx, wg}, "d1", {100, 201},
                 {sums, sums, sums, sums, elems}, {false, 1e-4, 1e-5}});

    // The softmax family over the classes.
    const HostT sx = floats({3, 4, 11}, 30, -4, 4), sdy = floats({3, 4, 11}, 31);
    std::vector<HostT> sxs = {sx};
    gpu::HostExec ex(1 << 16);
    const HostT sy = run_side(Side::Cpu, ex, op(OpKind::Softmax), sxs)[0];
    const HostT ly = run_side(Side::Cpu, ex, op(OpKind::LogSoftmax), sxs)[0];
    v.push_back({"softmax d2 5|6", op(OpKind::Softmax), {sx}, "d2", {5, 6}, {same, sums, elems}, end_to_end});
    v.push_back({"log_softmax d2 2|4|5", op(OpKind::LogSoftmax), {sx}, "d2", {2, 4, 5}, {same, sums, elems},
                 end_to_end});
    v.push_back({"softmax rank1 d0 40|60", op(OpKind::Softmax), {floats({100}, 32, -4, 4)}, "d0", {40, 60},
                 {same, sums, elems}, end_to_end});
    v.push_back({"softmax_grad d2 7|4", op(OpKind::SoftmaxGrad), {sdy, sy}, "d2", {7, 4}, {sums, elems},
                 end_to_end});
    v.push_back({"log_softmax_grad d2 3|3|5", op(OpKind::LogSoftmaxGrad), {sdy, ly}, "d2", {3, 3, 5},
                 {sums, elems}, end_to_end});

    // Cross-entropy over the classes: labels in every block, at both ends of
    // the range, and out of it (clamped into the whole range, not the block's).
    const HostT logits = floats({6, 12}, 40, -3, 3), lab = labels({0, 11, 5, 6, -3, 40});
    HostT dloss({DType::F32, {}});
    dloss.f = {0.75f};
    v.push_back({"softmax_xent c 5|4|3", op(OpKind::SoftmaxXent), {logits, lab}, "c", {5, 4, 3},
                 {same, sums, same, elems}, end_to_end});
    v.push_back({"softmax_xent_grad c 7|5", op(OpKind::SoftmaxXentGrad), {logits, lab, dloss}, "c", {7, 5},
                 {same, sums, elems}, end_to_end});

    // Global average pooling over split space.
    const HostT px = floats({2, 3, 6, 4}, 50);
    v.push_back({"global_avg_pool h 4|2", op(OpKind::GlobalAvgPool), {px}, "h", {4, 2}, {same, same}, end_to_end});
    v.push_back({"global_avg_pool w 1|3", op(OpKind::GlobalAvgPool), {px}, "w", {1, 3}, {same, same}, end_to_end});
    return v;
}

TEST(GpuStagedHost, EveryPhaseMatchesTheCpuKernel) {
    // The default workspace, and one of 4 KiB: rows and channels then run in
    // chunks (one batch norm channel, a few rows at a time).
    for (size_t bytes : {size_t{64} << 20, size_t{4} << 10}) {
        SCOPED_TRACE("workspace " + std::to_string(bytes));
        gpu::HostExec ex(bytes);
        int compared = 0;
        for (const Case &c : staged_cases()) {
            SCOPED_TRACE(c.label);
            compared += compare_phases(c, ex);
        }
        EXPECT_GE(compared, 150);
    }
}

TEST(GpuStagedHost, BlocksWithCombinedStagesGiveTheWholeOperator) {
    gpu::HostExec ex;
    for (Case &c : staged_cases()) {
        SCOPED_TRACE(c.label);
        std::vector<HostT> want = run_side(Side::Cpu, ex, c.call, c.inputs);
        std::vector<HostT> got = gpu_blocked(c, ex);
        ASSERT_EQ(got.size(), want.size());
        for (size_t o = 0; o < want.size(); o++) expect_close(got[o], want[o], c.end_tol, "output " + std::to_string(o));
    }
}

// The comparisons above can fail: with every block's stages left as they are
// (not combined), each block normalises by its own statistics, and the
// outputs differ from the whole operator's by far more than the tolerance.
TEST(GpuStagedHost, UncombinedStagesChangeTheOutputs) {
    gpu::HostExec ex;
    int checked = 0;
    for (Case &c : staged_cases()) {
        if (c.call.kind != OpKind::BatchNorm && c.call.kind != OpKind::Softmax && c.call.kind != OpKind::LayerNorm)
            continue;
        SCOPED_TRACE(c.label);
        const HostT want = run_side(Side::Cpu, ex, c.call, c.inputs)[0];
        const HostT got = gpu_blocked(c, ex, false)[0];
        double worst = 0;
        for (size_t e = 0; e < want.f.size(); e++) worst = std::max(worst, double(std::fabs(want.f[e] - got.f[e])));
        EXPECT_GT(worst, 1e-2);
        checked++;
    }
    EXPECT_GE(checked, 6);
}

// Batch norm's statistics are double sums rounded once to float, so the
// float every block reads does not depend on how the batch was split: the
// GPU kernels over any blocks give the bits of the GPU kernels over one block
// (tests/lang/staged_test.cpp finds the same of the CPU kernels).
TEST(GpuStagedHost, BatchNormOutputsDoNotDependOnTheSplit) {
    gpu::HostExec ex;
    int checked = 0;
    for (Case &c : staged_cases()) {
        if (c.call.kind != OpKind::BatchNorm && c.call.kind != OpKind::BatchNormGrad &&
            c.call.kind != OpKind::BatchNormStats)
            continue;
        SCOPED_TRACE(c.label);
        const std::vector<HostT> got = gpu_blocked(c, ex);
        Case one = c;
        int64_t total = 0;
        for (int64_t size : c.sizes) total += size;
        one.sizes = {total};
        const std::vector<HostT> want = gpu_blocked(one, ex);
        for (size_t o = 0; o < want.size(); o++) expect_close(got[o], want[o], same, "output " + std::to_string(o));
        checked++;
    }
    EXPECT_GE(checked, 10);
}

}  // namespace
}  // namespace tessera::test
