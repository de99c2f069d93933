#include "lower_state.h"

#include "tessera/partition/lower.h"

#include "tessera/error.h"

namespace tessera::lowering {

State state_of(const std::vector<Layout> &layout) {
    State s;
    for (const Layout &l : layout)
        s.push_back(l.is_split() ? Form{Form::Split, l.dim} : l.is_partial() ? Form{Form::Partial, -1} : Form{});
    return s;
}

// `b` becomes its part `part` of k along `dim` (Box::part's blocks: ceil and
// floor size, the longer first), in place: lowering cuts boxes by the million.
void cut(Box &b, int dim, int k, int part, const std::string &what) {
    const int64_t extent = b.hi[dim] - b.lo[dim];
    TESSERA_CHECK(extent >= k, "lowering: ", what, ": extent ", extent, " of dimension ", dim,
                  " is shorter than its ", k, " parts");
    b.lo[dim] += block_lo(extent, k, part);
    b.hi[dim] = b.lo[dim] + block_size(extent, k, part);
}

Box box_in(const Shape &s, const State &st, const std::vector<int> &cuts, const std::vector<int> &coords,
           const std::string &what) {
    Box b = Box::whole(s);
    for (size_t l = 0; l < st.size(); l++)
        if (st[l].kind == Form::Split) cut(b, st[l].dim, cuts[l], coords[l], what);
    return b;
}

// Whether two states cut a tensor into the same boxes: the same splits on
// every level (whole and partial sums both leave a level's box whole).
bool same_cuts(const State &a, const State &b) {
    if (a.size() != b.size()) return false;
    for (size_t l = 0; l < a.size(); l++) {
        const bool sa = a[l].kind == Form::Split, sb = b[l].kind == Form::Split;
        if (sa != sb || (sa && a[l].dim != b[l].dim)) return false;
    }
    return true;
}

const RankGroups::Table &RankGroups::table(const std::vector<bool> &levels) {
    auto found = tables_.find(levels);
    if (found != tables_.end()) return found->second;
    // A group is named by its coordinates on the other levels, read as a
    // mixed-radix number whose radices are the levels' cuts.
    const size_t ranks = coords_.size(), nl = levels.size();
    Table t;
    std::vector<int> of_key;
    for (size_t r = 0; r < ranks; r++) {
        int64_t key = 0;
        for (size_t l = 0; l < nl; l++)
            if (!levels[l]) key = key * cuts_[l] + coords_[r][l];
        if (static_cast<size_t>(key) >= of_key.size()) of_key.resize(static_cast<size_t>(key) + 1, -1);
        int &g = of_key[static_cast<size_t>(key)];
        if (g < 0) {
            g = static_cast<int>(t.groups.size());
            t.groups.emplace_back();
        }
        t.group.push_back(g);
        t.position.push_back(static_cast<int>(t.groups[g].size()));
        t.groups[g].push_back(static_cast<int64_t>(r));
    }
    return tables_.emplace(levels, std::move(t)).first->second;
}

// Elements member `i` of comm/'s ring all-reduce over k members sends for
// `count` elements: chunk j has count/k elements, one more for j < count % k;
// the reduce-scatter pass sends every chunk but i, the all-gather pass every
// chunk but (i+1) mod k (Communicator::all_reduce).
int64_t all_reduce_sent(int64_t count, int k, int i) {
    if (k < 2) return 0;
    auto chunk = [&](int j) { return count / k + (j < count % k ? 1 : 0); };
    return 2 * count - chunk(i) - chunk((i + 1) % k);
}

}  // namespace tessera::lowering

namespace tessera {

// lower.h's coordinate and box helpers.

std::vector<int> rank_coords(const std::vector<int> &cuts, int rank) {
    std::vector<int> c(cuts.size());
    for (int l = static_cast<int>(cuts.size()) - 1; l >= 0; l--) {
        c[l] = rank % cuts[l];
        rank /= cuts[l];
    }
    return c;
}

Box held_box(const Shape &s, const std::vector<Layout> &layout, const std::vector<int> &cuts, int rank) {
    return lowering::box_in(s, lowering::state_of(layout), cuts, rank_coords(cuts, rank), "held_box");
}

Box DeviceGraph::held_by(TensorId whole, int r) const {
    TESSERA_INTERNAL_ASSERT(whole >= 0 && whole < static_cast<TensorId>(shapes.size()), "held_by: tensor ", whole);
    return held_box(shapes[whole], layouts[whole], cuts, r);
}

TensorId DeviceGraph::local_named(const Graph &whole, const std::string &name) const {
    auto t = whole.find_tensor(name);
    TESSERA_CHECK(t.has_value() && local[*t] != kNoTensor, "rank ", rank, " holds no tensor named '", name, "'");
    return local[*t];
}

}  // namespace tessera
