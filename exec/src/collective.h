// Running a communication node (Node::comm, made by partition/lower.h) with a
// communicator. Internal to exec/: the executor prepares one Collective per
// collective instruction, once per program, with its staging buffers, so a
// step allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/graph/box.h"
#include "tessera/graph/comm_attrs.h"
#include "tessera/graph/graph.h"

namespace tessera {

class Collective {
public:
    // Reads the node's attributes; throws tessera::Error naming the node when
    // they are malformed or do not fit its tensors.
    Collective(const Graph &g, NodeId n, int rank, int world);

    // `in` and `out` are the node's input and output buffers (host memory).
    void run(Communicator &comm, const std::byte *in, std::byte *out);

    int64_t bytes() const { return bytes_; }  // what lowering says this rank sends
    // A sum all-reduce needs no host-side copies, so a device communicator can
    // run it on device memory: its group and element count.
    bool is_all_reduce() const { return kind_ == Kind::AllReduce && reduce_ == ReduceOp::Sum && !f64_; }
    const Group &group() const { return group_; }
    size_t elements() const { return static_cast<size_t>(in_box_.elements()); }

private:
    enum class Kind : uint8_t { Redistribute, AllReduce, ReduceScatter };
    void redistribute(Communicator &comm, const std::byte *in, std::byte *out);
    // The constructor's steps: each kind's attributes, checked against the buffers.
    void check_box(const Box &b, const Box &frame, const char *what) const;
    void take_pieces(const std::vector<CommPiece> &pieces, const char *what, const Box &frame,
                     std::vector<int> &index, std::vector<CommPiece> &list, std::vector<std::byte> &buf);
    void take_local(const std::vector<LocalCopy> &local);
    void read_redistribute(const CommAttrs &a);
    void read_reduce_scatter(const CommAttrs &a);

    Kind kind_ = Kind::Redistribute;
    std::string name_;
    int rank_ = 0, world_ = 1;
    size_t elem_ = 4;
    Box in_box_, out_box_;                  // [0, extents) of each buffer
    Group group_;                           // all_reduce, reduce_scatter
    ReduceOp reduce_ = ReduceOp::Sum;       // all_reduce
    bool f64_ = false;                      // all_reduce of doubles (batch norm's statistics)
    std::vector<Box> chunks_;               // reduce_scatter: in the input's frame, group order
    std::vector<size_t> chunk_counts_;      // reduce_scatter: elements per chunk
    std::vector<int> send_to_, recv_from_;  // per peer: index into sends_ / recvs_, or -1
    std::vector<CommPiece> sends_, recvs_;  // sends: in the input's frame; receives: the output's
    std::vector<std::pair<Box, Box>> local_;  // (region in the input's frame, the output buffer in that frame)
    int64_t bytes_ = 0;
    std::vector<std::byte> send_buf_, recv_buf_;
};

}  // namespace tessera
