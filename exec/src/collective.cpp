#include "collective.h"

#include <algorithm>
#include <cstring>

#include "tessera/error.h"

namespace tessera {

namespace {

std::vector<int64_t> ints(const OpCall &c, const char *name) { return c.attrs.get_ints(c.who(), name); }

// An all-reduce's "reduce" attribute: "sum" (the default) or "max".
ReduceOp reduce_of(const OpCall &c) {
    auto r = c.attrs.values().find("reduce");
    if (r == c.attrs.values().end()) return ReduceOp::Sum;
    const std::string *how = std::get_if<std::string>(&r->second);
    TESSERA_CHECK(how && (*how == "sum" || *how == "max"), "communication node '", c.name,
                  "': attribute 'reduce' must be \"sum\" or \"max\"");
    return *how == "max" ? ReduceOp::Max : ReduceOp::Sum;
}

std::string kind_of(const OpCall &c) {
    auto it = c.attrs.values().find("comm");
    TESSERA_CHECK(it != c.attrs.values().end() && std::holds_alternative<std::string>(it->second),
                  "communication node '", c.name, "' has no string attribute 'comm'");
    return std::get<std::string>(it->second);
}

}  // namespace

Collective::Collective(const Graph &g, NodeId n, int rank, int world) : rank_(rank), world_(world) {
    const Node &node = g.node(n);
    const OpCall &c = node.call;
    name_ = c.name;
    TESSERA_CHECK(node.comm && node.inputs.size() == 1 && node.outputs.size() == 1, "node '", c.name,
                  "' is not a communication node with one input and one output");
    const TensorInfo &in = g.tensor(node.inputs[0]), &out = g.tensor(node.outputs[0]);
    TESSERA_CHECK(in.type.dtype == out.type.dtype, "communication node '", c.name, "' changes the dtype");
    elem_ = dtype_size(in.type.dtype);
    in_box_ = Box::whole(in.type.shape);
    out_box_ = Box::whole(out.type.shape);
    const std::string kind = kind_of(c);
    bytes_ = c.attrs.get_int(c.who(), "bytes");
    if (kind == "redistribute") {
        read_redistribute(c);
        return;
    }
    for (int64_t q : ints(c, "ranks")) group_.ranks.push_back(static_cast<int>(q));
    TESSERA_CHECK(group_.index_of(rank) >= 0, "communication node '", c.name, "': its group ",
                  group_.str(), " does not hold this rank (", rank, ")");
    if (kind == "all_reduce") {
        kind_ = Kind::AllReduce;
        TESSERA_CHECK(in.type.shape == out.type.shape && in.type.dtype != DType::I32, "communication node '",
                      c.name, "': an all-reduce keeps its f32 or f64 shape");
        reduce_ = reduce_of(c);
        f64_ = in.type.dtype == DType::F64;
        TESSERA_CHECK(!f64_ || reduce_ == ReduceOp::Sum, "communication node '", c.name,
                      "': an f64 all-reduce is a sum");
        return;
    }
    TESSERA_CHECK(kind == "reduce_scatter", "communication node '", c.name, "' has unknown kind '", kind,
                  "' (expected redistribute, all_reduce or reduce_scatter)");
    read_reduce_scatter(c);
}

void Collective::check_box(const Box &b, const Box &frame, const char *what) const {
    TESSERA_CHECK(frame.contains(b), "communication node '", name_, "': ", what, " box ", b.str(),
                  " lies outside its buffer ", frame.str());
}

// The pieces of attribute `attr` ("sends" or "recvs"): [peer, box...] each,
// boxes inside `frame`; `buf` grows to hold the largest.
void Collective::read_pieces(const OpCall &c, const char *attr, const Box &frame, std::vector<Piece> &list,
                             std::vector<int> &index, std::vector<std::byte> &buf) {
    const int r = in_box_.rank();
    std::vector<int64_t> v = ints(c, attr);
    TESSERA_CHECK(v.size() % (1 + 2 * r) == 0, "communication node '", c.name, "': '", attr, "' has ", v.size(),
                  " integers, not a multiple of ", 1 + 2 * r);
    size_t most = 0;
    for (size_t at = 0; at < v.size(); at += 1 + 2 * r) {
        Piece p{static_cast<int>(v[at]), box_from_ints(v, at + 1, r)};
        TESSERA_CHECK(p.peer >= 0 && p.peer < world_ && p.peer != rank_ && index[p.peer] < 0, "communication node '",
                      c.name, "': '", attr, "' names peer ", p.peer, " badly (this rank is ", rank_, " of ", world_,
                      ")");
        check_box(p.box, frame, attr);
        index[p.peer] = static_cast<int>(list.size());
        most = std::max(most, static_cast<size_t>(p.box.elements()) * elem_);
        list.push_back(std::move(p));
    }
    buf.resize(most);
}

// The regions this rank copies from its input to its output itself.
void Collective::read_local(const OpCall &c) {
    const int r = in_box_.rank();
    std::vector<int64_t> v = ints(c, "local");
    TESSERA_CHECK(v.size() % (3 * r) == 0 || r == 0, "communication node '", c.name, "': 'local' has ", v.size(),
                  " integers, not a multiple of ", 3 * r);
    if (r == 0) {
        // A scalar: either this rank holds it already or it is received.
        if (recvs_.empty()) local_.emplace_back(in_box_, out_box_);
        return;
    }
    for (size_t at = 0; at < v.size(); at += 3 * r) {
        Box region = box_from_ints(v, at, r);
        check_box(region, in_box_, "local");
        // The output buffer placed in the input's frame: the region's
        // origin in the output is v[at + 2r ...].
        Box frame = out_box_;
        for (int d = 0; d < r; d++) {
            int64_t shift = v[at + 2 * r + d] - region.lo[d];
            frame.lo[d] -= shift;
            frame.hi[d] -= shift;
        }
        check_box(region, frame, "local");
        local_.emplace_back(region, frame);
    }
}

void Collective::read_redistribute(const OpCall &c) {
    kind_ = Kind::Redistribute;
    TESSERA_CHECK(c.attrs.get_int(c.who(), "world") == world_, "communication node '", c.name, "' was lowered for ",
                  c.attrs.get_int(c.who(), "world"), " ranks, but the job has ", world_);
    send_to_.assign(world_, -1);
    recv_from_.assign(world_, -1);
    read_pieces(c, "sends", in_box_, sends_, send_to_, send_buf_);
    read_pieces(c, "recvs", out_box_, recvs_, recv_from_, recv_buf_);
    read_local(c);
    int64_t sent = 0;
    for (const Piece &p : sends_) sent += p.box.elements() * static_cast<int64_t>(elem_);
    TESSERA_CHECK(sent == bytes_, "communication node '", c.name, "': its sends add up to ", sent,
                  " bytes, but it records ", bytes_);
}

// The group's chunks of the input, in group order (unequal where the split is
// uneven); this rank's has the output's shape.
void Collective::read_reduce_scatter(const OpCall &c) {
    kind_ = Kind::ReduceScatter;
    const int r = in_box_.rank();
    std::vector<int64_t> v = ints(c, "chunks");
    TESSERA_CHECK(v.size() == static_cast<size_t>(group_.size()) * 2 * r, "communication node '", c.name,
                  "': 'chunks' needs ", group_.size() * 2 * r, " integers, has ", v.size());
    size_t packed = 0;
    for (int j = 0; j < group_.size(); j++) {
        chunks_.push_back(box_from_ints(v, static_cast<size_t>(j) * 2 * r, r));
        check_box(chunks_.back(), in_box_, "chunk");
        chunk_counts_.push_back(static_cast<size_t>(chunks_.back().elements()));
        packed += chunk_counts_.back();
    }
    const int me = group_.index_of(rank_);
    TESSERA_CHECK(chunks_[me].extents() == out_box_.extents(), "communication node '", c.name,
                  "': this rank's chunk ", chunks_[me].str(), " does not have the output's shape ", out_box_.str());
    send_buf_.resize(packed * elem_);
}

void Collective::run(Communicator &comm, const std::byte *in, std::byte *out) {
    switch (kind_) {
    case Kind::Redistribute: redistribute(comm, in, out); return;
    case Kind::AllReduce: {
        size_t n = static_cast<size_t>(in_box_.elements());
        if (in != out) std::memcpy(out, in, n * elem_);
        if (f64_) comm.all_reduce_f64(reinterpret_cast<double *>(out), n, group_);
        else comm.all_reduce(reinterpret_cast<float *>(out), n, group_, reduce_);
        return;
    }
    case Kind::ReduceScatter: {
        // The chunks, packed in group order (an uneven split's differ in size),
        // each into a dense run holding exactly that chunk.
        size_t offset = 0;
        for (size_t j = 0; j < chunks_.size(); j++) {
            copy_box(in, in_box_, send_buf_.data() + offset * elem_, chunks_[j], chunks_[j], elem_);
            offset += chunk_counts_[j];
        }
        comm.reduce_scatter(reinterpret_cast<const float *>(send_buf_.data()), reinterpret_cast<float *>(out),
                            chunk_counts_, group_);
        return;
    }
    }
}

void Collective::redistribute(Communicator &comm, const std::byte *in, std::byte *out) {
    // Pairwise exchange: in round s every rank sends to rank + s and receives
    // from rank - s, so each transfer meets its partner in the same round.
    for (int s = 1; s < world_; s++) {
        const int dst = (rank_ + s) % world_, src = (rank_ - s + world_) % world_;
        const Piece *send = send_to_[dst] >= 0 ? &sends_[send_to_[dst]] : nullptr;
        const Piece *recv = recv_from_[src] >= 0 ? &recvs_[recv_from_[src]] : nullptr;
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

}  // namespace tessera
