// The attributes of a communication node (Graph::add_comm_node): one schema,
// written by lowering (partition/src/lower.cpp) and read by the executor
// (exec/src/collective.cpp), so that neither spells attribute names or packs
// boxes into integers on its own.
//
//   all_reduce      ranks, bytes, reduce ("sum" unless "max")
//   reduce_scatter  ranks, bytes, chunks (each member's box of the input)
//   redistribute    world, bytes, sends and recvs (a peer and a box each),
//                   local (an input region and where it starts in the output)
//
// Boxes are in the node's own buffers' frames: the input's for sends, chunks
// and local regions, the output's for recvs.
#pragma once

#include <string>
#include <vector>

#include "tessera/graph/box.h"
#include "tessera/lang/op.h"

namespace tessera {

enum class CommNodeKind : uint8_t { AllReduce, ReduceScatter, Redistribute };

const char *comm_kind_name(CommNodeKind k);  // "all_reduce", "reduce_scatter", "redistribute"

struct CommPiece {
    int peer = -1;
    Box box;
    bool operator==(const CommPiece &) const = default;
};

struct LocalCopy {
    Box region;  // in the input's frame
    Shape dest;  // where it starts in the output's frame
    bool operator==(const LocalCopy &) const = default;
};

struct CommAttrs {
    CommNodeKind kind = CommNodeKind::AllReduce;
    int64_t bytes = 0;           // what this rank sends, as lowering counts it
    std::vector<int> ranks;      // all_reduce, reduce_scatter: the group, in ring order
    std::string reduce = "sum";  // all_reduce: "sum" or "max"
    std::vector<Box> chunks;     // reduce_scatter: one per member, in group order
    int world = 0;               // redistribute: the ranks it was lowered for
    std::vector<CommPiece> sends, recvs;  // redistribute
    std::vector<LocalCopy> local;         // redistribute
    bool operator==(const CommAttrs &) const = default;
};

Attrs comm_attrs_to(const CommAttrs &c);

// The attributes of node `call`, whose buffers have rank `box_rank`. Throws
// tessera::Error naming the node when an attribute is missing, has the wrong
// type, or its integers do not pack whole boxes.
CommAttrs read_comm_attrs(const OpCall &call, int box_rank);

}  // namespace tessera
