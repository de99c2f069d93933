// Layout operators (permute, reshape, concat, slice, slice_grad, reduce_sum,
// broadcast): shapes, variants and dispatch. Every kernel sees its tensors through
// a small canonical view (see lang/defs/layout.cpp), so any rank is supported.
#include <algorithm>
#include <numeric>

#include "family.h"

namespace tessera::lang {

namespace {

std::string list_str(const std::vector<int64_t> &v) { return attr_str(v); }

int axis_of(const OpCall &c, int rank) { return normalize_axis(c, c.attrs.get_int(c.who(), "axis"), rank); }

bool keepdims(const OpCall &c) {
    int64_t v = c.attrs.get_int(c.who(), "keepdims", 0);
    TESSERA_CHECK(v == 0 || v == 1, c.who(), ": attribute 'keepdims' must be 0 or 1, got ", v);
    return v == 1;
}

void expect_rank_at_least_1(const OpCall &c, const std::vector<TensorType> &in, int i, const char *what) {
    TESSERA_CHECK(in[i].rank() >= 1, c.who(), ": ", input_label(i, what), " must have rank at least 1, got shape ",
                  shape_str(in[i].shape));
}

// ---- permute ----

std::vector<int> permutation(const OpCall &c, int rank) {
    std::vector<int64_t> p = c.attrs.get_ints(c.who(), "perm");
    TESSERA_CHECK(static_cast<int>(p.size()) == rank, c.who(), ": attribute 'perm' = ", list_str(p), " has ",
                  p.size(), " entries but x has rank ", rank);
    std::vector<bool> seen(rank, false);
    for (int64_t d : p) {
        bool ok = d >= 0 && d < rank && !seen[d];
        TESSERA_CHECK(ok, c.who(), ": attribute 'perm' = ", list_str(p), " is not a permutation of 0..", rank - 1);
        seen[d] = true;
    }
    return {p.begin(), p.end()};
}

// The permutation the kernel runs: extent-1 dimensions dropped, and runs of input
// dimensions that stay adjacent and in order in the output merged into one. The
// result has no i followed by i+1; both views are dense row-major.
struct CanonicalPermute {
    Shape in, out;
    std::vector<int> perm;
};

CanonicalPermute canonical_permute(const Shape &s, const std::vector<int> &perm) {
    int rank = static_cast<int>(s.size());
    std::vector<int> reduced_index(rank, -1);
    for (int d = 0, n = 0; d < rank; d++)
        if (s[d] != 1) reduced_index[d] = n++;
    // Runs of consecutive (reduced) input dims, in output order: {first, last}.
    std::vector<std::pair<int, int>> runs;
    std::vector<int64_t> run_extent;
    for (int i = 0; i < rank; i++) {
        int d = perm[i], r = reduced_index[d];
        if (r < 0) continue;
        if (!runs.empty() && runs.back().second + 1 == r) {
            runs.back().second = r;
            run_extent.back() *= s[d];
        } else {
            runs.push_back({r, r});
            run_extent.push_back(s[d]);
        }
    }
    CanonicalPermute c;
    if (runs.empty()) {
        c = {{1}, {1}, {0}};
        return c;
    }
    std::vector<int> by_input(runs.size());
    std::iota(by_input.begin(), by_input.end(), 0);
    std::sort(by_input.begin(), by_input.end(), [&](int a, int b) { return runs[a].first < runs[b].first; });
    std::vector<int> input_pos(runs.size());
    for (size_t k = 0; k < by_input.size(); k++) {
        input_pos[by_input[k]] = static_cast<int>(k);
        c.in.push_back(run_extent[by_input[k]]);
    }
    for (size_t k = 0; k < runs.size(); k++) {
        c.perm.push_back(input_pos[k]);
        c.out.push_back(run_extent[k]);
    }
    return c;
}

// ---- reshape ----

// The requested shape with its -1 resolved against x's element count.
Shape reshape_target(const OpCall &c, const Shape &x) {
    std::vector<int64_t> want = c.attrs.get_ints(c.who(), "shape");
    int infer_at = -1;
    int64_t known = 1;
    for (size_t k = 0; k < want.size(); k++) {
        if (want[k] == -1) {
            TESSERA_CHECK(infer_at < 0, c.who(), ": attribute 'shape' = ", list_str(want),
                          " has more than one -1; at most one extent can be inferred");
            infer_at = static_cast<int>(k);
            continue;
        }
        TESSERA_CHECK(want[k] >= 1, c.who(), ": attribute 'shape' = ", list_str(want), " has extent ", want[k],
                      " at position ", k, "; extents must be at least 1 (or -1 to infer one)");
        known *= want[k];
    }
    int64_t count = num_elements(x);
    if (infer_at >= 0) {
        TESSERA_CHECK(count % known == 0, c.who(), ": cannot infer the -1 in attribute 'shape' = ", list_str(want),
                      ": x ", shape_str(x), " has ", count, " elements, which is not a multiple of ", known);
        want[infer_at] = count / known;
    }
    TESSERA_CHECK(num_elements(want) == count, c.who(), ": x ", shape_str(x), " has ", count,
                  " elements but attribute 'shape' = ", shape_str(want), " has ", num_elements(want));
    return want;
}

// ---- concat ----

Shape concat_shape(const OpCall &c, const std::vector<TensorType> &in, int axis) {
    Shape out = in[0].shape;
    for (size_t i = 1; i < in.size(); i++) {
        const Shape &s = in[i].shape;
        bool ok = s.size() == out.size();
        for (size_t d = 0; ok && d < s.size(); d++) ok = static_cast<int>(d) == axis || s[d] == out[d];
        TESSERA_CHECK(ok, c.who(), ": input ", i, " has shape ", shape_str(s), " but input 0 has shape ",
                      shape_str(in[0].shape), "; they must match in every dimension except axis ", axis);
        out[axis] += s[axis];
    }
    return out;
}

// ---- slice and slice_grad ----

struct SliceRange {
    int axis;
    int64_t start, end;
};

SliceRange slice_range(const OpCall &c, const Shape &x) {
    int axis = axis_of(c, static_cast<int>(x.size()));
    int64_t start = c.attrs.get_int(c.who(), "start"), end = c.attrs.get_int(c.who(), "end");
    TESSERA_CHECK(0 <= start && start < end && end <= x[axis], c.who(), ": attributes 'start' = ", start,
                  " and 'end' = ", end, " must satisfy 0 <= start < end <= ", x[axis], " (the extent of x ",
                  shape_str(x), " along axis ", axis, ")");
    return {axis, start, end};
}

SliceRange slice_grad_range(const OpCall &c, const Shape &dy) {
    int axis = axis_of(c, static_cast<int>(dy.size()));
    int64_t start = c.attrs.get_int(c.who(), "start"), extent = c.attrs.get_int(c.who(), "extent");
    TESSERA_CHECK(start >= 0 && start + dy[axis] <= extent, c.who(), ": dy ", shape_str(dy), " has ", dy[axis],
                  " elements along axis ", axis, ", which placed at 'start' = ", start,
                  " does not fit in 'extent' = ", extent, " (need 0 <= start and start + ", dy[axis],
                  " <= extent)");
    return {axis, start, start + dy[axis]};
}

// [outer, axis * inner]: the folded view of slices and concatenations.
Shape folded(const Shape &s, int axis) {
    int rank = static_cast<int>(s.size());
    return {extent_product(s, 0, axis), extent_product(s, axis, rank)};
}

int64_t inner_of(const Shape &s, int axis) { return extent_product(s, axis + 1, static_cast<int>(s.size())); }

}  // namespace

std::vector<TensorType> infer_layout(const OpCall &c, const std::vector<TensorType> &in) {
    const char *what = c.kind == OpKind::SliceGrad ? "dy" : "x";
    for (size_t i = 0; i < in.size(); i++) expect_dtype(c, in, static_cast<int>(i), what, DType::F32);
    const Shape &x = in[0].shape;
    int rank = in[0].rank();
    switch (c.kind) {
    case OpKind::Permute: {
        expect_rank_at_least_1(c, in, 0, "x");
        std::vector<int> perm = permutation(c, rank);
        CanonicalPermute cp = canonical_permute(x, perm);
        TESSERA_CHECK(cp.perm.size() <= 4, c.who(), ": permuting x ", shape_str(x), " by ",
                      list_str({perm.begin(), perm.end()}), " moves ", cp.perm.size(),
                      " separate blocks of dimensions; at most 4 are supported (merge dimensions with reshape)");
        Shape out;
        for (int d : perm) out.push_back(x[d]);
        return {{DType::F32, out}};
    }
    case OpKind::Reshape: return {{DType::F32, reshape_target(c, x)}};
    case OpKind::Concat: {
        for (size_t i = 0; i < in.size(); i++) expect_rank_at_least_1(c, in, static_cast<int>(i), "x");
        return {{DType::F32, concat_shape(c, in, axis_of(c, rank))}};
    }
    case OpKind::Slice: {
        expect_rank_at_least_1(c, in, 0, "x");
        SliceRange r = slice_range(c, x);
        Shape out = x;
        out[r.axis] = r.end - r.start;
        return {{DType::F32, out}};
    }
    case OpKind::SliceGrad: {
        expect_rank_at_least_1(c, in, 0, "dy");
        SliceRange r = slice_grad_range(c, x);
        Shape out = x;
        out[r.axis] = c.attrs.get_int(c.who(), "extent");
        return {{DType::F32, out}};
    }
    case OpKind::ReduceSum: {
        expect_rank_at_least_1(c, in, 0, "x");
        int axis = axis_of(c, rank);
        Shape out = x;
        if (keepdims(c)) out[axis] = 1;
        else out.erase(out.begin() + axis);
        return {{DType::F32, out}};
    }
    case OpKind::Broadcast: {
        int axis = normalize_axis(c, c.attrs.get_int(c.who(), "axis"), rank + 1);
        int64_t extent = int_at_least(c, "extent", 1);
        Shape out = x;
        out.insert(out.begin() + axis, extent);
        return {{DType::F32, out}};
    }
    default: TESSERA_INTERNAL_ASSERT(false, "not a layout operator: ", op_name(c.kind));
    }
}

StructMap structural_layout(const OpCall &c, const std::vector<TensorType> &in) {
    const Shape &x = in[0].shape;
    int rank = in[0].rank();
    switch (c.kind) {
    case OpKind::Permute: {
        StructMap s{{"rank", rank}};
        std::vector<int> perm = permutation(c, rank);
        for (int i = 0; i < rank; i++) s[std::string("p").append(std::to_string(i))] = perm[i];
        return s;
    }
    case OpKind::Reshape: {
        Shape out = reshape_target(c, x);
        int prefix = 0;
        while (prefix < rank && prefix < static_cast<int>(out.size()) && x[prefix] == out[prefix]) prefix++;
        return {{"in_rank", rank}, {"out_rank", static_cast<int>(out.size())}, {"prefix", prefix}};
    }
    case OpKind::Concat:
        return {{"rank", rank}, {"axis", axis_of(c, rank)}, {"arity", static_cast<int>(in.size())}};
    case OpKind::Slice:
    case OpKind::SliceGrad: return {{"rank", rank}, {"axis", axis_of(c, rank)}};
    case OpKind::ReduceSum: return {{"rank", rank}, {"axis", axis_of(c, rank)}, {"keepdims", keepdims(c)}};
    case OpKind::Broadcast:
        return {{"rank", rank}, {"axis", normalize_axis(c, c.attrs.get_int(c.who(), "axis"), rank + 1)}};
    default: TESSERA_INTERNAL_ASSERT(false, "not a layout operator: ", op_name(c.kind));
    }
}

void fill_defaults_layout(OpCall &c) {
    if (c.kind == OpKind::ReduceSum && !c.attrs.has("keepdims")) c.attrs.set("keepdims", int64_t{0});
}

void run_layout(const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    const Shape &x = in[0].type.shape;
    int rank = static_cast<int>(x.size());
    std::string name = std::string("tk_") + op_name(c.kind);
    switch (c.kind) {
    case OpKind::Permute: {
        CanonicalPermute cp = canonical_permute(x, permutation(c, rank));
        name += "_";
        for (int d : cp.perm) name += std::to_string(d);
        call_kernel(name, {{in[0], cp.in}}, {}, {{out[0], cp.out}});
        return;
    }
    case OpKind::Reshape: {
        Shape flat = {in[0].type.elements()};
        call_kernel(name, {{in[0], flat}}, {}, {{out[0], flat}});
        return;
    }
    case OpKind::Concat: {
        int axis = axis_of(c, rank);
        std::vector<KernelArg> args;
        for (const TensorRef &t : in) args.push_back({t, folded(t.type.shape, axis)});
        call_kernel(name + "_" + std::to_string(in.size()), args, {}, {{out[0], folded(out[0].type.shape, axis)}});
        return;
    }
    case OpKind::Slice: {
        SliceRange r = slice_range(c, x);
        int64_t inner = inner_of(x, r.axis);
        Scalars s;
        s.set("start", double(r.start * inner)).set("end", double(r.end * inner));
        call_kernel(name, {{in[0], folded(x, r.axis)}}, s, {{out[0], folded(out[0].type.shape, r.axis)}});
        return;
    }
    case OpKind::SliceGrad: {
        SliceRange r = slice_grad_range(c, x);
        int64_t inner = inner_of(x, r.axis);
        Scalars s;
        s.set("start", double(r.start * inner)).set("extent", double(out[0].type.shape[r.axis] * inner));
        call_kernel(name, {{in[0], folded(x, r.axis)}}, s, {{out[0], folded(out[0].type.shape, r.axis)}});
        return;
    }
    case OpKind::ReduceSum: {
        int axis = axis_of(c, rank);
        int64_t outer = extent_product(x, 0, axis), inner = inner_of(x, axis);
        if (inner == 1) call_kernel(name + "_last", {{in[0], {outer, x[axis]}}}, {}, {{out[0], {outer}}});
        else call_kernel(name, {{in[0], {outer, x[axis], inner}}}, {}, {{out[0], {outer, inner}}});
        return;
    }
    case OpKind::Broadcast: {
        int axis = normalize_axis(c, c.attrs.get_int(c.who(), "axis"), rank + 1);
        int64_t outer = extent_product(x, 0, axis), inner = extent_product(x, axis, rank);
        int64_t extent = c.attrs.get_int(c.who(), "extent");
        Scalars s;
        s.set("extent", double(extent));
        call_kernel(name, {{in[0], {outer, inner}}}, s, {{out[0], {outer, extent, inner}}});
        return;
    }
    default: TESSERA_INTERNAL_ASSERT(false, "not a layout operator: ", op_name(c.kind));
    }
}

}  // namespace tessera::lang
