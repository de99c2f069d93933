// How one tensor is laid out at one level of the recursion: split evenly along
// one dimension, replicated, or (a weight's gradient only) partial sums: every
// device of the level holds its own addend of the whole, and the sum is taken
// where something reads it whole or split (DDP's one all-reduce of a gradient
// accumulated over an RNN's time steps). A tensor's whole layout is one Layout
// per level, outermost first; the parts nest (level 2 splits each level-1 part).
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

struct Layout {
    int dim = -1;  // -1: replicated, -2: partial sums
    static Layout split(int d) { return Layout{d}; }
    static Layout replicated() { return Layout{-1}; }
    static Layout partial() { return Layout{-2}; }
    bool is_split() const { return dim >= 0; }
    bool is_partial() const { return dim == -2; }
    std::string str() const;  // "split(0)", "replicated" or "partial"
    bool operator==(const Layout &) const = default;
    auto operator<=>(const Layout &) const = default;
};
// Parses str()'s form; throws tessera::Error naming `where`.
Layout layout_from_str(const std::string &s, const std::string &where);

// The communication that converting a layout costs. Bytes are totals received
// by all k devices of one group, for a value of `bytes` in all:
//   all-gather      split -> replicated         (k-1) * bytes
//   all-to-all      split(a) -> split(b)        (k-1) * bytes / k
//   reduce-scatter  partial sums -> split       (k-1) * bytes
//   all-reduce      partial sums -> replicated  2 (k-1) * bytes   (ring)
//   halo            split -> split + overlap    the overlap rows, counted exactly
// replicated -> anything, and split(a) -> split(a), move nothing.
enum class CommKind : uint8_t { AllGather, AllToAll, ReduceScatter, AllReduce, Halo };
const char *comm_kind_name(CommKind k);
CommKind comm_kind_from_name(const std::string &s, const std::string &where);

int64_t all_gather_bytes(int k, int64_t bytes);
int64_t all_to_all_bytes(int k, int64_t bytes);
int64_t reduce_scatter_bytes(int k, int64_t bytes);
int64_t all_reduce_bytes(int k, int64_t bytes);
// Message steps of the ring algorithm, for the alpha term of the time model.
int comm_steps(CommKind kind, int k);

}  // namespace tessera
