// How lowering describes where a tensor's data lies across the ranks: one
// Form per level, and the box a rank holds under it. Internal to partition/.
#pragma once

#include <cstdint>
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

// The ranks that differ from r only on the levels in `levels`.
std::vector<int64_t> group_of(const std::vector<std::vector<int>> &coords, int r, const std::vector<bool> &levels);

// Elements member `i` of comm/'s ring all-reduce over k members sends for
// `count` elements (Communicator::all_reduce).
int64_t all_reduce_sent(int64_t count, int k, int i);

}  // namespace tessera::lowering
