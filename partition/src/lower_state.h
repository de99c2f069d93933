// How lowering describes where a tensor's data lies across the ranks: one
// Form per level, and the box a rank holds under it. Internal to partition/.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/graph/box.h"
#include "tessera/partition/layout.h"

namespace tessera::lowering {

// What a tensor is on each level: split along a dimension, whole (every rank
// of the level holds the same data), or partial sums (every rank of the level
// holds its own addend of the whole).
struct Form {
    enum Kind : uint8_t { Whole, Split, Partial };
    Kind kind = Whole;
    int dim = -1;
};
using State = std::vector<Form>;  // per level

State state_of(const std::vector<Layout> &layout);

// `b` becomes its part `part` of k along `dim` (Box::part's blocks: ceil and
// floor size, the longer first), in place: lowering cuts boxes by the million.
// Throws tessera::Error naming `what` when the extent is shorter than k.
void cut(Box &b, int dim, int k, int part, const std::string &what);

// The box of a tensor of shape `s` held as `st` by the rank at `coords`.
Box box_in(const Shape &s, const State &st, const std::vector<int> &cuts, const std::vector<int> &coords,
           const std::string &what);

// Whether two states cut a tensor into the same boxes: the same splits on
// every level (whole and partial sums both leave a level's box whole).
bool same_cuts(const State &a, const State &b);

// The groups of ranks that differ only on the levels in a mask (`levels`):
// each rank's group, in rank order, and its place in it. A table per mask is
// made once, in O(N·L log N) for N ranks of L levels, so that asking for every
// rank's group costs O(N), not O(N^2) (1024 devices took minutes).
class RankGroups {
public:
    RankGroups(const std::vector<std::vector<int>> &coords, const std::vector<int> &cuts)
        : coords_(coords), cuts_(cuts) {}
    RankGroups(const RankGroups &) = delete;  // it refers to its owner's coordinates and cuts
    RankGroups &operator=(const RankGroups &) = delete;
    const std::vector<int64_t> &members(int r, const std::vector<bool> &levels) {
        const Table &t = table(levels);
        return t.groups[static_cast<size_t>(t.group[r])];
    }
    int position(int r, const std::vector<bool> &levels) { return table(levels).position[r]; }

private:
    struct Table {
        std::vector<std::vector<int64_t>> groups;
        std::vector<int> group, position;  // per rank
    };
    const Table &table(const std::vector<bool> &levels);

    const std::vector<std::vector<int>> &coords_;
    const std::vector<int> &cuts_;  // per level: its count, the radix of its coordinate
    std::map<std::vector<bool>, Table> tables_;
};

// Elements member `i` of comm/'s ring all-reduce over k members sends for
// `count` elements (Communicator::all_reduce).
int64_t all_reduce_sent(int64_t count, int k, int i);

}  // namespace tessera::lowering
