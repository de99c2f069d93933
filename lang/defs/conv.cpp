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

// The strides enter every index as oh * stride. Halide's bounds inference cannot
// tell the sign of a free Param and would answer with a select on it, which the
// analysis cannot read as affine; max(stride, 0) equals the stride (validated to be
// at least 1) and lets Halide prove the sign.
Window window(Ctx &c) {
    return {max(c.param_int("stride_h"), 0), max(c.param_int("stride_w"), 0), c.param_int("pad_h"),
            c.param_int("pad_w")};
}

Expr out_extent(Expr in, Expr k, Expr pad, Expr stride) { return (in + 2 * pad - k) / stride + 1; }

// ---- Schedules ----------------------------------------------------------------

// conv2d and its input gradient, which at stride 1 is the same loop nest (a
// convolution of dy with the flipped kernel): each task is a band of RB output
// rows of one image. Inside it, a register tile of VW output columns
// (vectorised) by CB output channels is accumulated over the whole reduction
// before it is stored: per reduction step, VW/L vector loads of the image and CB
// broadcasts of the weight feed VW/L * CB fused multiply-adds. The padded band of
// the image is copied once per task, so the inner loop reads dense vectors with
// no boundary test; the weight is repacked with the blocked channel innermost
// (`w_channel` is that dimension of w, Halide order) so that the broadcasts of one
// step are adjacent. Strides (1, 1) and (2, 2) are specialised: the vector loads
// become dense or a two-way deinterleave, and the gradient's divisions shifts.
void schedule_conv(Ctx &c, Func y, Func acc, RDom r, Func img, Func win, int w_channel) {
    const int L = c.target().natural_vector_size<float>();
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
    std::vector<Var> wv = wp.args(), order = {wv[w_channel]};
    for (int k = 0; k < 4; k++)
        if (k != w_channel) order.push_back(wv[k]);
    wp.compute_root().reorder_storage(order).parallel(wv[3]);
    img.compute_at(y, task).vectorize(img.args()[0], L, TailStrategy::GuardWithIf);

    Expr sh = c.param_int("stride_h"), sw = c.param_int("stride_w");
    y.specialize(sh == 1 && sw == 1);
    y.specialize(sh == 2 && sw == 2);
}

// conv2d_grad_weight is a GEMM whose reduction (n, oh, ow) is long and whose
// output (Co x Ci x KH x KW) is small. A register tile of VC output channels
// (vectorised) by CI input channels at one kernel tap runs the whole reduction:
// per step, VC/L vector loads of dy and CI broadcasts of x feed VC/L * CI fused
// multiply-adds. For the channel vectors to be dense, dy is copied once with its
// channels innermost; x is copied once with its padding. Both copies are zero
// beyond the channel extents, so edge tiles over-compute without a boundary test.
// No split of the reduction is needed, so the stride stays a plain scalar.
void schedule_conv_grad_weight(Func dw, Func acc, RDom r, Func xin, Func dyin, const Target &t) {
    const int L = t.natural_vector_size<float>();
    const int VC = 2 * L, CI = 8;
    Var kw = dw.args()[0], kh = dw.args()[1], ci = dw.args()[2], co = dw.args()[3];
    Var cio("cio"), cii("cii"), coo("coo"), coi("coi"), task("task");
    dw.split(co, coo, coi, VC, TailStrategy::GuardWithIf)
        .split(ci, cio, cii, CI, TailStrategy::GuardWithIf)
        .reorder(coi, cii, kw, kh, cio, coo)
        .fuse(cio, coo, task)
        .parallel(task);
    acc.compute_at(dw, kw)
        .bound_extent(co, VC)
        .bound_extent(ci, CI)
        .reorder_storage(co, ci, kw, kh)
        .vectorize(co, L)
        .unroll(co)
        .unroll(ci);
    acc.update().reorder(co, ci, r[0], r[1], r[2]).vectorize(co, L).unroll(co).unroll(ci);

    std::vector<Var> d = dyin.args();  // w, h, c, n
    dyin.compute_root().reorder_storage(d[2], d[0], d[1], d[3]).reorder(d[2], d[0], d[1], d[3]);
    dyin.vectorize(d[2], L, TailStrategy::GuardWithIf).parallel(d[3]);
    xin.compute_root().vectorize(xin.args()[0], L, TailStrategy::GuardWithIf).parallel(xin.args()[3]);
}

