// Convolution and pooling over NCHW tensors (Halide order: w, h, c, n).
//   conv2d(x [N, Ci, H, W], w [Co, Ci, KH, KW]) -> y [N, Co, OH, OW], no bias;
//   conv2d_grad_input, conv2d_grad_weight: its two gradients;
//   max_pool2d, avg_pool2d (padding counted in the average), global_avg_pool and
//   their gradients.
// Every output extent is OH = (H + 2*pad_h - KH) / stride_h + 1 (and likewise W).
//
// The index variables are named for the analysis: n, co, oh, ow for the forward
// outputs; the reductions ci, kh, kw. Inputs are read at raw (possibly negative)
// coordinates so that the analysis sees affine regions and derives the halo of a
// split along oh; the padding is a boundary condition applied only in kernels.
//
// The gradients with respect to an input are gathers: each input pixel sums over
// the output positions that read it, (t = ih + pad - kh) with t divisible by the
// stride. Written that way every dx pixel is computed independently, so the
// analysis can split dx; a scatter would make every split a partial sum.
#include "defs.h"

namespace tessera::lang::defs {

using namespace Halide;

namespace {

struct Window {
    Expr sh, sw, ph, pw;
};

Window window(Ctx &c) {
    return {c.param_int("stride_h"), c.param_int("stride_w"), c.param_int("pad_h"), c.param_int("pad_w")};
}

Expr out_extent(Expr in, Expr k, Expr pad, Expr stride) { return (in + 2 * pad - k) / stride + 1; }

// ---- Schedules ----------------------------------------------------------------

// conv2d forward (and the stride-1 form of its input gradient, which is the same
// loop nest): each task is a band of RB output rows of one image. Inside it, a
// register tile of VW output columns (vectorised) by CB output channels is
// accumulated over the whole reduction before it is stored: per reduction step
// VW/L vector loads of x and CB broadcasts of w feed VW/L*CB fused multiply-adds.
// The padded band of x is copied once per task, so the inner loop reads dense
// vectors with no boundary test; w is repacked with the channel block innermost
// so that the broadcasts of one step are adjacent. The stride is specialised to 1
// and 2, where the vector loads of x are dense or a two-way deinterleave.
void schedule_conv(Func y, Func acc, RDom r, Func xin, Func win, Expr sw, const Target &t) {
    const int L = t.natural_vector_size<float>();
    const int VW = 2 * L, CB = 8, RB = 8;
    Var ow = y.args()[0], oh = y.args()[1], co = y.args()[2], n = y.args()[3];
    Var owo("owo"), owi("owi"), coo("coo"), coi("coi"), oho("oho"), ohi("ohi"), task("task");
    y.split(ow, owo, owi, VW, TailStrategy::GuardWithIf)
        .split(co, coo, coi, CB, TailStrategy::GuardWithIf)
        .split(oh, oho, ohi, RB, TailStrategy::GuardWithIf)
        .reorder(owi, coi, owo, ohi, coo, oho, n)
        .fuse(oho, n, task)
        .parallel(task)
        .vectorize(owi, L, TailStrategy::GuardWithIf);

    // A fixed-size accumulator (bound_extent) lives in registers; tiles at the
    // right and channel edges over-compute into it from the padded inputs.
    Var aw = acc.args()[0], ac = acc.args()[2];
    acc.compute_at(y, owo).bound_extent(aw, VW).bound_extent(ac, CB).vectorize(aw, L).unroll(aw).unroll(ac);
    acc.update().reorder(aw, ac, r[0], r[1], r[2]).vectorize(aw, L).unroll(aw).unroll(ac);

    Func wp = win.in(acc);
    std::vector<Var> wv = wp.args();  // kw, kh, ci, co
    wp.compute_root().reorder_storage(wv[3], wv[0], wv[1], wv[2]).parallel(wv[3]);
    xin.compute_at(y, task).vectorize(xin.args()[0], L, TailStrategy::GuardWithIf);

    y.specialize(sw == 1);
    y.specialize(sw == 2);
}

// ---- conv2d and its gradients ---------------------------------------------------

OpDef conv2d(Ctx &c) {
    Func x = c.input(0, Float(32), 4, Boundary::Zero), w = c.input(1, Float(32), 4, Boundary::Clamp);
    Expr N = c.extent(0, 0), Ci = c.extent(0, 1), H = c.extent(0, 2), W = c.extent(0, 3);
    Expr Co = c.extent(1, 0), KH = c.extent(1, 2), KW = c.extent(1, 3);
    Window g = window(c);
    Var n("n"), co("co"), oh("oh"), ow("ow");
    RDom r = reduction({{"kw", KW}, {"kh", KH}, {"ci", Ci}});
    Func acc("acc"), y("y");
    acc(ow, oh, co, n) = 0.0f;
    acc(ow, oh, co, n) += x(ow * g.sw + r[0] - g.pw, oh * g.sh + r[1] - g.ph, r[2], n) * w(r[0], r[1], r[2], co);
    y(ow, oh, co, n) = acc(ow, oh, co, n);
    if (c.scheduling()) schedule_conv(y, acc, r, x, w, g.sw, c.target());
    OpDef d;
    d.outputs = {y};
    d.output_extents = {{N, Co, out_extent(H, KH, g.ph, g.sh), out_extent(W, KW, g.pw, g.sw)}};
    return d;
}

}  // namespace

void register_conv(std::vector<Description> &out) {
    std::vector<StructMap> one = {{}};
    std::vector<KernelVariant> plain = {{"", {}}};
    out.push_back({OpKind::Conv2d, conv2d, one, plain});
}

}  // namespace tessera::lang::defs
