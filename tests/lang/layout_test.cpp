// Layout operators against plain index loops; their backward operators (slice_grad,
// broadcast/reduce_sum, slices of a concat, the inverse permutation, the reverse
// reshape) against central finite differences of the test's own loops.
#include <algorithm>
#include <climits>
#include <map>
#include <numeric>

#include "tessera/lang/strategy.h"
#include "test_util.h"

namespace tessera::test {
namespace {

using Ints = std::vector<int64_t>;

std::vector<int64_t> unravel(int64_t k, const Shape &s) {
    std::vector<int64_t> idx(s.size());
    for (int d = int(s.size()) - 1; d >= 0; d--) {
        idx[d] = k % s[d];
        k /= s[d];
    }
    return idx;
}

int64_t ravel(const std::vector<int64_t> &idx, const Shape &s) {
    int64_t k = 0;
    for (size_t d = 0; d < s.size(); d++) k = k * s[d] + idx[d];
    return k;
}

Shape permuted(const Shape &s, const Ints &perm) {
    Shape o;
    for (int64_t d : perm) o.push_back(s[d]);
    return o;
}

std::vector<double> ref_permute(const std::vector<double> &x, const Shape &s, const Ints &perm) {
    Shape os = permuted(s, perm);
    std::vector<double> y(x.size());
    for (int64_t k = 0; k < int64_t(y.size()); k++) {
        auto o = unravel(k, os);
        std::vector<int64_t> i(s.size());
        for (size_t d = 0; d < perm.size(); d++) i[perm[d]] = o[d];
        y[k] = x[ravel(i, s)];
    }
    return y;
}

// Slice along axis of x (shape s): [start, end).
std::vector<double> ref_slice(const std::vector<double> &x, const Shape &s, int axis, int64_t start, int64_t end) {
    Shape os = s;
    os[axis] = end - start;
    std::vector<double> y(num_elements(os));
    for (int64_t k = 0; k < int64_t(y.size()); k++) {
        auto i = unravel(k, os);
        i[axis] += start;
        y[k] = x[ravel(i, s)];
    }
    return y;
}

std::vector<double> ref_concat(const std::vector<std::vector<double>> &xs, const std::vector<Shape> &shapes, int axis) {
    Shape os = shapes[0];
    os[axis] = 0;
    for (const Shape &s : shapes) os[axis] += s[axis];
    std::vector<double> y(num_elements(os));
    for (int64_t k = 0; k < int64_t(y.size()); k++) {
        auto i = unravel(k, os);
        size_t which = 0;
        while (i[axis] >= shapes[which][axis]) i[axis] -= shapes[which++][axis];
        y[k] = xs[which][ravel(i, shapes[which])];
    }
    return y;
}

std::vector<double> ref_reduce_sum(const std::vector<double> &x, const Shape &s, int axis) {
    Shape os = s;
    os[axis] = 1;
    std::vector<double> y(num_elements(os), 0.0);
    for (int64_t k = 0; k < int64_t(x.size()); k++) {
        auto i = unravel(k, s);
        i[axis] = 0;
        y[ravel(i, os)] += x[k];
    }
    return y;
}

std::vector<double> ref_broadcast(const std::vector<double> &x, const Shape &s, int axis, int64_t extent) {
    Shape os = s;
    os.insert(os.begin() + axis, extent);
    std::vector<double> y(num_elements(os));
    for (int64_t k = 0; k < int64_t(y.size()); k++) {
        auto i = unravel(k, os);
        i.erase(i.begin() + axis);
        y[k] = x[ravel(i, s)];
    }
    return y;
}

std::vector<TensorType> types_of(const std::vector<HostTensor> &in) {
    std::vector<TensorType> t;
    for (const auto &h : in) t.push_back(h.type);
    return t;
}

// The runtime's variant key must name an analysed variant (ranks up to 4).
void expect_analysed(const OpCall &c, const std::vector<HostTensor> &in) {
    const OpStrategies *s = strategies_for(c, types_of(in));
    ASSERT_NE(s, nullptr) << c.who() << " on " << type_str(in[0].type);
    // A reshape always has strategies (built from its shapes); the analysis's
    // table must still have its variant, whose key leads the name.
    if (c.kind == OpKind::Reshape) EXPECT_EQ(s->variant.rfind("reshape[", 0), 0u) << s->variant;
}

std::vector<Ints> all_perms(int rank) {
    Ints p(rank);
    std::iota(p.begin(), p.end(), 0);
    std::vector<Ints> out;
    do out.push_back(p);
    while (std::next_permutation(p.begin(), p.end()));
    return out;
}

OpCall permute_call(const Ints &perm) { return {OpKind::Permute, "perm", {{"perm", perm}}}; }

TEST(Permute, EveryPermutationOfRank1To4) {
    const std::vector<Shape> shapes = {{7}, {1}, {3, 5}, {1, 9}, {2, 3, 5}, {4, 1, 3}, {2, 3, 5, 7}, {3, 1, 2, 1}, {17, 19, 1, 5}};
    for (const Shape &s : shapes)
        for (const Ints &perm : all_perms(int(s.size()))) {
            std::vector<HostTensor> in = {random_tensor(s, 1)};
            auto out = run(permute_call(perm), in);
            ASSERT_EQ(out[0].type.shape, permuted(s, perm));
            expect_near(out[0].f, ref_permute(to_double(in[0].f), s, perm), 0, 0, "permute");
            expect_analysed(permute_call(perm), in);
        }
}

TEST(Permute, LargeTransposeTiles) {
    // Extents that are not multiples of the tile, in both transposed dimensions.
    for (Shape s : {Shape{67, 131}, Shape{3, 45, 70}, Shape{5, 33, 2, 31}}) {
        Ints perm(s.size());
        std::iota(perm.begin(), perm.end(), 0);
        std::reverse(perm.begin(), perm.end());
        std::vector<HostTensor> in = {random_tensor(s, 2)};
        auto out = run(permute_call(perm), in);
        expect_near(out[0].f, ref_permute(to_double(in[0].f), s, perm), 0, 0, "transpose");
    }
}

TEST(Permute, HigherRankThatMergesIntoFourBlocks) {
    Shape s = {2, 3, 4, 5, 6};
    Ints perm = {3, 4, 0, 2, 1};  // blocks (3,4), 0, 2, 1
    std::vector<HostTensor> in = {random_tensor(s, 3)};
    auto out = run(permute_call(perm), in);
    expect_near(out[0].f, ref_permute(to_double(in[0].f), s, perm), 0, 0, "rank-5 permute");
}

// Backward of y = permute(x, p) is dx = permute(dy, p^-1).
TEST(Permute, BackwardIsTheInversePermutation) {
    Shape s = {2, 3, 1, 4};
    for (const Ints &perm : all_perms(4)) {
        Ints inv(perm.size());
        for (size_t i = 0; i < perm.size(); i++) inv[perm[i]] = int64_t(i);
        HostTensor x = random_tensor(s, 4), dy = random_tensor(permuted(s, perm), 5);
        std::vector<HostTensor> in = {dy};
        auto dx = run(permute_call(inv), in);
        std::vector<double> dyd = to_double(dy.f);
        auto loss = [&](const std::vector<double> &xs) { return dot(dyd, ref_permute(xs, s, perm)); };
        expect_near(dx[0].f, finite_diff(loss, to_double(x.f)), 1e-6, 1e-6, "permute backward");
    }
}

OpCall reshape_call(const Ints &shape) { return {OpKind::Reshape, "view", {{"shape", shape}}}; }

TEST(Reshape, CopiesAndInfersMinusOne) {
    struct Case {
        Shape in;
        Ints shape;
        Shape out;
    };
    for (const Case &k : std::vector<Case>{{{2, 3, 5}, {6, 5}, {6, 5}},
                                           {{2, 3, 5}, {2, -1}, {2, 15}},
                                           {{7}, {1, 7, 1}, {1, 7, 1}},
                                           {{4, 6, 8}, {4, 6, 2, 4}, {4, 6, 2, 4}},
                                           {{4, 6, 2, 4}, {4, -1, 8}, {4, 6, 8}},
                                           {{1}, {1}, {1}},
                                           {{3, 1, 5}, {15}, {15}}}) {
        std::vector<HostTensor> in = {random_tensor(k.in, 6)};
        auto out = run(reshape_call(k.shape), in);
        ASSERT_EQ(out[0].type.shape, k.out);
        expect_near(out[0].f, to_double(in[0].f), 0, 0, "reshape");
        expect_analysed(reshape_call(k.shape), in);
    }
}

// Backward of a reshape is the reshape back; checked against finite differences.
TEST(Reshape, BackwardIsTheReverseReshape) {
    Shape s = {3, 4, 5};
    HostTensor x = random_tensor(s, 7), dy = random_tensor({12, 5}, 8);
    std::vector<HostTensor> in = {dy};
    auto dx = run(reshape_call({3, 4, 5}), in);
    ASSERT_EQ(dx[0].type.shape, s);
    std::vector<double> dyd = to_double(dy.f);
    auto loss = [&](const std::vector<double> &xs) { return dot(dyd, xs); };  // reshape keeps the order
    expect_near(dx[0].f, finite_diff(loss, to_double(x.f)), 1e-6, 1e-6, "reshape backward");
}

TEST(Reshape, PrefixDimensionsAreSplittable) {
    // [B, T, H, D] -> [B, T, H*D]: B and T split the input along the same dimension.
    std::vector<TensorType> in = {{DType::F32, {4, 6, 2, 8}}};
    const OpStrategies *s = strategies_for(reshape_call({4, 6, 16}), in);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->variant, "reshape[in_rank=4,out_rank=3,prefix=2] [4, 6, 2, 8] -> [4, 6, 16]");
    for (int d = 0; d < 2; d++) {
        const Strategy *st = nullptr;
        for (const Strategy &x : s->strategies)
            if (x.var == "d" + std::to_string(d)) st = &x;
        ASSERT_NE(st, nullptr) << d;
        EXPECT_EQ(st->inputs[0].kind, NeedKind::Split);
        EXPECT_EQ(st->inputs[0].dim, d);
        EXPECT_EQ(st->outputs[0].kind, OutKind::Split);
        EXPECT_EQ(st->outputs[0].dim, d);
    }
}

// Blocks of ceil and floor size, the longer first (graph/box.h's rule).
int64_t block_size(int64_t extent, int k, int p) { return extent / k + (p < extent % k ? 1 : 0); }
int64_t block_lo(int64_t extent, int k, int p) { return p * (extent / k) + std::min<int64_t>(p, extent % k); }

// The input rows a split reads, by the strategy's formula (strategy.h):
// [(scale*lo + lo_off) / div, (scale*(hi-1) + hi_off) / div], rounding down.
std::pair<int64_t, int64_t> formula_rows(const InputNeed &n, const SymEnv &env, int64_t lo, int64_t hi) {
    const int64_t scale = n.scale.eval(env), div = n.divisor.eval(env);
    return {(scale * lo + n.lo_offset.eval(env)) / div, (scale * (hi - 1) + n.hi_offset.eval(env)) / div};
}

// Every split a reshape offers, checked against the elements themselves: for
// each block of the split variable (k = 2, 3, 4 parts), walk the output
// block's elements, find the input element each one is (the same row-major
// position), and require the strategy's rows to be exactly the rows those
// elements lie in. Where the block holds exactly whole input rows, it must
// also be all of them: the input block, read row-major, is the output block.
TEST(Reshape, EverySplitReadsTheRowsHoldingItsElements) {
    const std::vector<std::pair<Shape, Ints>> cases = {
        {{8, 6, 32}, {48, 32}},          // [B, S, D] -> [B*S, D]
        {{48, 32}, {8, 6, 4, 8}},        // [B*S, D] -> [B, S, H, dh]
        {{8, 4, 6, 8}, {32, 6, 8}},      // [B, H, S, dh] -> [B*H, S, dh]
        {{8, 6, 4, 8}, {48, 32}},        // [B, S, H, dh] -> [B*S, D]
        {{6, 4}, {4, 6}},                // a group that neither merges nor splits cleanly
        {{3, 1, 10}, {30}},              // extent-1 dimensions inside a group
        {{12}, {1, 3, 4}},               // and before one
        {{6, 10}, {6, 2, 5}},            // a shared leading dimension (the analysis's)
    };
    int checked = 0;
    for (const auto &[in_shape, target] : cases) {
        const OpCall c = reshape_call(target);
        const std::vector<TensorType> in = {{DType::F32, in_shape}};
        const Shape out_shape = infer_types(c, in)[0].shape;
        const OpStrategies *s = strategies_for(c, in);
        ASSERT_NE(s, nullptr) << shape_str(in_shape);
        const SymEnv env = symbol_env(c, in);
        for (const Strategy &st : s->strategies) {
            ASSERT_EQ(st.outputs[0].kind, OutKind::Split) << s->variant << " " << st.var;
            if (st.inputs[0].kind == NeedKind::Replicated) continue;  // whole input, block kept
            const int od = st.outputs[0].dim, id = st.inputs[0].dim;
            for (int k = 2; k <= 4; k++) {
                if (out_shape[od] < k) continue;
                for (int p = 0; p < k; p++) {
                    const int64_t lo = block_lo(out_shape[od], k, p), hi = lo + block_size(out_shape[od], k, p);
                    int64_t row_lo = INT64_MAX, row_hi = -1, elements = 0;
                    for (int64_t e = 0; e < num_elements(out_shape); e++) {
                        const auto o = unravel(e, out_shape);
                        if (o[od] < lo || o[od] >= hi) continue;
                        const int64_t row = unravel(e, in_shape)[id];
                        row_lo = std::min(row_lo, row);
                        row_hi = std::max(row_hi, row);
                        elements++;
                    }
                    const auto [f_lo, f_hi] = formula_rows(st.inputs[0], env, lo, hi);
                    EXPECT_EQ(f_lo, row_lo) << s->variant << " " << st.var << " k=" << k << " p=" << p;
                    EXPECT_EQ(f_hi, row_hi) << s->variant << " " << st.var << " k=" << k << " p=" << p;
                    // k parts of both extents: the same k slices of the elements.
                    const int64_t row_elements = num_elements(in_shape) / in_shape[id];
                    if (out_shape[od] % k == 0 && in_shape[id] % k == 0)
                        EXPECT_EQ((row_hi - row_lo + 1) * row_elements, elements) << s->variant << " " << st.var;
                    checked++;
                }
            }
        }
    }
    EXPECT_GT(checked, 100);
}

// The splits that carry a batch or a head through the transformer's reshapes.
// A dimension inside a group ([B*S] -> [B, S]: S's blocks are not contiguous
// in B*S) keeps the analysis's strategy: read the input whole (-1 below), keep
// the block.
TEST(Reshape, SplitsCarryTheBatchAndTheHeadsButNoInnerDimension) {
    auto vars = [](const Shape &in, const Ints &target) {
        std::map<std::string, std::pair<int, int64_t>> v;  // var -> (input dim, divisor)
        const std::vector<TensorType> t = {{DType::F32, in}};
        const SymEnv env = symbol_env(reshape_call(target), t);
        for (const Strategy &s : strategies_for(reshape_call(target), t)->strategies)
            v[s.var] = {s.inputs[0].kind == NeedKind::Split ? s.inputs[0].dim : -1, s.inputs[0].divisor.eval(env)};
        return v;
    };
    using V = std::map<std::string, std::pair<int, int64_t>>;
    EXPECT_EQ(vars({8, 6, 4, 8}, {8, 6, 32}), (V{{"d0", {0, 1}}, {"d1", {1, 1}}, {"d2", {2, 8}}}));
    EXPECT_EQ(vars({48, 32}, {8, 6, 4, 8}), (V{{"d0", {0, 1}}, {"d1", {-1, 1}}, {"d2", {1, 1}}, {"d3", {-1, 1}}}));
    EXPECT_EQ(vars({8, 4, 6, 8}, {32, 6, 8}), (V{{"d0", {0, 4}}, {"d1", {2, 1}}, {"d2", {3, 1}}}));
    // Unequal element counts (a communication node carried as a reshape) get
    // only what the analysis found.
    EXPECT_TRUE(reshape_strategies(nullptr, {4, 6}, {5, 5})->strategies.empty());
}

// A permute moves a split with its dimension: splitting output dimension i
// reads input dimension perm[i], one to one.
TEST(Permute, SplitsMoveWithTheirDimension) {
    const Shape s = {4, 6, 8, 10};
    std::vector<int64_t> perm = {0, 1, 2, 3};
    do {
        const std::vector<TensorType> in = {{DType::F32, s}};
        const OpStrategies *st = strategies_for(permute_call(perm), in);
        ASSERT_NE(st, nullptr);
        ASSERT_EQ(st->strategies.size(), 4u) << st->variant;
        const SymEnv env = symbol_env(permute_call(perm), in);
        for (const Strategy &x : st->strategies) {
            const int i = std::stoi(x.var.substr(1));
            EXPECT_EQ(x.outputs[0].dim, i) << st->variant;
            EXPECT_EQ(x.inputs[0].dim, perm[i]) << st->variant;
            EXPECT_EQ(x.inputs[0].scale.eval(env), 1) << st->variant;
            EXPECT_EQ(x.inputs[0].halo.eval(env), 0) << st->variant;
        }
    } while (std::next_permutation(perm.begin(), perm.end()));
}

OpCall concat_call(int64_t axis) { return {OpKind::Concat, "cat", {{"axis", axis}}}; }

TEST(Concat, TwoToFourInputsAlongEveryAxis) {
    Shape base = {3, 1, 4, 5};
    for (int arity = 2; arity <= 4; arity++)
        for (int axis = 0; axis < 4; axis++) {
            std::vector<HostTensor> in;
            std::vector<Shape> shapes;
            for (int i = 0; i < arity; i++) {
                Shape s = base;
                s[axis] = 1 + (i * 3 + axis) % 4;
                shapes.push_back(s);
                in.push_back(random_tensor(s, 10 + i));
            }
            auto out = run(concat_call(axis), in);
            std::vector<std::vector<double>> xs;
            for (auto &t : in) xs.push_back(to_double(t.f));
            expect_near(out[0].f, ref_concat(xs, shapes, axis), 0, 0, "concat");
            expect_analysed(concat_call(axis), in);
        }
}

TEST(Concat, RankOneAndNegativeAxis) {
    std::vector<HostTensor> in = {random_tensor({1}, 20), random_tensor({9}, 21), random_tensor({2}, 22)};
    auto out = run(concat_call(-1), in);
    ASSERT_EQ(out[0].type.shape, (Shape{12}));
    expect_near(out[0].f, ref_concat({to_double(in[0].f), to_double(in[1].f), to_double(in[2].f)}, {{1}, {9}, {2}}, 0),
                0, 0, "concat rank 1");
}

// Backward of a concat: each input's gradient is the slice of dy at its offset.
TEST(Concat, BackwardIsSlices) {
    std::vector<Shape> shapes = {{2, 3, 2}, {2, 1, 2}, {2, 4, 2}};
    const int axis = 1;
    std::vector<std::vector<double>> xs;
    for (size_t i = 0; i < shapes.size(); i++) xs.push_back(to_double(random_tensor(shapes[i], 30 + i).f));
    HostTensor dy = random_tensor({2, 8, 2}, 33);
    std::vector<double> dyd = to_double(dy.f);
    int64_t offset = 0;
    for (size_t i = 0; i < shapes.size(); i++) {
        std::vector<HostTensor> in = {dy};
        OpCall sl{OpKind::Slice, "cat.grad", {{"axis", int64_t(axis)}, {"start", offset}, {"end", offset + shapes[i][axis]}}};
        auto dx = run(sl, in);
        auto loss = [&](const std::vector<double> &x) {
            auto all = xs;
            all[i] = x;
            return dot(dyd, ref_concat(all, shapes, axis));
        };
        expect_near(dx[0].f, finite_diff(loss, xs[i]), 1e-6, 1e-6, "concat backward");
        offset += shapes[i][axis];
    }
}

OpCall slice_call(int64_t axis, int64_t start, int64_t end) {
    return {OpKind::Slice, "sl", {{"axis", axis}, {"start", start}, {"end", end}}};
}

OpCall slice_grad_call(int64_t axis, int64_t start, int64_t extent) {
    return {OpKind::SliceGrad, "sl", {{"axis", axis}, {"start", start}, {"extent", extent}}};
}

struct SliceCase {
    Shape s;
    int axis;
    int64_t start, end;
};

const std::vector<SliceCase> kSlices = {{{9}, 0, 2, 7},         {{9}, 0, 0, 9},       {{1}, 0, 0, 1},
                                        {{3, 7}, 1, 6, 7},      {{5, 4}, 0, 1, 3},    {{2, 5, 3}, 1, 0, 1},
                                        {{2, 3, 1, 37}, 3, 5, 36}, {{4, 6, 2, 3}, 1, 2, 5}};

TEST(Slice, ForwardAlongEveryAxis) {
    for (const SliceCase &k : kSlices) {
        std::vector<HostTensor> in = {random_tensor(k.s, 40)};
        OpCall c = slice_call(k.axis, k.start, k.end);
        auto out = run(c, in);
        expect_near(out[0].f, ref_slice(to_double(in[0].f), k.s, k.axis, k.start, k.end), 0, 0, "slice");
        expect_analysed(c, in);
    }
}

TEST(Slice, GradPlacesDyAndZeroes) {
    for (const SliceCase &k : kSlices) {
        Shape ds = k.s;
        ds[k.axis] = k.end - k.start;
        HostTensor x = random_tensor(k.s, 41), dy = random_tensor(ds, 42);
        std::vector<HostTensor> in = {dy};
        OpCall c = slice_grad_call(k.axis, k.start, k.s[k.axis]);
        auto dx = run(c, in);
        ASSERT_EQ(dx[0].type.shape, k.s);
        std::vector<double> dyd = to_double(dy.f);
        auto loss = [&](const std::vector<double> &xs) { return dot(dyd, ref_slice(xs, k.s, k.axis, k.start, k.end)); };
        expect_near(dx[0].f, finite_diff(loss, to_double(x.f)), 1e-6, 1e-6, "slice_grad");
        expect_analysed(c, in);
    }
}

TEST(ReduceSum, ForwardEveryAxisWithAndWithoutKeepdims) {
    for (Shape s : {Shape{7}, Shape{1}, Shape{3, 5}, Shape{2, 1, 9}, Shape{3, 4, 5, 2}, Shape{2, 700}})
        for (int axis = 0; axis < int(s.size()); axis++)
            for (int keep = 0; keep < 2; keep++) {
                std::vector<HostTensor> in = {random_tensor(s, 50)};
                OpCall c{OpKind::ReduceSum, "sum", {{"axis", int64_t(axis)}, {"keepdims", int64_t(keep)}}};
                auto out = run(c, in);
                Shape want = s;
                if (keep) want[axis] = 1;
                else want.erase(want.begin() + axis);
                ASSERT_EQ(out[0].type.shape, want);
                expect_near(out[0].f, ref_reduce_sum(to_double(in[0].f), s, axis), 1e-5, 1e-5, "reduce_sum");
                expect_analysed(c, in);
            }
}

TEST(Broadcast, ForwardEveryAxis) {
    for (Shape s : {Shape{}, Shape{7}, Shape{3, 5}, Shape{2, 1, 9}})
        for (int axis = 0; axis <= int(s.size()); axis++)
            for (int64_t extent : {1, 5}) {
                std::vector<HostTensor> in = {random_tensor(s, 60)};
                OpCall c{OpKind::Broadcast, "bc", {{"axis", int64_t(axis)}, {"extent", extent}}};
                auto out = run(c, in);
                expect_near(out[0].f, ref_broadcast(to_double(in[0].f), s, axis, extent), 0, 0, "broadcast");
                expect_analysed(c, in);
            }
}

// reduce_sum and broadcast are each other's backward.
TEST(ReduceSum, BackwardIsBroadcastAndBackwardOfBroadcastIsReduceSum) {
    Shape s = {3, 4, 2};
    for (int axis = 0; axis < 3; axis++) {
        HostTensor x = random_tensor(s, 70);
        Shape rs = s;
        rs.erase(rs.begin() + axis);
        HostTensor dy = random_tensor(rs, 71);
        std::vector<HostTensor> in = {dy};
        auto dx = run({OpKind::Broadcast, "sum.grad", {{"axis", int64_t(axis)}, {"extent", s[axis]}}}, in);
        std::vector<double> dyd = to_double(dy.f);
        auto loss = [&](const std::vector<double> &xs) { return dot(dyd, ref_reduce_sum(xs, s, axis)); };
        expect_near(dx[0].f, finite_diff(loss, to_double(x.f)), 1e-5, 1e-5, "reduce_sum backward");

        HostTensor b = random_tensor(rs, 72), dz = random_tensor(s, 73);
        std::vector<HostTensor> zin = {dz};
        auto db = run({OpKind::ReduceSum, "bc.grad", {{"axis", int64_t(axis)}}}, zin);
        std::vector<double> dzd = to_double(dz.f);
        auto loss_b = [&](const std::vector<double> &bs) { return dot(dzd, ref_broadcast(bs, rs, axis, s[axis])); };
        expect_near(db[0].f, finite_diff(loss_b, to_double(b.f)), 1e-5, 1e-5, "broadcast backward");
    }
}

TEST(ReduceSum, SplittingTheAxisGivesPartialSums) {
    OpCall c{OpKind::ReduceSum, "sum", {{"axis", int64_t(1)}}};
    const OpStrategies *s = strategies_for(c, {{DType::F32, {8, 16}}});
    ASSERT_NE(s, nullptr);
    bool found = false;
    for (const Strategy &st : s->strategies)
        if (st.var == "d1") {
            found = true;
            EXPECT_TRUE(st.reduction_var);
            EXPECT_EQ(st.outputs[0].kind, OutKind::Partial);
            EXPECT_EQ(st.outputs[0].reduce, "sum");
        }
    EXPECT_TRUE(found);
}

TEST(Layout, KernelsAreCompiled) {
    auto names = kernel_names();
    for (const char *k : {"tk_permute_0", "tk_permute_10", "tk_permute_3210", "tk_reshape", "tk_concat_4", "tk_slice",
                          "tk_slice_grad", "tk_reduce_sum", "tk_broadcast"})
        EXPECT_TRUE(std::count(names.begin(), names.end(), k)) << k;
}

// ---- User errors: one test per message ----

std::vector<TensorType> f32(Shape s) { return {{DType::F32, std::move(s)}}; }

TEST(LayoutErrors, PermuteWrongLength) {
    expect_error([] { infer_types(permute_call({1, 0}), f32({2, 3, 4})); },
                 "permute 'perm': attribute 'perm' = [1, 0] has 2 entries but x has rank 3");
}

TEST(LayoutErrors, PermuteNotAPermutation) {
    expect_error([] { infer_types(permute_call({0, 0, 2}), f32({2, 3, 4})); },
                 "attribute 'perm' = [0, 0, 2] is not a permutation of 0..2");
    expect_error([] { infer_types(permute_call({0, 3, 1}), f32({2, 3, 4})); }, "is not a permutation of 0..2");
}

TEST(LayoutErrors, PermuteTooManyBlocks) {
    expect_error([] { infer_types(permute_call({4, 3, 2, 1, 0}), f32({2, 3, 4, 5, 6})); },
                 "moves 5 separate blocks of dimensions; at most 4 are supported");
}

TEST(LayoutErrors, PermuteNeedsRankOne) {
    expect_error([] { infer_types(permute_call({}), f32({})); }, "input 0 (x) must have rank at least 1, got shape []");
}

TEST(LayoutErrors, WrongDtype) {
    expect_error([] { infer_types(permute_call({0}), {{DType::I32, {3}}}); }, "permute 'perm': input 0 (x) must be f32");
}

TEST(LayoutErrors, ReshapeTwoMinusOnes) {
    expect_error([] { infer_types(reshape_call({-1, 2, -1}), f32({4, 4})); },
                 "reshape 'view': attribute 'shape' = [-1, 2, -1] has more than one -1");
}

TEST(LayoutErrors, ReshapeBadExtent) {
    expect_error([] { infer_types(reshape_call({4, 0}), f32({4, 4})); },
                 "attribute 'shape' = [4, 0] has extent 0 at position 1; extents must be at least 1");
}

TEST(LayoutErrors, ReshapeCannotInfer) {
    expect_error([] { infer_types(reshape_call({-1, 3}), f32({4, 4})); },
                 "cannot infer the -1 in attribute 'shape' = [-1, 3]: x [4, 4] has 16 elements, which is not a multiple of 3");
}

TEST(LayoutErrors, ReshapeCountMismatch) {
    expect_error([] { infer_types(reshape_call({5, 3}), f32({4, 4})); },
                 "reshape 'view': x [4, 4] has 16 elements but attribute 'shape' = [5, 3] has 15");
}

TEST(LayoutErrors, ReshapeNeedsShape) {
    expect_error([] { infer_types({OpKind::Reshape, "view", {}}, f32({4})); }, "missing attribute 'shape'");
}

TEST(LayoutErrors, ConcatShapeMismatch) {
    expect_error([] { infer_types(concat_call(1), {{DType::F32, {2, 3}}, {DType::F32, {2, 5}}, {DType::F32, {3, 1}}}); },
                 "concat 'cat': input 2 has shape [3, 1] but input 0 has shape [2, 3]; they must match in every "
                 "dimension except axis 1");
    expect_error([] { infer_types(concat_call(0), {{DType::F32, {2, 3}}, {DType::F32, {2, 3, 1}}}); },
                 "input 1 has shape [2, 3, 1] but input 0 has shape [2, 3]");
}

TEST(LayoutErrors, ConcatAxisOutOfRange) {
    expect_error([] { infer_types(concat_call(2), {{DType::F32, {2, 3}}, {DType::F32, {2, 3}}}); },
                 "concat 'cat': attribute 'axis' = 2 is out of range for rank 2");
}

TEST(LayoutErrors, ConcatArity) {
    expect_error([] { infer_types(concat_call(0), f32({2})); }, "concat 'cat': expects 2 to 4 inputs, got 1");
}

TEST(LayoutErrors, SliceOutOfRange) {
    expect_error([] { infer_types(slice_call(1, 2, 6), f32({3, 5})); },
                 "slice 'sl': attributes 'start' = 2 and 'end' = 6 must satisfy 0 <= start < end <= 5 (the extent of "
                 "x [3, 5] along axis 1)");
    expect_error([] { infer_types(slice_call(0, 2, 2), f32({3, 5})); }, "'start' = 2 and 'end' = 2 must satisfy");
    expect_error([] { infer_types(slice_call(0, -1, 2), f32({3, 5})); }, "'start' = -1 and 'end' = 2 must satisfy");
}

TEST(LayoutErrors, SliceGradDoesNotFit) {
    expect_error([] { infer_types(slice_grad_call(0, 3, 5), f32({3, 2})); },
                 "slice_grad 'sl': dy [3, 2] has 3 elements along axis 0, which placed at 'start' = 3 does not fit in "
                 "'extent' = 5 (need 0 <= start and start + 3 <= extent)");
}

TEST(LayoutErrors, ReduceSumBadKeepdims) {
    OpCall c{OpKind::ReduceSum, "sum", {{"axis", int64_t(0)}, {"keepdims", int64_t(2)}}};
    expect_error([&] { infer_types(c, f32({3})); }, "reduce_sum 'sum': attribute 'keepdims' must be 0 or 1, got 2");
}

TEST(LayoutErrors, ReduceSumNeedsAxis) {
    expect_error([] { infer_types({OpKind::ReduceSum, "sum", {}}, f32({3})); }, "reduce_sum 'sum': missing attribute 'axis'");
}

TEST(LayoutErrors, BroadcastExtent) {
    OpCall c{OpKind::Broadcast, "bc", {{"axis", int64_t(0)}, {"extent", int64_t(0)}}};
    expect_error([&] { infer_types(c, f32({3})); }, "broadcast 'bc': attribute 'extent' = 0 must be at least 1");
}

TEST(LayoutErrors, BroadcastAxisOutOfRange) {
    OpCall c{OpKind::Broadcast, "bc", {{"axis", int64_t(3)}, {"extent", int64_t(2)}}};
    expect_error([&] { infer_types(c, f32({3})); }, "attribute 'axis' = 3 is out of range for rank 2");
}

}  // namespace
}  // namespace tessera::test