// ---- Window operations (pooling) -----------------------------------------------
//
// Vector widths for rows, widest first: the natural width, then halves of it for
// short rows (the 14- and 7-wide planes of small images). `narrow` drops the
// natural width.
std::vector<int> row_widths(const Target &t, bool narrow = false) {
    const int L = t.natural_vector_size<float>();
    if (narrow) return {L / 2, L / 4};
    return {L, L / 2, L / 4};
}

// Rows of `extent` elements in vectors along v (split into vo, vi), without masks:
// a specialisation per width splits with ShiftInwards, so that a row's last vector
// overlaps the one before it and every lane is inside the row (masked strided
// loads would be split into single lanes). Rows narrower than every width run
// scalar. Only for pure definitions (recomputed lanes must give the same values).
void vectorize_rows(Stage f, Var v, Var vo, Var vi, Expr extent, const Target &t, bool narrow = false) {
    for (int width : row_widths(t, narrow))
        f.specialize(extent >= width).split(v, vo, vi, width, TailStrategy::ShiftInwards).vectorize(vi);
    f.split(v, vo, vi, 1);
}

// A stage computed per vector of vectorize_rows: `v` spans exactly one vector of
// the consumer in each specialisation of `extent`, a fixed width, so that the
// stage lives in registers. For an update over the window `taps`, the taps are
// also unrolled where `two_by_two` holds: the shuffles that a strided gather puts
// around each tap then cancel between consecutive taps.
void vectorize_per_row_vector(Stage f, Var v, Expr extent, const Target &t, bool narrow,
                              const RDom *taps = nullptr, Expr two_by_two = Expr()) {
    for (int width : row_widths(t, narrow)) {
        if (taps)
            f.specialize(extent >= width && two_by_two)
                .vectorize(v, width)
                .unroll(RVar((*taps)[0]))
                .unroll(RVar((*taps)[1]));
        f.specialize(extent >= width).vectorize(v, width);
    }
}

// A plane computed once per task of a window operation, `extent` wide.
struct Plane {
    Func f;
    Expr extent;
};

// Window operations y = f(red), where red reduces over the window `taps`: each
// task is one plane (n, c), and y runs along its rows (`width` wide) in vectors
// (vectorize_rows); red is computed per vector of y, in registers. The planes that
// the window reads (padded inputs, argmax) are computed once per task, so the
// inner loop reads dense memory with no boundary test. The planes run in the
// narrower vectors: a padded copy's first and last vector of each row take the
// boundary path (one load per lane), as the compiler cannot tell that they are
// inside the input, and shorter vectors leave more of the row to the dense path.
// Strides are specialised: (1, 1) and (2, 2) for the gathers (`gather`, the
// gradients), where the divisions by both strides, per vector and per kernel row,
// become shifts; then the horizontal stride alone, 1 and 2, where the gathers'
// divisions along the row become shifts and the forward windows' strided loads
// deinterleave.
void schedule_window(Ctx &c, Func y, Expr width, Func red, const RDom &taps, bool gather,
                     const std::vector<Plane> &planes) {
    const Target &t = c.target();
    Var w = y.args()[0], ch = y.args()[2], n = y.args()[3], p("plane"), wo("wo"), wi("wi");
    y.fuse(ch, n, p).parallel(p);
    Expr sh = c.param_int("stride_h"), sw = c.param_int("stride_w");
    if (gather)
        for (int stride : {1, 2}) vectorize_rows(y.specialize(sh == stride && sw == stride), w, wo, wi, width, t);
    for (int stride : {1, 2}) vectorize_rows(y.specialize(sw == stride), w, wo, wi, width, t);
    vectorize_rows(y, w, wo, wi, width, t);

    Expr two_by_two = c.param_int("kernel_h") == 2 && c.param_int("kernel_w") == 2;
    red.compute_at(y, wo);
    vectorize_per_row_vector(red, red.args()[0], width, t, false);
    vectorize_per_row_vector(red.update(), red.args()[0], width, t, false, &taps, two_by_two);
    for (Plane q : planes) {
        q.f.compute_at(y, p);
        vectorize_rows(q.f, q.f.args()[0], Var("po"), Var("pi"), q.extent, t, true);
    }
}

