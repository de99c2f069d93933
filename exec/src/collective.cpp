#include "collective.h"

#include <algorithm>
#include <cstring>

#include "tessera/error.h"

namespace tessera {

Collective::Collective(const Graph &g, NodeId n, int rank, int world) : rank_(rank), world_(world) {
    const Node &node = g.node(n);
    const OpCall &c = node.call;
    name_ = c.name;
    TESSERA_CHECK(node.comm && !node.inputs.empty() && node.inputs.size() == node.outputs.size(), "node '", c.name,
                  "' is not a communication node with an output per input");
    const TensorInfo &in = g.tensor(node.inputs[0]), &out = g.tensor(node.outputs[0]);
    TESSERA_CHECK(in.type.dtype == out.type.dtype, "communication node '", c.name, "' changes the dtype");
    elem_ = dtype_size(in.type.dtype);
    in_box_ = Box::whole(in.type.shape);
    out_box_ = Box::whole(out.type.shape);
    const CommAttrs a = read_comm_attrs(c, in_box_.rank());
    bytes_ = a.bytes;
    TESSERA_CHECK(node.inputs.size() == 1 || a.kind == CommNodeKind::AllReduce, "communication node '", c.name,
                  "': only an all-reduce may have several inputs (a fused bucket)");
    if (a.kind == CommNodeKind::Redistribute) {
        read_redistribute(a);
        return;
    }
    group_.ranks = a.ranks;
    TESSERA_CHECK(group_.index_of(rank) >= 0, "communication node '", c.name, "': its group ",
                  group_.str(), " does not hold this rank (", rank, ")");
    if (is_half(in.type.dtype)) half_ = in.type.dtype == DType::BF16 ? HalfFormat::BF16 : HalfFormat::F16;
    if (a.kind == CommNodeKind::AllReduce) {
        kind_ = Kind::AllReduce;
        TESSERA_CHECK(in.type.shape == out.type.shape && in.type.dtype != DType::I32, "communication node '",
                      c.name, "': an all-reduce keeps its f32 or f64 shape");
        reduce_ = a.reduce == "max" ? ReduceOp::Max : ReduceOp::Sum;
        f64_ = in.type.dtype == DType::F64;
        TESSERA_CHECK(!f64_ || reduce_ == ReduceOp::Sum, "communication node '", c.name,
                      "': an f64 all-reduce is a sum");
        for (size_t m = 0; m < node.inputs.size(); m++) {
            const TensorType &ti = g.tensor(node.inputs[m]).type, &to = g.tensor(node.outputs[m]).type;
            TESSERA_CHECK(ti == to && ti.dtype == in.type.dtype, "communication node '", c.name, "': member ", m,
                          " changes its type or differs in dtype from the first");
            member_counts_.push_back(static_cast<size_t>(ti.elements()));
        }
        if (f64_) doubles_.resize(member_counts_.size());
        else if (half_) halves_.resize(member_counts_.size());
        else floats_.resize(member_counts_.size());
        return;
    }
    read_reduce_scatter(a);
}

void Collective::check_box(const Box &b, const Box &frame, const char *what) const {
    TESSERA_CHECK(frame.contains(b), "communication node '", name_, "': ", what, " box ", b.str(),
                  " lies outside its buffer ", frame.str());
}

// The pieces of a redistribution's sends or receives, boxes inside `frame`;
// `buf` grows to hold the largest.
void Collective::take_pieces(const std::vector<CommPiece> &pieces, const char *what, const Box &frame,
                             std::vector<int> &index, std::vector<CommPiece> &list, std::vector<std::byte> &buf) {
    size_t most = 0;
    for (const CommPiece &p : pieces) {
        TESSERA_CHECK(p.peer >= 0 && p.peer < world_ && p.peer != rank_ && index[p.peer] < 0, "communication node '",
                      name_, "': '", what, "' names peer ", p.peer, " badly (this rank is ", rank_, " of ", world_,
                      ")");
        check_box(p.box, frame, what);
        index[p.peer] = static_cast<int>(list.size());
        most = std::max(most, static_cast<size_t>(p.box.elements()) * elem_);
        list.push_back(p);
    }
    buf.resize(most);
}

// The regions this rank copies from its input to its output itself.
void Collective::take_local(const std::vector<LocalCopy> &local) {
    if (in_box_.rank() == 0) {
        // A scalar: either this rank holds it already or it is received.
        if (recvs_.empty()) local_.emplace_back(in_box_, out_box_);
        return;
    }
    for (const LocalCopy &l : local) {
        check_box(l.region, in_box_, "local");
        // The output buffer placed in the input's frame: the region starts at
        // l.dest in the output.
        Box frame = out_box_;
        for (int d = 0; d < in_box_.rank(); d++) {
            int64_t shift = l.dest[d] - l.region.lo[d];
            frame.lo[d] -= shift;
            frame.hi[d] -= shift;
        }
        check_box(l.region, frame, "local");
        local_.emplace_back(l.region, frame);
    }
}

void Collective::read_redistribute(const CommAttrs &a) {
    kind_ = Kind::Redistribute;
    TESSERA_CHECK(a.world == world_, "communication node '", name_, "' was lowered for ", a.world,
                  " ranks, but the job has ", world_);
    send_to_.assign(world_, -1);
    recv_from_.assign(world_, -1);
    take_pieces(a.sends, "sends", in_box_, send_to_, sends_, send_buf_);
    take_pieces(a.recvs, "recvs", out_box_, recv_from_, recvs_, recv_buf_);
    take_local(a.local);
    int64_t sent = 0;
    for (const CommPiece &p : sends_) sent += p.box.elements() * static_cast<int64_t>(elem_);
    TESSERA_CHECK(sent == bytes_, "communication node '", name_, "': its sends add up to ", sent,
                  " bytes, but it records ", bytes_);
}

// The group's chunks of the input, in group order (unequal where the split is
// uneven); this rank's has the output's shape.
void Collective::read_reduce_scatter(const CommAttrs &a) {
    kind_ = Kind::ReduceScatter;
    size_t packed = 0;
    for (const Box &chunk : a.chunks) {
        check_box(chunk, in_box_, "chunk");
        chunks_.push_back(chunk);
        chunk_counts_.push_back(static_cast<size_t>(chunk.elements()));
        packed += chunk_counts_.back();
    }
    const int me = group_.index_of(rank_);
    TESSERA_CHECK(chunks_[me].extents() == out_box_.extents(), "communication node '", name_,
                  "': this rank's chunk ", chunks_[me].str(), " does not have the output's shape ", out_box_.str());
    send_buf_.resize(packed * elem_);
}

void Collective::run(Communicator &comm, const Inputs &in, const Outputs &out) {
    switch (kind_) {
    case Kind::Redistribute: redistribute(comm, in[0], out[0]); return;
    case Kind::AllReduce: all_reduce(comm, in, out); return;
    case Kind::ReduceScatter: {
        // The chunks, packed in group order (an uneven split's differ in size),
        // each into a dense run holding exactly that chunk.
        size_t offset = 0;
        for (size_t j = 0; j < chunks_.size(); j++) {
            copy_box(in[0], in_box_, send_buf_.data() + offset * elem_, chunks_[j], chunks_[j], elem_);
            offset += chunk_counts_[j];
        }
        if (half_)
            comm.reduce_scatter_16(reinterpret_cast<const uint16_t *>(send_buf_.data()),
                                   reinterpret_cast<uint16_t *>(out[0]), chunk_counts_, *half_, group_);
        else
            comm.reduce_scatter(reinterpret_cast<const float *>(send_buf_.data()), reinterpret_cast<float *>(out[0]),
                                chunk_counts_, group_);
        return;
    }
    }
}

void Collective::all_reduce(Communicator &comm, const Inputs &in, const Outputs &out) {
    for (size_t m = 0; m < member_counts_.size(); m++) {
        if (in[m] != out[m]) std::memcpy(out[m], in[m], member_counts_[m] * elem_);
        if (f64_) doubles_[m] = reinterpret_cast<double *>(out[m]);
        else if (half_) halves_[m] = reinterpret_cast<uint16_t *>(out[m]);
        else floats_[m] = reinterpret_cast<float *>(out[m]);
    }
    if (half_) {
        comm.all_reduce_many_16(halves_, member_counts_, *half_, group_, reduce_);
    } else if (member_counts_.size() > 1) {
        if (f64_) comm.all_reduce_many_f64(doubles_, member_counts_, group_);
        else comm.all_reduce_many(floats_, member_counts_, group_, reduce_);
    } else if (f64_) {
        comm.all_reduce_f64(doubles_[0], member_counts_[0], group_);
    } else {
        comm.all_reduce(floats_[0], member_counts_[0], group_, reduce_);
    }
}

void Collective::redistribute(Communicator &comm, const std::byte *in, std::byte *out) {
    // Pairwise exchange: in round s every rank sends to rank + s and receives
    // from rank - s, so each transfer meets its partner in the same round.
    for (int s = 1; s < world_; s++) {
        const int dst = (rank_ + s) % world_, src = (rank_ - s + world_) % world_;
        const CommPiece *send = send_to_[dst] >= 0 ? &sends_[send_to_[dst]] : nullptr;
        const CommPiece *recv = recv_from_[src] >= 0 ? &recvs_[recv_from_[src]] : nullptr;
        if (!send && !recv) continue;
        size_t sb = 0, rb = 0;
        if (send) {
            copy_box(in, in_box_, send_buf_.data(), send->box, send->box, elem_);
            sb = static_cast<size_t>(send->box.elements()) * elem_;
        }
        if (recv) rb = static_cast<size_t>(recv->box.elements()) * elem_;
        if (send && recv) comm.sendrecv(send_buf_.data(), sb, dst, recv_buf_.data(), rb, src);
        else if (send) comm.send(send_buf_.data(), sb, dst);
        else comm.recv(recv_buf_.data(), rb, src);
        if (recv) copy_box(recv_buf_.data(), recv->box, out, out_box_, recv->box, elem_);
    }
    for (const auto &[region, frame] : local_) copy_box(in, in_box_, out, frame, region, elem_);
}

// ---------------------------------------------------------------------------
// On device memory, through a communicator that issues onto streams.

namespace {

// Fails naming the collective when the communicator could not issue it.
void issued(bool ok, const Communicator &comm, const std::string &name, const char *what) {
    TESSERA_CHECK(ok, "communication node '", name, "': the device communicator (", comm.backend(), ") cannot ",
                  what, " on a stream; use NCCL (--comm nccl), or --comm mpi to stage through host memory");
}

}  // namespace

std::vector<Group> Collective::groups() const {
    if (kind_ == Kind::Redistribute || group_.size() == world_) return {};
    return {group_};
}

void Collective::enqueue(Device &dev, StreamKind s, Communicator &comm, const Inputs &in, const Outputs &out) const {
    TESSERA_CHECK(!half_ || kind_ == Kind::Redistribute, "communication node '", name_,
                  "' combines 16-bit floats, which only the host collectives do yet (docs/limitations.md, Mixed "
                  "precision)");
    switch (kind_) {
    case Kind::AllReduce: enqueue_all_reduce(dev, s, comm, in, out); return;
    case Kind::ReduceScatter: enqueue_reduce_scatter(dev, s, comm, in[0], out[0]); return;
    case Kind::Redistribute: enqueue_redistribute(dev, s, comm, in[0], out[0]); return;
    }
}

void Collective::enqueue_all_reduce(Device &dev, StreamKind s, Communicator &comm, const Inputs &in,
                                    const Outputs &out) const {
    void *stream = dev.native_stream(s);
    for (size_t m = 0; m < member_counts_.size(); m++)
        if (in[m] != out[m]) dev.copy_in_arena_async(s, out[m], in[m], member_counts_[m] * elem_);
    if (member_counts_.size() > 1) {
        const std::vector<void *> bufs(out.begin(), out.end());
        if (comm.enqueue_all_reduce_many(bufs, member_counts_, f64_, reduce_, group_, stream)) return;
    }
    for (size_t m = 0; m < member_counts_.size(); m++) {
        const size_t n = member_counts_[m];
        if (f64_)
            issued(comm.enqueue_all_reduce_f64(reinterpret_cast<double *>(out[m]), n, group_, stream), comm, name_,
                   "all-reduce doubles");
        else if (reduce_ == ReduceOp::Max)
            issued(comm.enqueue_all_reduce_max(reinterpret_cast<float *>(out[m]), n, group_, stream), comm, name_,
                   "all-reduce by maximum");
        else
            issued(comm.enqueue_all_reduce(reinterpret_cast<float *>(out[m]), n, group_, stream), comm, name_,
                   "all-reduce");
    }
}

// In rounds: round r packs elements [r*c, (r+1)*c) of every member's chunk
// (c: the workspace's send half over the group), and reduce-scatters them
// into the same elements of this rank's output.
void Collective::enqueue_reduce_scatter(Device &dev, StreamKind s, Communicator &comm, const std::byte *in,
                                        std::byte *out) const {
    const int64_t k = group_.size();
    const int64_t c = std::max<int64_t>(1, static_cast<int64_t>(dev.comm_workspace_bytes() / 2 / elem_) / k);
    const size_t most = *std::max_element(chunk_counts_.begin(), chunk_counts_.end());
    std::byte *packed = dev.comm_workspace();
    const int me = group_.index_of(rank_);
    for (int64_t first = 0; first < static_cast<int64_t>(most); first += c) {
        std::vector<size_t> counts(chunks_.size());
        int64_t at = 0;
        for (size_t j = 0; j < chunks_.size(); j++) {
            const int64_t left = static_cast<int64_t>(chunk_counts_[j]) - first;
            counts[j] = static_cast<size_t>(std::clamp<int64_t>(left, 0, c));
            dev.copy_box_async(s, {in, in_box_, false, packed + at * elem_, Box{}, true, chunks_[j], elem_, first,
                                   static_cast<int64_t>(counts[j])});
            at += static_cast<int64_t>(counts[j]);
        }
        std::byte *mine = counts[me] > 0 ? out + first * static_cast<int64_t>(elem_) : out;
        issued(comm.enqueue_reduce_scatter(reinterpret_cast<const float *>(packed), reinterpret_cast<float *>(mine),
                                           counts, group_, dev.native_stream(s)),
               comm, name_, "reduce-scatter");
    }
}

// The pairwise rounds of redistribute(), each piece in chunks of at most half
// the workspace: chunk j of the piece sent to rank + s and of the piece
// received from rank - s go together, packed from the input and unpacked
// into the output by box copies.
void Collective::enqueue_redistribute(Device &dev, StreamKind s, Communicator &comm, const std::byte *in,
                                      std::byte *out) const {
    const size_t half = dev.comm_workspace_bytes() / 2;
    const int64_t c = std::max<int64_t>(1, static_cast<int64_t>(half / elem_));
    std::byte *send_ws = dev.comm_workspace(), *recv_ws = send_ws + half;
    for (int round = 1; round < world_; round++) {
        const int dst = (rank_ + round) % world_, src = (rank_ - round + world_) % world_;
        const CommPiece *send = send_to_[dst] >= 0 ? &sends_[send_to_[dst]] : nullptr;
        const CommPiece *recv = recv_from_[src] >= 0 ? &recvs_[recv_from_[src]] : nullptr;
        const int64_t ns = send ? send->box.elements() : 0, nr = recv ? recv->box.elements() : 0;
        for (int64_t first = 0; first < std::max(ns, nr); first += c) {
            const int64_t cs = std::clamp<int64_t>(ns - first, 0, c), cr = std::clamp<int64_t>(nr - first, 0, c);
            std::vector<Communicator::Transfer> sends, recvs;
            if (cs > 0) {
                dev.copy_box_async(s, {in, in_box_, false, send_ws, Box{}, true, send->box, elem_, first, cs});
                sends.push_back({dst, send_ws, static_cast<size_t>(cs) * elem_});
            }
            if (cr > 0) recvs.push_back({src, recv_ws, static_cast<size_t>(cr) * elem_});
            issued(comm.enqueue_exchange(sends, recvs, dev.native_stream(s)), comm, name_, "send and receive");
            if (cr > 0) dev.copy_box_async(s, {recv_ws, Box{}, true, out, out_box_, false, recv->box, elem_, first, cr});
        }
    }
    for (const auto &[region, frame] : local_)
        dev.copy_box_async(s, {in, in_box_, false, out, frame, false, region, elem_, 0, region.elements()});
}

}  // namespace tessera
