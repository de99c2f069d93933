// Groups, level groups, counters, and the collectives as ring (and tree)
// algorithms over the backend's exchange().
//
// Why rings: in a ring every member sends and receives the same amount at each
// step, so no link carries more than its share, and the bytes a member sends
// are known exactly from the sizes alone. That is what lets the planner's byte
// count equal the measured one.
//
// Chunks: all_reduce cuts `count` floats into k chunks, the first count % k of
// them one element longer. In the reduce-scatter phase chunk c travels the ring
// from member c+1 to member c, each member adding its own values as it passes
// (partial + local), so member c finishes chunk c. The all-gather phase then
// copies each finished chunk around the ring. Every element is therefore added
// in one order fixed by ring positions, never by timing, and every member ends
// with the bits computed on the chunk's finishing member.
#include "tessera/comm/communicator.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>

#include "tessera/error.h"
#include "tessera/half.h"

namespace tessera {

const char *comm_op_name(CommOp op) {
    switch (op) {
    case CommOp::AllReduce: return "all_reduce";
    case CommOp::AllGather: return "all_gather";
    case CommOp::ReduceScatter: return "reduce_scatter";
    case CommOp::AllToAll: return "all_to_all";
    case CommOp::SendRecv: return "sendrecv";
    case CommOp::Broadcast: return "broadcast";
    case CommOp::Barrier: return "barrier";
    }
    return "unknown_comm_op";
}

int64_t CommCounters::total() const { return std::accumulate(bytes.begin(), bytes.end(), int64_t{0}); }

int Group::index_of(int world_rank) const {
    auto it = std::find(ranks.begin(), ranks.end(), world_rank);
    return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
}

std::string Group::str() const {
    std::string s = "[";
    for (size_t i = 0; i < ranks.size(); i++) {
        if (i > 0) s += ",";
        s += std::to_string(ranks[i]);
    }
    return s + "]";
}

namespace {

int mod(int a, int k) { return ((a % k) + k) % k; }

// Chunk c of `count` elements cut into k: the first count % k chunks hold one more.
size_t chunk_size(size_t count, int k, int c) {
    return count / k + (static_cast<size_t>(c) < count % k ? 1 : 0);
}
size_t chunk_offset(size_t count, int k, int c) {
    return static_cast<size_t>(c) * (count / k) + std::min(static_cast<size_t>(c), count % k);
}

std::string list_str(const std::vector<int> &v) { return Group{v}.str(); }

bool overlaps(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
    auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
    return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

std::vector<Group> level_groups(const std::vector<int> &cuts, int rank, int world_size) {
    int64_t product = 1;
    for (size_t l = 0; l < cuts.size(); l++) {
        TESSERA_CHECK(cuts[l] >= 1, "level_groups: cut ", cuts[l], " at level ", l, " of cuts ",
                      list_str(cuts), " must be at least 1");
        // Capped so that absurd cut lists cannot overflow; any cap above world_size gives the same verdict.
        product = std::min<int64_t>(product * cuts[l], int64_t{1} << 40);
    }
    TESSERA_CHECK(product == world_size, "level_groups: cuts ", list_str(cuts), " multiply to ", product,
                  ", but the world has ", world_size, " ranks; the cuts' product must equal the number of processes");
    TESSERA_CHECK(rank >= 0 && rank < world_size, "level_groups: rank ", rank, " is outside the world of ",
                  world_size, " ranks (0..", world_size - 1, ")");

    std::vector<Group> groups(cuts.size());
    int stride = world_size;
    for (size_t l = 0; l < cuts.size(); l++) {
        stride /= cuts[l];  // ranks between consecutive indices of level l
        int index = (rank / stride) % cuts[l];
        int base = rank - index * stride;
        for (int j = 0; j < cuts[l]; j++) groups[l].ranks.push_back(base + j * stride);
    }
    return groups;
}

Communicator::~Communicator() = default;

Group Communicator::world_group() const {
    Group g;
    g.ranks.resize(size_);
    std::iota(g.ranks.begin(), g.ranks.end(), 0);
    return g;
}

std::string Communicator::comm_timeout_message(CommOp op, const Group &g, int peer) const {
    std::ostringstream os;
    os << "rank " << rank_ << ": " << comm_op_name(op) << " over ranks " << g.str() << " timed out after "
       << timeout_s_ << " s waiting for ";
    if (peer >= 0)
        os << "rank " << peer;
    else
        os << "the other members";  // a backend (NCCL) that cannot tell which peer is late
    return os.str();
}

void Communicator::check_group(const Group &g, CommOp op) const {
    const char *name = comm_op_name(op);
    TESSERA_CHECK(broken_.empty(), "rank ", rank_, ": ", name, " over ranks ", g.str(),
                  " on a broken communicator: an earlier operation failed part way (", broken_,
                  "), so the members' messages are out of step; create a new communicator");
    TESSERA_CHECK(g.size() > 0, "rank ", rank_, ": ", name,
                  " over an empty group; a group lists the world ranks that take part (0..", size_ - 1,
                  "), this rank included");
    seen_.assign(size_, 0);  // keeps its capacity: no allocation after the first call
    for (int r : g.ranks) {
        TESSERA_CHECK(r >= 0 && r < size_, "rank ", rank_, ": ", name, " over ranks ", g.str(), " names rank ", r,
                      ", but the world has ranks 0..", size_ - 1);
        TESSERA_CHECK(!seen_[r], "rank ", rank_, ": ", name, " over ranks ", g.str(), " lists rank ", r,
                      " twice; a group's ranks must be distinct");
        seen_[r] = 1;
    }
    TESSERA_CHECK(seen_[rank_], "rank ", rank_, ": ", name, " over ranks ", g.str(),
                  " does not include this rank; only the group's members may call its collectives");
}

void Communicator::mark_broken(const std::string &why) {
    if (broken_.empty()) broken_ = why;
}

void Communicator::step(const void *send_buf, size_t send_bytes, int dst, void *recv_buf, size_t recv_bytes,
                        int src, CommOp op, const Group &g) {
    try {
        exchange(send_buf, send_bytes, dst, recv_buf, recv_bytes, src, op, g);
    } catch (const std::exception &e) {
        mark_broken(e.what());
        throw;
    }
}

int64_t Communicator::reduce_scatter_bytes(const std::vector<size_t> &counts, int me) {
    if (counts.size() <= 1) return 0;
    size_t total = 0;
    for (size_t c : counts) total += c;
    return static_cast<int64_t>((total - counts[me]) * sizeof(float));
}

std::byte *Communicator::scratch(size_t bytes) {
    const size_t words = (bytes + sizeof(double) - 1) / sizeof(double);
    if (scratch_.size() < words) scratch_.resize(words);
    return reinterpret_cast<std::byte *>(scratch_.data());
}

int64_t Communicator::algorithm_bytes(CommOp op, size_t n, int k, int me, int root_index) {
    if (k <= 1) return 0;
    const auto f = static_cast<int64_t>(sizeof(float));
    switch (op) {
    case CommOp::AllReduce:
        // Reduce-scatter sends every chunk but its own; all-gather every chunk but the next member's.
        return f * static_cast<int64_t>(2 * n - chunk_size(n, k, me) - chunk_size(n, k, (me + 1) % k));
    case CommOp::ReduceScatter: return f * (k - 1) * static_cast<int64_t>(n);
    case CommOp::AllGather:
    case CommOp::AllToAll: return static_cast<int64_t>(k - 1) * static_cast<int64_t>(n);
    case CommOp::Broadcast: {
        // Binomial tree: relative rank r sends to r + m for each power of two m below r's lowest set bit.
        int r = mod(me - root_index, k);
        int children = 0;
        for (int m = 1; m < k; m <<= 1) {
            if (r != 0 && m >= (r & -r)) break;
            if (r + m < k) children++;
        }
        return static_cast<int64_t>(children) * static_cast<int64_t>(n);
    }
    case CommOp::Barrier: return 0;
    case CommOp::SendRecv: return static_cast<int64_t>(n);
    }
    return 0;
}

// ---- Point to point ------------------------------------------------------------

namespace {

void check_peer(int rank, int size, int peer, const char *what) {
    TESSERA_CHECK(peer >= 0 && peer < size && peer != rank, "rank ", rank, ": ", what, " rank ", peer,
                  " is not a valid peer; it must be another rank in 0..", size - 1);
}

}  // namespace

void Communicator::send(const void *buf, size_t bytes, int peer) {
    check_peer(rank_, size_, peer, "send to");
    Group g{{rank_, peer}};
    check_group(g, CommOp::SendRecv);
    count_call(CommOp::SendRecv);
    step(buf, bytes, peer, nullptr, 0, -1, CommOp::SendRecv, g);
    this->count(CommOp::SendRecv, static_cast<int64_t>(bytes));
}

void Communicator::recv(void *buf, size_t bytes, int peer) {
    check_peer(rank_, size_, peer, "recv from");
    Group g{{rank_, peer}};
    check_group(g, CommOp::SendRecv);
    count_call(CommOp::SendRecv);
    step(nullptr, 0, -1, buf, bytes, peer, CommOp::SendRecv, g);
}

void Communicator::sendrecv(const void *send_buf, size_t send_bytes, int dst, void *recv_buf, size_t recv_bytes,
                            int src) {
    check_peer(rank_, size_, dst, "sendrecv to");
    check_peer(rank_, size_, src, "sendrecv from");
    Group g{{rank_, dst}};
    if (src != dst) g.ranks.push_back(src);
    check_group(g, CommOp::SendRecv);
    count_call(CommOp::SendRecv);
    step(send_buf, send_bytes, dst, recv_buf, recv_bytes, src, CommOp::SendRecv, g);
    this->count(CommOp::SendRecv, static_cast<int64_t>(send_bytes));
}

// ---- Collectives ---------------------------------------------------------------

namespace {

// How errors name a collective's elements.
template <typename T>
const char *values_name() {
    if constexpr (sizeof(T) == sizeof(double)) return "doubles";
    else if constexpr (sizeof(T) == sizeof(float)) return "floats";
    else return "16-bit floats";
}

// The ring's chunks of one buffer of `count` elements: k + 1 offsets.
std::vector<size_t> even_chunks(size_t count, int k) {
    std::vector<size_t> offsets(static_cast<size_t>(k) + 1);
    for (int c = 0; c <= k; c++) offsets[c] = c == k ? count : chunk_offset(count, k, c);
    return offsets;
}

}  // namespace

void Communicator::all_reduce(float *data, size_t count, const Group &g, ReduceOp reduce) {
    const std::vector<size_t> offsets = even_chunks(count, std::max(g.size(), 1));
    if (reduce == ReduceOp::Max) ring_all_reduce(data, offsets, g, [](float a, float b) { return std::max(a, b); });
    else ring_all_reduce(data, offsets, g, [](float a, float b) { return a + b; });
}

void Communicator::all_reduce_f64(double *data, size_t count, const Group &g) {
    ring_all_reduce(data, even_chunks(count, std::max(g.size(), 1)), g, [](double a, double b) { return a + b; });
}

void Communicator::all_reduce_many(const std::vector<float *> &bufs, const std::vector<size_t> &counts,
                                   const Group &g, ReduceOp reduce) {
    if (reduce == ReduceOp::Max)
        ring_all_reduce_many(bufs, counts, g, [](float a, float b) { return std::max(a, b); });
    else ring_all_reduce_many(bufs, counts, g, [](float a, float b) { return a + b; });
}

void Communicator::all_reduce_many_f64(const std::vector<double *> &bufs, const std::vector<size_t> &counts,
                                       const Group &g) {
    ring_all_reduce_many(bufs, counts, g, [](double a, double b) { return a + b; });
}

namespace {

// How two 16-bit floats combine: in f32, rounded back to the format.
template <typename Narrow, typename Widen>
auto half_combine(ReduceOp reduce, Narrow narrow, Widen widen) {
    return [=](uint16_t a, uint16_t b) {
        const float x = widen(a), y = widen(b);
        return narrow(reduce == ReduceOp::Max ? std::max(x, y) : x + y);
    };
}

}  // namespace

void Communicator::all_reduce_many_16(const std::vector<uint16_t *> &bufs, const std::vector<size_t> &counts,
                                      HalfFormat format, const Group &g, ReduceOp reduce) {
    if (format == HalfFormat::BF16) ring_all_reduce_many(bufs, counts, g, half_combine(reduce, bf16_from_float, float_from_bf16));
    else ring_all_reduce_many(bufs, counts, g, half_combine(reduce, f16_from_float, float_from_f16));
}

void Communicator::reduce_scatter_16(const uint16_t *in, uint16_t *out, const std::vector<size_t> &counts,
                                     HalfFormat format, const Group &g) {
    const auto sum = ReduceOp::Sum;
    if (format == HalfFormat::BF16) ring_reduce_scatter(in, out, counts, g, half_combine(sum, bf16_from_float, float_from_bf16));
    else ring_reduce_scatter(in, out, counts, g, half_combine(sum, f16_from_float, float_from_f16));
}

template <typename T, typename Combine>
void Communicator::ring_all_reduce_many(const std::vector<T *> &bufs, const std::vector<size_t> &counts,
                                        const Group &g, Combine combine) {
    TESSERA_CHECK(bufs.size() == counts.size(), "rank ", rank_, ": all_reduce_many got ", bufs.size(),
                  " buffers but ", counts.size(), " counts");
    const int k = std::max(g.size(), 1);
    // Chunk c of the packed buffer: chunk c of every buffer, in buffer order.
    std::vector<size_t> offsets(static_cast<size_t>(k) + 1, 0);
    for (int c = 0; c < k; c++) {
        offsets[c + 1] = offsets[c];
        for (size_t count : counts) offsets[c + 1] += chunk_size(count, k, c);
    }
    const size_t total = offsets[k];
    if (packed_.size() * sizeof(double) < total * sizeof(T)) packed_.resize((total * sizeof(T) + 7) / 8);
    T *packed = reinterpret_cast<T *>(packed_.data());
    auto move_chunks = [&](bool pack) {
        size_t at = 0;
        for (int c = 0; c < k; c++)
            for (size_t i = 0; i < bufs.size(); i++) {
                const size_t n = chunk_size(counts[i], k, c);
                T *mine = bufs[i] + chunk_offset(counts[i], k, c);
                if (n > 0) std::memcpy(pack ? packed + at : mine, pack ? mine : packed + at, n * sizeof(T));
                at += n;
            }
    };
    move_chunks(true);
    ring_all_reduce(packed, offsets, g, combine);
    move_chunks(false);
}

template <typename T, typename Combine>
void Communicator::ring_all_reduce(T *data, const std::vector<size_t> &offsets, const Group &g, Combine combine) {
    const CommOp op = CommOp::AllReduce;
    check_group(g, op);
    count_call(op);
    const int k = g.size();
    const size_t count = offsets.back();
    if (k == 1 || count == 0) return;
    TESSERA_CHECK(data != nullptr, "rank ", rank_, ": all_reduce of ", count, " ", values_name<T>(), " over ranks ",
                  g.str(), " got a null buffer");
    const int me = g.index_of(rank_);
    const int next = g.ranks[(me + 1) % k], prev = g.ranks[mod(me - 1, k)];
    auto size = [&](int c) { return offsets[c + 1] - offsets[c]; };
    size_t longest = 0;
    for (int c = 0; c < k; c++) longest = std::max(longest, size(c));
    T *incoming = reinterpret_cast<T *>(scratch(longest * sizeof(T)));
    auto at = [&](int c) { return data + offsets[c]; };
    auto bytes = [&](int c) { return size(c) * sizeof(T); };

    // Reduce-scatter: at step s pass on the partial sum of chunk me-s-1 and add
    // our values to the partial sum of chunk me-s-2; after k-1 steps chunk me is whole.
    for (int s = 0; s < k - 1; s++) {
        int sc = mod(me - s - 1, k), rc = mod(me - s - 2, k);
        step(at(sc), bytes(sc), next, incoming, bytes(rc), prev, op, g);
        this->count(op, static_cast<int64_t>(bytes(sc)));
        T *d = at(rc);
        const size_t n = size(rc);
        for (size_t i = 0; i < n; i++) d[i] = combine(incoming[i], d[i]);
    }
    // All-gather: pass finished chunks around, received straight into place.
    for (int s = 0; s < k - 1; s++) {
        int sc = mod(me - s, k), rc = mod(me - s - 1, k);
        step(at(sc), bytes(sc), next, at(rc), bytes(rc), prev, op, g);
        this->count(op, static_cast<int64_t>(bytes(sc)));
    }
}

void Communicator::reduce_scatter(const float *in, float *out, size_t count_each, const Group &g) {
    reduce_scatter(in, out, std::vector<size_t>(g.ranks.size(), count_each), g);
}

void Communicator::reduce_scatter(const float *in, float *out, const std::vector<size_t> &counts, const Group &g) {
    ring_reduce_scatter(in, out, counts, g, [](float a, float b) { return a + b; });
}

template <typename T, typename Combine>
void Communicator::ring_reduce_scatter(const T *in, T *out, const std::vector<size_t> &counts, const Group &g,
                                       Combine combine) {
    const CommOp op = CommOp::ReduceScatter;
    check_group(g, op);
    count_call(op);
    const int k = g.size();
    const int me = g.index_of(rank_);
    TESSERA_CHECK(counts.size() == static_cast<size_t>(k), "rank ", rank_, ": reduce_scatter over ranks ", g.str(),
                  " got ", counts.size(), " chunk sizes for ", k, " members");
    std::vector<size_t> offset(k + 1, 0);
    for (int j = 0; j < k; j++) offset[j + 1] = offset[j] + counts[j];
    if (offset[k] == 0) return;
    TESSERA_CHECK(in != nullptr && (out != nullptr || counts[me] == 0), "rank ", rank_, ": reduce_scatter of ",
                  offset[k], " ", values_name<T>(), " over ranks ", g.str(), " got a null buffer");
    if (k == 1) {
        if (out != in) std::memmove(out, in, counts[0] * sizeof(T));
        return;
    }
    const int next = g.ranks[(me + 1) % k], prev = g.ranks[mod(me - 1, k)];
    // Two buffers: the partial sum being sent, and the one arriving; the
    // arriving one plus our chunk becomes the next to send.
    const size_t longest = *std::max_element(counts.begin(), counts.end());
    T *outgoing = reinterpret_cast<T *>(scratch(2 * longest * sizeof(T)));
    T *incoming = outgoing + longest;
    for (int s = 0; s < k - 1; s++) {
        int sc = mod(me - s - 1, k), rc = mod(me - s - 2, k);
        const T *send_buf = s == 0 ? in + offset[sc] : outgoing;
        const size_t send_bytes = counts[sc] * sizeof(T);
        step(send_buf, send_bytes, next, incoming, counts[rc] * sizeof(T), prev, op, g);
        this->count(op, static_cast<int64_t>(send_bytes));
        T *d = s == k - 2 ? out : outgoing;  // the last step finishes chunk me
        const T *mine = in + offset[rc];
        for (size_t i = 0; i < counts[rc]; i++) d[i] = combine(incoming[i], mine[i]);
    }
}

void Communicator::all_gather(const void *in, void *out, size_t bytes_each, const Group &g) {
    const CommOp op = CommOp::AllGather;
    check_group(g, op);
    count_call(op);
    const int k = g.size();
    const int me = g.index_of(rank_);
    if (bytes_each == 0) return;
    TESSERA_CHECK(in != nullptr && out != nullptr, "rank ", rank_, ": all_gather of ", bytes_each,
                  " bytes per member over ranks ", g.str(), " got a null buffer");
    auto *o = static_cast<unsigned char *>(out);
    if (o + me * bytes_each != in) std::memmove(o + me * bytes_each, in, bytes_each);
    const int next = g.ranks[(me + 1) % k], prev = g.ranks[mod(me - 1, k)];
    for (int s = 0; s < k - 1; s++) {
        int sb = mod(me - s, k), rb = mod(me - s - 1, k);
        step(o + sb * bytes_each, bytes_each, next, o + rb * bytes_each, bytes_each, prev, op, g);
        this->count(op, static_cast<int64_t>(bytes_each));
    }
}

void Communicator::all_to_all(const void *in, void *out, size_t bytes_each, const Group &g) {
    const CommOp op = CommOp::AllToAll;
    check_group(g, op);
    count_call(op);
    const int k = g.size();
    const int me = g.index_of(rank_);
    if (bytes_each == 0) return;
    TESSERA_CHECK(in != nullptr && out != nullptr, "rank ", rank_, ": all_to_all of ", bytes_each,
                  " bytes per member over ranks ", g.str(), " got a null buffer");
    // In place would overwrite blocks that later steps still have to send.
    TESSERA_CHECK(!overlaps(in, k * bytes_each, out, k * bytes_each), "rank ", rank_, ": all_to_all over ranks ",
                  g.str(), " cannot run in place; give it separate input and output buffers");
    const auto *i = static_cast<const unsigned char *>(in);
    auto *o = static_cast<unsigned char *>(out);
    std::memcpy(o + me * bytes_each, i + me * bytes_each, bytes_each);
    // Pairwise: at step s every member sends to the one s ahead and hears from
    // the one s behind, so each step is a permutation and nobody waits on two.
    for (int s = 1; s < k; s++) {
        int to = (me + s) % k, from = mod(me - s, k);
        step(i + to * bytes_each, bytes_each, g.ranks[to], o + from * bytes_each, bytes_each, g.ranks[from], op, g);
        this->count(op, static_cast<int64_t>(bytes_each));
    }
}

void Communicator::broadcast(void *buf, size_t bytes, int root, const Group &g) {
    const CommOp op = CommOp::Broadcast;
    check_group(g, op);
    const int root_index = g.index_of(root);
    TESSERA_CHECK(root_index >= 0, "rank ", rank_, ": broadcast over ranks ", g.str(), " has root ", root,
                  ", which is not in the group; the root must be one of its members");
    count_call(op);
    const int k = g.size();
    if (k == 1 || bytes == 0) return;
    TESSERA_CHECK(buf != nullptr, "rank ", rank_, ": broadcast of ", bytes, " bytes over ranks ", g.str(),
                  " got a null buffer");
    // Binomial tree over ranks relative to the root: r hears from r minus its
    // lowest set bit, then passes on to r + m for every smaller power of two m.
    // Depth is log2(k) where a chain would be k-1.
    const int me = g.index_of(rank_);
    const int r = mod(me - root_index, k);
    auto member = [&](int rel) { return g.ranks[(rel + root_index) % k]; };
    int mask = 1;
    for (; mask < k; mask <<= 1) {
        if (r & mask) {
            step(nullptr, 0, -1, buf, bytes, member(r - mask), op, g);
            break;
        }
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (r + mask < k) {
            step(buf, bytes, member(r + mask), nullptr, 0, -1, op, g);
            this->count(op, static_cast<int64_t>(bytes));
        }
    }
}

void Communicator::barrier(const Group &g) {
    const CommOp op = CommOp::Barrier;
    check_group(g, op);
    count_call(op);
    const int k = g.size();
    const int me = g.index_of(rank_);
    // Dissemination: in round d every member signals the one d ahead and waits
    // for the one d behind. After rounds 1, 2, 4, ... < k each member has heard,
    // directly or through others, from all. The messages are empty, so a
    // barrier counts 0 bytes.
    for (int d = 1; d < k; d <<= 1) step(nullptr, 0, g.ranks[(me + d) % k], nullptr, 0, g.ranks[mod(me - d, k)], op, g);
}

}  // namespace tessera