// max_pool2d_grad: the argmax of the plane's windows is one of the planes, built a
// vector of windows at a time through a wrapper (a fixed width per vector, so that
// the running maximum stays in registers and no load is masked).
void schedule_max_pool_grad(Ctx &c, Func dx, Expr W, Func sum, const RDom &taps, Func argmax, const RDom &window,
                            Func dy, Func x, Expr OW) {
    const Target &t = c.target();
    Func am = argmax.in();
    schedule_window(c, dx, W, sum, taps, true, {{x, W}, {dy, OW}, {am, OW}});
    Expr two_by_two = c.param_int("kernel_h") == 2 && c.param_int("kernel_w") == 2;
    argmax.compute_at(am, Var("po"));
    vectorize_per_row_vector(argmax, argmax.args()[0], OW, t, true);
    vectorize_per_row_vector(argmax.update(), argmax.args()[0], OW, t, true, &window, two_by_two);
}

// ---- conv2d and its gradients ---------------------------------------------------

// Gathers: the output position whose kernel tap (kh, kw) reads input pixel
// (ih, iw), and whether that position exists (the offsets divide by the stride).
// Positions outside dy need no test: dy reads there give 0.
struct Gather {
    Expr ow, oh, hit;
};

Gather gather_at(const Window &g, Expr iw, Expr ih, Expr kw, Expr kh) {
    Expr th = ih + g.ph - kh, tw = iw + g.pw - kw;
    return {tw / g.sw, th / g.sh, th % g.sh == 0 && tw % g.sw == 0};
}

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
    if (c.scheduling()) schedule_conv(c, y, acc, r, x, w, 3);
    OpDef d;
    d.outputs = {y};
    d.output_extents = {{N, Co, out_extent(H, KH, g.ph, g.sh), out_extent(W, KW, g.pw, g.sw)}};
    return d;
}

// dx[n, ci, ih, iw] = sum over (co, kh, kw) of dy[n, co, oh, ow] * w[co, ci, kh, kw]
// where ih = oh*stride_h + kh - pad_h, i.e. oh = (ih + pad_h - kh) / stride_h when
// that divides exactly (and likewise along w). Output positions outside dy read 0.
OpDef conv2d_grad_input(Ctx &c) {
    Func dy = c.input(0, Float(32), 4, Boundary::Zero), w = c.input(1, Float(32), 4, Boundary::Clamp);
    Expr N = c.extent(0, 0), Co = c.extent(0, 1);
    Expr Ci = c.extent(1, 1), KH = c.extent(1, 2), KW = c.extent(1, 3);
    Window g = window(c);
    Expr IH = c.param_int("in_h"), IW = c.param_int("in_w");
    Var n("n"), ci("ci"), ih("ih"), iw("iw"), co("co"), kh("kh"), kw("kw");
    // dy gathered per kernel tap (inlined in the kernel).
    Gather at = gather_at(g, iw, ih, kw, kh);
    Func tap("tap");
    tap(iw, ih, kw, kh, co, n) = select(at.hit, dy(at.ow, at.oh, co, n), 0.0f);
    RDom r = reduction({{"kw", KW}, {"kh", KH}, {"co", Co}});
    // Kernel rows that no output row reaches contribute nothing; skipping them
    // halves the work at stride 2 (columns are vector lanes and stay a select).
    r.where((ih + g.ph - r[1]) % g.sh == 0);
    Func acc("acc"), dx("dx");
    acc(iw, ih, ci, n) = 0.0f;
    acc(iw, ih, ci, n) += tap(iw, ih, r[0], r[1], r[2], n) * w(r[0], r[1], ci, r[2]);
    dx(iw, ih, ci, n) = acc(iw, ih, ci, n);
    if (c.scheduling()) schedule_conv(c, dx, acc, r, dy, w, 2);
    OpDef d;
    d.outputs = {dx};
    d.output_extents = {{N, Ci, IH, IW}};
    return d;
}

