// A reshape's partition strategies, built from its shapes (strategy.h).
//
// A reshape keeps the row-major order of the elements. Pair the input's and the
// output's dimensions into the smallest runs whose products agree: [B, S, H, d]
// -> [B*S, H*d] pairs {B, S} with {B*S} and {H, d} with {H*d}. Inside a group,
// a block of the leading output dimension's rows is a contiguous run of the
// group's elements, and so is a block of the leading input dimension's rows;
// every other dimension stays whole. Output rows [lo, hi) of the group hold
// elements [lo * Po, hi * Po) of it (Po: the product of the output's inner
// dimensions of the group), which lie in input rows [lo*Po / Pi, (hi*Po - 1) / Pi]
// (Pi likewise). That is an affine region divided by Pi, after cancelling the
// common factor of Po and Pi. Only leading dimensions are ever split, so the
// inner products, and with them these constants, are the same at every level of
// a recursive partition.
#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>

#include "tessera/lang/strategy.h"

namespace tessera {

namespace {

struct Group {
    int in_lead = -1, out_lead = -1;  // first dimension of extent > 1 on each side, or -1
    int64_t in_inner = 1, out_inner = 1;
};

// The leading dimension of extent > 1 in [begin, end) and the product of the
// extents after it.
std::pair<int, int64_t> lead_and_inner(const Shape &s, int begin, int end) {
    int lead = -1;
    int64_t inner = 1;
    for (int d = begin; d < end; d++) {
        if (lead >= 0) inner *= s[d];
        else if (s[d] > 1) lead = d;
    }
    return {lead, inner};
}

// The groups of dimensions whose products agree, in order; empty when the two
// shapes do not hold the same number of elements or some extent is 0 (shape
// inference refuses both before strategies_for gets here; kept for callers
// that pass shapes directly).
std::vector<Group> dimension_groups(const Shape &in, const Shape &out) {
    const int ni = static_cast<int>(in.size()), no = static_cast<int>(out.size());
    for (int64_t e : in)
        if (e <= 0) return {};
    for (int64_t e : out)
        if (e <= 0) return {};
    std::vector<Group> groups;
    int i = 0, o = 0;
    while (i < ni || o < no) {
        const int i0 = i, o0 = o;
        int64_t pin = i < ni ? in[i++] : 1, pout = o < no ? out[o++] : 1;
        while (pin != pout) {
            if (pin < pout && i < ni) pin *= in[i++];
            else if (pout < pin && o < no) pout *= out[o++];
            else return {};
        }
        Group g;
        std::tie(g.in_lead, g.in_inner) = lead_and_inner(in, i0, i);
        std::tie(g.out_lead, g.out_inner) = lead_and_inner(out, o0, o);
        groups.push_back(g);
    }
    return groups;
}

SymPoly constant(int64_t v) { return v == 0 ? SymPoly{} : SymPoly{{{v, {}}}}; }

// Split the group's leading output dimension; read the matching rows of its
// leading input dimension.
Strategy group_split(const Group &g) {
    const int64_t common = std::gcd(g.out_inner, g.in_inner);
    const int64_t scale = g.out_inner / common;
    InputNeed need;
    need.kind = NeedKind::Split;
    need.dim = g.in_lead;
    need.scale = constant(scale);
    need.lo_offset = constant(0);
    need.hi_offset = constant(scale - 1);
    need.halo = constant(0);
    need.divisor = constant(g.in_inner / common);
    Strategy s;
    s.var = "d" + std::to_string(g.out_lead);
    s.inputs = {need};
    s.outputs = {{OutKind::Split, g.out_lead, ""}};
    return s;
}

OpStrategies build(const OpStrategies *analysed, const Shape &in, const Shape &out) {
    OpStrategies r;
    if (analysed) r = *analysed;
    r.variant = (analysed ? analysed->variant : std::string("reshape")) + " " + shape_str(in) + " -> " +
                shape_str(out);
    for (const Group &g : dimension_groups(in, out)) {
        if (g.in_lead < 0 || g.out_lead < 0) continue;
        Strategy s = group_split(g);
        std::erase_if(r.rejected, [&](const auto &rej) { return rej.first == s.var; });
        auto same = std::find_if(r.strategies.begin(), r.strategies.end(),
                                 [&](const Strategy &a) { return a.var == s.var; });
        // The analysis splits a shared leading dimension itself; elsewhere it
        // reads the whole input and keeps the block, which this replaces.
        if (same == r.strategies.end()) r.strategies.push_back(std::move(s));
        else if (same->inputs.at(0).kind == NeedKind::Replicated) *same = std::move(s);
    }
    return r;
}

}  // namespace

const OpStrategies *reshape_strategies(const OpStrategies *analysed, const Shape &in, const Shape &out) {
    static std::mutex mu;
    static std::map<std::pair<Shape, Shape>, OpStrategies> cache;  // node-stable: pointers stay valid
    std::lock_guard<std::mutex> lock(mu);
    auto key = std::make_pair(in, out);
    auto it = cache.find(key);
    if (it == cache.end()) it = cache.emplace(key, build(analysed, in, out)).first;
    return &it->second;
}

}  // namespace tessera
