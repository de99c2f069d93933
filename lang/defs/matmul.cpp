// Matrix products.
//   matmul:        y[M, N] = x[M, K] . w[K, N]    (transpose_a: x is [K, M]; transpose_b: w is [N, K])
//   batch_matmul:  y[B, M, N] = x[B, M, K] . w[B, K, N], with the same transposes per batch.
// The index variables are m, n, k (and b). Tofu's three matmul strategies are the
// splits of m, n and the reduction k.
#include "defs.h"

namespace tessera::lang::defs {

using namespace Halide;

namespace {

// The CPU schedule: register-blocked tiles of the output, vectorised along n,
// with the reduction innermost over a small unrolled block (after Halide's
// matrix-multiplication performance test, re-derived for the target's vector width).
void schedule_gemm(Func out, Func prod, Func X, Func W, const Target &t, bool batched) {
    const int L = t.natural_vector_size<float>();
    Var n = out.args()[0], m = out.args()[1];
    Var ni("ni"), mi("mi"), mii("mii"), tile("tile");
    // Large outputs shift their edge tiles inwards (recomputing a few results)
    // so that every tile is full and the inner loops carry no guards; small
    // outputs guard instead. Both branches keep the same loop names, so the
    // accumulator can be computed at `mi` in either.
    Expr N = out.output_buffer().dim(0).extent(), M = out.output_buffer().dim(1).extent();
    auto tiles = [&](Stage s, TailStrategy tail) {
        s.tile(n, m, ni, mi, 2 * L, 24, tail).split(mi, mi, mii, 6, tail).vectorize(ni, L, tail).unroll(mii);
        if (batched) s.fuse(m, out.args()[2], tile).fuse(n, tile, tile).parallel(tile);
        else s.fuse(n, m, tile).parallel(tile);
    };
    tiles(out.specialize(N >= 2 * L && M >= 24), TailStrategy::ShiftInwards);
    tiles(out, TailStrategy::GuardWithIf);
    prod.compute_at(out, mi).vectorize(prod.args()[0], L).unroll(prod.args()[1]);
    RVar k(prod.update().get_schedule().rvars()[0].var);
    prod.update()
        .reorder(prod.args()[0], prod.args()[1], k)
        .vectorize(prod.args()[0], L)
        .unroll(prod.args()[0])
        .unroll(prod.args()[1]);
    // Pack w (transposing it when needed) over the tile-rounded region the tiles
    // read, so that the inner loop makes contiguous vector loads without bounds checks.
    W.compute_root().vectorize(W.args()[0], L).parallel(W.args()[1]);
    // Copy the tile's rows of x once per tile: the clamp of the boundary condition
    // then stays out of the inner loop.
    X.compute_at(out, tile).vectorize(X.args()[0], L, TailStrategy::GuardWithIf);
}

OpDef define_matmul(Ctx &c, bool batched) {
    bool ta = c.structural("transpose_a"), tb = c.structural("transpose_b");
    int rank = batched ? 3 : 2;
    Func x = c.input(0, Float(32), rank, Boundary::Clamp), w = c.input(1, Float(32), rank, Boundary::Clamp);
    // Tessera dims (row-major): x [.., M, K] or [.., K, M]; w [.., K, N] or [.., N, K].
    Expr M = c.extent(0, ta ? rank - 1 : rank - 2), K = c.extent(0, ta ? rank - 2 : rank - 1);
    Expr N = c.extent(1, tb ? rank - 2 : rank - 1);
    Expr B = batched ? c.extent(0, 0) : Expr(1);
    Var n("n"), m("m"), b("b");
    RDom k(0, K, "k");
    std::vector<Expr> bx;  // trailing batch index for batched calls
    if (batched) bx.push_back(b);
    auto at = [&](Func f, Expr inner, Expr outer) {
        std::vector<Expr> a = {inner, outer};
        a.insert(a.end(), bx.begin(), bx.end());
        return f(a);
    };
    // X(k, m) and W(n, k) in Halide order, whatever the storage order.
    Func X("X"), W("W");
    std::vector<Expr> xa = {Var("kk"), m}, wa = {n, Var("kk")};
    std::vector<Var> xv = {Var("kk"), m}, wv = {n, Var("kk")};
    if (batched) {
        xv.push_back(b);
        wv.push_back(b);
    }
    X(xv) = ta ? at(x, m, xv[0]) : at(x, xv[0], m);
    W(wv) = tb ? at(w, wv[1], n) : at(w, n, wv[1]);

    std::vector<Var> ov = {n, m};
    if (batched) ov.push_back(b);
    Func prod("prod"), y("y");
    prod(ov) = 0.0f;
    prod(ov) += at(X, k, m) * at(W, n, k);
    y(ov) = prod(ov);
    if (c.scheduling()) schedule_gemm(y, prod, X, W, c.target(), batched);

    OpDef d;
    d.outputs = {y};
    if (batched) d.output_extents = {{B, M, N}};
    else d.output_extents = {{M, N}};
    return d;
}

OpDef matmul(Ctx &c) { return define_matmul(c, false); }
OpDef batch_matmul(Ctx &c) { return define_matmul(c, true); }

std::vector<KernelVariant> transposes() {
    std::vector<KernelVariant> v;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            v.push_back({std::string(ta ? "t" : "n") + (tb ? "t" : "n"), {{"transpose_a", ta}, {"transpose_b", tb}}});
    return v;
}

std::vector<StructMap> structurals(const std::vector<KernelVariant> &kv) {
    std::vector<StructMap> s;
    for (const auto &k : kv) s.push_back(k.structural);
    return s;
}

}  // namespace

void register_matmul(std::vector<Description> &out) {
    auto kv = transposes();
    out.push_back({OpKind::Matmul, matmul, structurals(kv), kv});
    out.push_back({OpKind::BatchMatmul, batch_matmul, structurals(kv), kv});
}

}  // namespace tessera::lang::defs