// dw[co, ci, kh, kw] = sum over (n, oh, ow) of dy[n, co, oh, ow] * x[n, ci, ih, iw]
// at ih = oh*stride_h + kh - pad_h, iw = ow*stride_w + kw - pad_w.
OpDef conv2d_grad_weight(Ctx &c) {
    Func dy = c.input(0, Float(32), 4, Boundary::Zero), x = c.input(1, Float(32), 4, Boundary::Zero);
    Expr N = c.extent(0, 0), Co = c.extent(0, 1), OH = c.extent(0, 2), OW = c.extent(0, 3);
    Expr Ci = c.extent(1, 1);
    Window g = window(c);
    Expr KH = c.param_int("kernel_h"), KW = c.param_int("kernel_w");
    Var co("co"), ci("ci"), kh("kh"), kw("kw");
    RDom r = reduction({{"ow", OW}, {"oh", OH}, {"n", N}});
    Func acc("acc"), dw("dw");
    acc(kw, kh, ci, co) = 0.0f;
    acc(kw, kh, ci, co) +=
        dy(r[0], r[1], co, r[2]) * x(r[0] * g.sw + kw - g.pw, r[1] * g.sh + kh - g.ph, ci, r[2]);
    dw(kw, kh, ci, co) = acc(kw, kh, ci, co);
    if (c.scheduling()) schedule_conv_grad_weight(dw, acc, r, x, dy, c.target());
    OpDef d;
    d.outputs = {dw};
    d.output_extents = {{Co, Ci, KH, KW}};
    return d;
}

// ---- Pooling -----------------------------------------------------------------------

struct Pool {
    Expr KH, KW;
    Window g;
};

Pool pool_attrs(Ctx &c) { return {c.param_int("kernel_h"), c.param_int("kernel_w"), window(c)}; }

OpDef max_pool2d(Ctx &c) {
    Func x = c.input(0, Float(32), 4, Boundary::Lowest);
    Expr N = c.extent(0, 0), C = c.extent(0, 1), H = c.extent(0, 2), W = c.extent(0, 3);
    Pool p = pool_attrs(c);
    Var n("n"), ch("c"), oh("oh"), ow("ow");
    RDom r = reduction({{"kw", p.KW}, {"kh", p.KH}});
    Func mx("mx"), y("y");
    mx(ow, oh, ch, n) = Float(32).min();
    mx(ow, oh, ch, n) = max(mx(ow, oh, ch, n), x(ow * p.g.sw + r[0] - p.g.pw, oh * p.g.sh + r[1] - p.g.ph, ch, n));
    y(ow, oh, ch, n) = mx(ow, oh, ch, n);
    Expr OW = out_extent(W, p.KW, p.g.pw, p.g.sw);
    if (c.scheduling()) schedule_window(c, y, OW, mx, r, false, {{x, W}});
    OpDef d;
    d.outputs = {y};
    d.output_extents = {{N, C, out_extent(H, p.KH, p.g.ph, p.g.sh), OW}};
    return d;
}

