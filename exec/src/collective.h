// Running a communication node (Node::comm, made by partition/lower.h) with a
// communicator. Internal to exec/: the executor prepares one Collective per
// collective instruction, once per program, with its staging buffers, so a
// step allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/exec/device.h"
#include "tessera/graph/box.h"
#include "tessera/graph/comm_attrs.h"
#include "tessera/graph/graph.h"

namespace tessera {

class Collective {
public:
    // Reads the node's attributes; throws tessera::Error naming the node when
    // they are malformed or do not fit its tensors.
    Collective(const Graph &g, NodeId n, int rank, int world);

    // The node's input and output buffers, one of each per member (several
    // only for a fused bucket of all-reduces, lower.h's fuse_collectives).
    using Inputs = std::vector<const std::byte *>;
    using Outputs = std::vector<std::byte *>;

    // On host memory. A bucket is one all_reduce_many: the bits each member
    // would get alone.
    void run(Communicator &comm, const Inputs &in, const Outputs &out);
    // The same on device memory, issued onto `stream` of `dev` without
    // waiting, through a communicator that runs collectives on streams
    // (NCCL): all-reduces in place in the output; redistributions and
    // reduce-scatters pack their pieces into the device's comm workspace with
    // box copies, in chunks of at most half of it each way, and unpack what
    // arrives. A bucket's members are issued one after another. Throws
    // tessera::Error when `comm` cannot issue onto a stream.
    void enqueue(Device &dev, StreamKind stream, Communicator &comm, const Inputs &in, const Outputs &out) const;
    // The communicator groups enqueue() uses beyond the world (sub-groups),
    // for the communicator to make before the first step.
    std::vector<Group> groups() const;

    int64_t bytes() const { return bytes_; }  // what lowering says this rank sends

private:
    enum class Kind : uint8_t { Redistribute, AllReduce, ReduceScatter };
    void redistribute(Communicator &comm, const std::byte *in, std::byte *out);
    void all_reduce(Communicator &comm, const Inputs &in, const Outputs &out);
    void enqueue_all_reduce(Device &dev, StreamKind s, Communicator &comm, const Inputs &in, const Outputs &out) const;
    void enqueue_reduce_scatter(Device &dev, StreamKind s, Communicator &comm, const std::byte *in,
                                std::byte *out) const;
    void enqueue_redistribute(Device &dev, StreamKind s, Communicator &comm, const std::byte *in,
                              std::byte *out) const;
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
    std::vector<size_t> member_counts_;     // all_reduce: elements per member (one, or a bucket's)
    std::vector<float *> floats_;           // all_reduce: the members' outputs, reused each run
    std::vector<double *> doubles_;
    std::optional<HalfFormat> half_;        // all_reduce, reduce_scatter of bf16 or f16
    std::vector<uint16_t *> halves_;        // all_reduce of 16-bit floats: the members' outputs
    std::vector<Box> chunks_;               // reduce_scatter: in the input's frame, group order
    std::vector<size_t> chunk_counts_;      // reduce_scatter: elements per chunk
    std::vector<int> send_to_, recv_from_;  // per peer: index into sends_ / recvs_, or -1
    std::vector<CommPiece> sends_, recvs_;  // sends: in the input's frame; receives: the output's
    std::vector<std::pair<Box, Box>> local_;  // (region in the input's frame, the output buffer in that frame)
    int64_t bytes_ = 0;
    std::vector<std::byte> send_buf_, recv_buf_;
};

}  // namespace tessera