// max_pool2d_grad(dy, x): each window's gradient goes to its argmax, the first
// maximum in the window's row-major scan (kh outer, kw inner), so ties send the
// whole gradient to one pixel. dx gathers, for each pixel, dy over the windows
// whose argmax it is.
OpDef max_pool2d_grad(Ctx &c) {
    Func dy = c.input(0, Float(32), 4, Boundary::Zero), x = c.input(1, Float(32), 4, Boundary::Lowest);
    Expr N = c.extent(1, 0), C = c.extent(1, 1), H = c.extent(1, 2), W = c.extent(1, 3);
    Pool p = pool_attrs(c);
    Var n("n"), ch("c"), oh("oh"), ow("ow"), ih("ih"), iw("iw");
    RDom rw = reduction({{"kw", p.KW}, {"kh", p.KH}});
    // argmax(ow, oh) = {max so far, its tap kh*KW + kw}; strict > keeps the first.
    Func argmax("argmax");
    argmax(ow, oh, ch, n) = {Float(32).min(), 0};
    Expr v = x(ow * p.g.sw + rw[0] - p.g.pw, oh * p.g.sh + rw[1] - p.g.ph, ch, n);
    Expr better = v > argmax(ow, oh, ch, n)[0];
    argmax(ow, oh, ch, n) = {select(better, v, argmax(ow, oh, ch, n)[0]),
                             select(better, rw[1] * p.KW + rw[0], argmax(ow, oh, ch, n)[1])};
    Var kh("kh"), kw("kw");
    Gather at = gather_at(p.g, iw, ih, kw, kh);
    Func tap("tap");  // the gradient gathered per window tap
    tap(iw, ih, kw, kh, ch, n) =
        select(at.hit && argmax(at.ow, at.oh, ch, n)[1] == kh * p.KW + kw, dy(at.ow, at.oh, ch, n), 0.0f);
    RDom r = reduction({{"kw", p.KW}, {"kh", p.KH}});
    Func sum("sum"), dx("dx");
    sum(iw, ih, ch, n) = 0.0f;
    sum(iw, ih, ch, n) += tap(iw, ih, r[0], r[1], ch, n);
    dx(iw, ih, ch, n) = sum(iw, ih, ch, n);
    if (c.scheduling()) schedule_max_pool_grad(c, dx, W, sum, r, argmax, rw, dy, x, c.extent(0, 3));
    OpDef d;
    d.outputs = {dx};
    d.output_extents = {{N, C, H, W}};
    return d;
}

// avg_pool2d: the window sum over KH*KW, padding included in the count.
OpDef avg_pool2d(Ctx &c) {
    Func x = c.input(0, Float(32), 4, Boundary::Zero);
    Expr N = c.extent(0, 0), C = c.extent(0, 1), H = c.extent(0, 2), W = c.extent(0, 3);
    Pool p = pool_attrs(c);
    Var n("n"), ch("c"), oh("oh"), ow("ow");
    RDom r = reduction({{"kw", p.KW}, {"kh", p.KH}});
    Func sum("sum"), y("y");
    sum(ow, oh, ch, n) = 0.0f;
    sum(ow, oh, ch, n) += x(ow * p.g.sw + r[0] - p.g.pw, oh * p.g.sh + r[1] - p.g.ph, ch, n);
    y(ow, oh, ch, n) = sum(ow, oh, ch, n) / cast<float>(p.KH * p.KW);
    Expr OW = out_extent(W, p.KW, p.g.pw, p.g.sw);
    if (c.scheduling()) schedule_window(c, y, OW, sum, r, false, {{x, W}});
    OpDef d;
    d.outputs = {y};
    d.output_extents = {{N, C, out_extent(H, p.KH, p.g.ph, p.g.sh), OW}};
    return d;
}

OpDef avg_pool2d_grad(Ctx &c) {
    Func dy = c.input(0, Float(32), 4, Boundary::Zero);
    Expr N = c.extent(0, 0), C = c.extent(0, 1);
    Pool p = pool_attrs(c);
    Expr IH = c.param_int("in_h"), IW = c.param_int("in_w");
    Var n("n"), ch("c"), ih("ih"), iw("iw"), kh("kh"), kw("kw");
    Gather at = gather_at(p.g, iw, ih, kw, kh);
    Func tap("tap");  // the gradient gathered per window tap
    tap(iw, ih, kw, kh, ch, n) = select(at.hit, dy(at.ow, at.oh, ch, n), 0.0f);
    RDom r = reduction({{"kw", p.KW}, {"kh", p.KH}});
    Func sum("sum"), dx("dx");
    sum(iw, ih, ch, n) = 0.0f;
    sum(iw, ih, ch, n) += tap(iw, ih, r[0], r[1], ch, n);
    dx(iw, ih, ch, n) = sum(iw, ih, ch, n) / cast<float>(p.KH * p.KW);
    if (c.scheduling()) schedule_window(c, dx, IW, sum, r, true, {{dy, c.extent(0, 3)}});
    OpDef d;
    d.outputs = {dx};
    d.output_extents = {{N, C, IH, IW}};
    return d;
}

// global_avg_pool: y[n, c] = mean of x[n, c, :, :].
OpDef global_avg_pool(Ctx &c) {
    Func x = c.input(0, Float(32), 4);
    Expr N = c.extent(0, 0), C = c.extent(0, 1), H = c.extent(0, 2), W = c.extent(0, 3);
    Var n("n"), ch("c");
    RDom r = reduction({{"w", W}, {"h", H}});
    Func sum("sum"), y("y");
    sum(ch, n) = 0.0f;
    sum(ch, n) += x(r[0], r[1], ch, n);
    Func summed = c.stage(sum);
    y(ch, n) = summed(ch, n) / cast<float>(c.whole_extent(0, 2) * c.whole_extent(0, 3));
    if (c.scheduling()) {
        // Sum each plane along its contiguous rows in L lanes, then across lanes.
        const int L = c.target().natural_vector_size<float>();
        RVar rwo("rwo"), rwi("rwi");
        Var u("u");
        Func lanes = sum.update().split(r[0], rwo, rwi, L, TailStrategy::GuardWithIf).rfactor(rwi, u);
        Var p("plane");
        y.fuse(ch, n, p).parallel(p);
        sum.compute_at(y, p);
        lanes.compute_at(y, p).vectorize(u);
        lanes.update().vectorize(u);
    }
    OpDef d;
    d.outputs = {y};
    d.output_extents = {{N, C}};
    return d;
}

// global_avg_pool_grad(dy [N, C]) -> dx [N, C, in_h, in_w] = dy / (in_h * in_w).
OpDef global_avg_pool_grad(Ctx &c) {
    Func dy = c.input(0, Float(32), 2);
    Expr N = c.extent(0, 0), C = c.extent(0, 1);
    Expr IH = c.param_int("in_h"), IW = c.param_int("in_w");
    Var n("n"), ch("c"), h("h"), w("w");
    Func dx("dx");
    dx(w, h, ch, n) = dy(ch, n) / cast<float>(IH * IW);
    if (c.scheduling()) {
        Var p("plane");
        const int L = c.target().natural_vector_size<float>();
        dx.fuse(ch, n, p).vectorize(w, L, TailStrategy::GuardWithIf).parallel(p);
    }
    OpDef d;
    d.outputs = {dx};
    d.output_extents = {{N, C, IH, IW}};
    return d;
}

}  // namespace

void register_conv(std::vector<Description> &out) {
    // No structural attributes: every window attribute is a scalar Param.
    std::vector<StructMap> one = {{}};
    std::vector<KernelVariant> plain = {{"", {}}};
    out.push_back({OpKind::Conv2d, conv2d, one, plain});
    out.push_back({OpKind::Conv2dGradInput, conv2d_grad_input, one, plain});
    out.push_back({OpKind::Conv2dGradWeight, conv2d_grad_weight, one, plain});
    out.push_back({OpKind::MaxPool2d, max_pool2d, one, plain});
    out.push_back({OpKind::MaxPool2dGrad, max_pool2d_grad, one, plain});
    out.push_back({OpKind::AvgPool2d, avg_pool2d, one, plain});
    out.push_back({OpKind::AvgPool2dGrad, avg_pool2d_grad, one, plain});
    out.push_back({OpKind::GlobalAvgPool, global_avg_pool, one, plain});
    out.push_back({OpKind::GlobalAvgPoolGrad, global_avg_pool_grad, one, plain});
}

}  // namespace tessera::lang::defs
