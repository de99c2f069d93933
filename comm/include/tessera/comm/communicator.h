// The communicator: how the ranks of a job exchange tensor bytes.
//
//   std::unique_ptr<Communicator> world = make_mpi_communicator();  // after mpi_init()
//   Group all = world->world_group();
//   world->all_reduce(grad, n, all);          // float sum, identical bits on every member
//   int64_t sent = world->counters().total(); // bytes this rank sent so far
//
// Every collective runs over a Group: an ordered list of world ranks that
// includes the caller. All members must call the same collectives in the same
// order with the same group and sizes (as with MPI). The recursion's levels are
// sub-groups: level_groups() gives, for this rank, the ranks that differ from it
// only in one level's index.
//
// Backends implement point-to-point exchange; the collectives are ring
// algorithms over it in communicator.cpp, so every byte a rank sends is counted
// where it is sent, and the reductions add in the same order on every backend.
// A backend may override a collective (NCCL does) and then counts the bytes of
// the same ring algorithm.
//
// Watchdog: every operation that waits for a peer gives up after timeout()
// seconds and throws tessera::Error naming this rank, the operation, the group
// and the peer it was waiting for. A timeout of 0 waits forever. An operation
// that failed part way leaves messages in flight, so the communicator then
// refuses every further operation (make a new one to go on).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessera {

// How an all-reduce combines: a float sum, or the largest value (softmax's
// row maximum over split classes).
enum class ReduceOp : uint8_t { Sum, Max };

// The 16-bit float formats a reduction may combine (base/half.h).
enum class HalfFormat : uint8_t { BF16, F16 };

enum class CommOp : uint8_t { AllReduce, AllGather, ReduceScatter, AllToAll, SendRecv, Broadcast, Barrier };
inline constexpr int kNumCommOps = 7;
const char *comm_op_name(CommOp op);  // "all_reduce", "all_gather", ...

// Bytes this rank sent, per operation kind.
struct CommCounters {
    std::array<int64_t, kNumCommOps> bytes{};
    std::array<int64_t, kNumCommOps> calls{};
    int64_t total() const;
};

// An ordered list of distinct world ranks; collectives use this order (ring
// order; all_gather concatenates in it; reduce_scatter's chunk j goes to ranks[j]).
struct Group {
    std::vector<int> ranks;
    int size() const { return static_cast<int>(ranks.size()); }
    int index_of(int world_rank) const;  // -1 when absent
    std::string str() const;             // "[0,1,2,3]"
    bool operator==(const Group &) const = default;
};

// The ranks that differ from `rank` only in level l's index, for every level,
// outermost first. Ranks are numbered with the outermost level most
// significant: rank = ((i_1 * k_2) + i_2) * k_3 + i_3 ... for cuts k_1, k_2, ...
// Throws tessera::Error when the cuts' product is not `world_size`.
std::vector<Group> level_groups(const std::vector<int> &cuts, int rank, int world_size);

class Communicator {
public:
    virtual ~Communicator();
    Communicator(const Communicator &) = delete;
    Communicator &operator=(const Communicator &) = delete;

    int rank() const { return rank_; }
    int size() const { return size_; }
    // Where this rank runs: its index among the ranks on its host (local_rank,
    // of local_size), and its host's index among the job's hosts (node, of
    // num_nodes; hosts numbered in the order of their lowest world rank). A
    // rank picks its GPU and its share of the host's cores by these. The MPI
    // backend asks MPI which ranks share memory (MPI_COMM_TYPE_SHARED), so no
    // launcher's variables are trusted; the in-process backend is one host.
    struct Placement {
        int local_rank = 0, local_size = 1, node = 0, num_nodes = 1;
    };
    const Placement &placement() const { return placement_; }
    int local_rank() const { return placement_.local_rank; }
    int local_size() const { return placement_.local_size; }
    int node() const { return placement_.node; }
    int num_nodes() const { return placement_.num_nodes; }
    virtual const char *backend() const = 0;  // "mpi", "threads", "nccl"
    Group world_group() const;

    // Seconds an operation may wait for a peer before it throws; 0: forever.
    void set_timeout(double seconds) { timeout_s_ = seconds; }
    double timeout() const { return timeout_s_; }

    // Point to point. Blocking; `peer` is a world rank, never this rank.
    // Counted under CommOp::SendRecv: the bytes sent (a recv counts none).
    void send(const void *buf, size_t bytes, int peer);
    void recv(void *buf, size_t bytes, int peer);
    // Sends to `dst` and receives from `src` at once (no deadlock in a ring).
    void sendrecv(const void *send_buf, size_t send_bytes, int dst, void *recv_buf, size_t recv_bytes, int src);

    // Collectives over `g`, which must contain this rank. Reductions are float sums
    // (all_reduce may take the maximum instead).
    //
    // Bytes counted by member m of k (c_j: chunk j of count cut into k, the
    // first count % k chunks one element longer):
    //   all_reduce      4 * (2*count - c_m - c_(m+1)%k)    ~ 2(k-1)/k of the buffer
    //   reduce_scatter  4 * (sum of counts - counts[m])  = 4 (k-1) count_each when equal
    //   all_gather, all_to_all   (k-1) * bytes_each
    // and nothing when k == 1.

    // In place; every member ends with identical bits.
    virtual void all_reduce(float *data, size_t count, const Group &g, ReduceOp reduce = ReduceOp::Sum);
    // Several buffers of host memory all-reduced as one (a fused bucket): one
    // call and one ring, whose chunk c holds chunk c of every buffer (each cut
    // as all_reduce cuts it alone). So every element is combined in the order
    // all_reduce gives it, and the bits equal one all_reduce per buffer; the
    // bytes counted are their sum. The same ring on every backend.
    void all_reduce_many(const std::vector<float *> &bufs, const std::vector<size_t> &counts, const Group &g,
                         ReduceOp reduce = ReduceOp::Sum);
    void all_reduce_many_f64(const std::vector<double *> &bufs, const std::vector<size_t> &counts, const Group &g);
    // A sum of doubles (batch norm's statistics), the same ring on every
    // backend, through host memory; counted like all_reduce with 8-byte elements.
    void all_reduce_f64(double *data, size_t count, const Group &g);
    // The same all-reduce of device memory, issued onto `cuda_stream` (a
    // cudaStream_t) without waiting: it runs after the stream's earlier work,
    // and later work on the stream sees its result. Counted like all_reduce
    // when issued. Returns false, doing nothing, when this backend cannot (only
    // NCCL can); the caller then stages through host memory. Its watchdog runs
    // on a thread of its own: past timeout() from when the stream reaches the
    // all-reduce, or on an asynchronous error, it reports the error against the
    // stream (watchdog.h: the device rethrows it when it synchronizes the
    // stream), aborts the all-reduce so the stream drains, and breaks this
    // communicator.
    virtual bool enqueue_all_reduce(float *data, size_t count, const Group &g, void *cuda_stream) { return false; }
    // Every other collective of device memory, on a stream in the same way
    // (false, doing nothing, where the backend cannot), each counted like its
    // host form when issued: an all-reduce of doubles (a sum), of floats by
    // maximum, the reduce-scatter of unequal chunks, and a batch of
    // point-to-point transfers that run together (a redistribution's;
    // counted under SendRecv, the bytes sent). A batch's transfers with one
    // peer match that peer's in issue order.
    struct Transfer {
        int peer = -1;  // a world rank, never this rank
        void *data = nullptr;
        size_t bytes = 0;
    };
    virtual bool enqueue_all_reduce_f64(double *data, size_t count, const Group &g, void *cuda_stream) {
        return false;
    }
    virtual bool enqueue_all_reduce_max(float *data, size_t count, const Group &g, void *cuda_stream) {
        return false;
    }
    virtual bool enqueue_reduce_scatter(const float *in, float *out, const std::vector<size_t> &counts,
                                        const Group &g, void *cuda_stream) {
        return false;
    }
    virtual bool enqueue_exchange(const std::vector<Transfer> &sends, const std::vector<Transfer> &recvs,
                                  void *cuda_stream) {
        return false;
    }
    // A bucket's all-reduces (fused_collectives: several gradients, one
    // node) issued together on the stream: floats by `reduce`, or doubles
    // (sums) when `f64`. NCCL runs them as one group (ncclGroupStart/End:
    // one launch). Counted as one call with the members' bytes, as
    // all_reduce_many counts. False, doing nothing, where the backend cannot;
    // the caller then issues one all-reduce per member.
    virtual bool enqueue_all_reduce_many(const std::vector<void *> &bufs, const std::vector<size_t> &counts, bool f64,
                                         ReduceOp reduce, const Group &g, void *cuda_stream) {
        return false;
    }
    // Makes whatever `g` needs before its first collective (NCCL: the
    // sub-group's communicator, collectively over its members). Call it on
    // every member, in the same order, before the first step: no collective
    // may be in flight, since making one may use the bootstrap communicator
    // (MPI) from this thread. Collectives on a group not prepared fail.
    virtual void prepare_group(const Group &g) {}
    // `out` receives g.size() blocks of `bytes_each`, in group order; `in` is this rank's.
    virtual void all_gather(const void *in, void *out, size_t bytes_each, const Group &g);
    // all_reduce_many and reduce_scatter of 16-bit floats (bf16 or fp16, as
    // `format` says): the same rings in the same order, each combination done
    // in f32 and rounded back to `format` (as NCCL sums bf16), so every member
    // ends with identical bits. Counted with 2-byte elements: half of what the
    // same count of floats sends.
    void all_reduce_many_16(const std::vector<uint16_t *> &bufs, const std::vector<size_t> &counts,
                            HalfFormat format, const Group &g, ReduceOp reduce = ReduceOp::Sum);
    void reduce_scatter_16(const uint16_t *in, uint16_t *out, const std::vector<size_t> &counts, HalfFormat format,
                           const Group &g);
    // `in` holds g.size() chunks of `count_each` floats; member j receives the sum of chunk j.
    void reduce_scatter(const float *in, float *out, size_t count_each, const Group &g);
    // Chunks of unequal sizes: chunk j holds counts[j] floats, packed in group
    // order in `in` (every member passes the same counts); member j's `out`
    // receives counts[j] floats. A ring: each step passes one chunk's partial sum on.
    virtual void reduce_scatter(const float *in, float *out, const std::vector<size_t> &counts, const Group &g);
    // `in` holds g.size() blocks of `bytes_each`; block j goes to member j, and
    // `out`'s block i comes from member i.
    virtual void all_to_all(const void *in, void *out, size_t bytes_each, const Group &g);
    // `root` is a world rank in `g`. A binomial tree: each member counts the
    // bytes it passes on (in all, (g.size()-1) * bytes).
    virtual void broadcast(void *buf, size_t bytes, int root, const Group &g);
    // Its messages are empty, so it counts 0 bytes (and one call).
    virtual void barrier(const Group &g);

    const CommCounters &counters() const { return counters_; }
    void reset_counters() { counters_ = CommCounters{}; }

protected:
    // One host until a backend says otherwise (set_placement).
    Communicator(int rank, int size) : rank_(rank), size_(size), placement_{rank, size, 0, 1} {}
    void set_placement(const Placement &p) { placement_ = p; }

    // The backend's exchange: send `send_bytes` to `dst` (if dst >= 0) and
    // receive `recv_bytes` from `src` (if src >= 0), both at once; it returns
    // when both are complete. It throws tessera::Error after timeout() seconds,
    // naming `op`, `g` and the peer it was waiting for (comm_timeout_message).
    virtual void exchange(const void *send_buf, size_t send_bytes, int dst, void *recv_buf,
                          size_t recv_bytes, int src, CommOp op, const Group &g) = 0;

    // "rank 2: all_reduce over ranks [0,1,2,3] timed out after 30 s waiting for rank 1";
    // a peer of -1 (unknown, as with NCCL) reads "waiting for the other members".
    std::string comm_timeout_message(CommOp op, const Group &g, int peer) const;
    void count(CommOp op, int64_t bytes) { counters_.bytes[static_cast<int>(op)] += bytes; }
    void count_call(CommOp op) { counters_.calls[static_cast<int>(op)] += 1; }
    // Throws tessera::Error unless `g` is valid for this communicator and holds this rank,
    // or when an earlier operation failed (see mark_broken).
    void check_group(const Group &g, CommOp op) const;

    // Bytes member `me` of a `k`-member group sends in this file's algorithm for
    // `op`; `n` is the count of floats (all_reduce; reduce_scatter: per chunk) or
    // of bytes (all_gather and all_to_all: per block; broadcast: the buffer).
    // A backend that overrides a collective counts these, so the counters do not
    // depend on the backend.
    static int64_t algorithm_bytes(CommOp op, size_t n, int k, int me, int root_index = 0);
    // The ring reduce-scatter's bytes for chunks of unequal sizes: every chunk but member me's.
    static int64_t reduce_scatter_bytes(const std::vector<size_t> &counts, int me);

    // An operation that failed part way (a timeout, a size mismatch) leaves
    // messages in flight, so the members' message streams are out of step and a
    // later operation could match the wrong message. After this call every
    // operation throws, quoting `why`; make a new communicator to go on.
    void mark_broken(const std::string &why);

private:
    // exchange(), marking this communicator broken when it throws.
    void step(const void *send_buf, size_t send_bytes, int dst, void *recv_buf, size_t recv_bytes,
              int src, CommOp op, const Group &g);
    std::byte *scratch(size_t bytes);  // grows once, then reused: no allocation per call
    // The ring all-reduce of all_reduce and all_reduce_f64: `combine(incoming, mine)`.
    // `offsets` (g.size() + 1 of them): where each ring chunk of `data` starts.
    template <typename T, typename Combine>
    void ring_all_reduce(T *data, const std::vector<size_t> &offsets, const Group &g, Combine combine);
    // The ring reduce-scatter of chunks `counts` packed in `in`: `combine(incoming, mine)`.
    template <typename T, typename Combine>
    void ring_reduce_scatter(const T *in, T *out, const std::vector<size_t> &counts, const Group &g,
                             Combine combine);
    // all_reduce_many's packing around ring_all_reduce.
    template <typename T, typename Combine>
    void ring_all_reduce_many(const std::vector<T *> &bufs, const std::vector<size_t> &counts, const Group &g,
                              Combine combine);

    int rank_, size_;
    Placement placement_;
    double timeout_s_ = 0;
    CommCounters counters_;
    std::vector<double> scratch_;  // 8-byte aligned for every element type
    std::vector<double> packed_;  // all_reduce_many's chunks, grown once
    mutable std::vector<unsigned char> seen_;  // check_group's duplicate test, sized once
    std::string broken_;                       // why the communicator is unusable; empty: usable
};

// In-process backend for unit tests: `n` communicators that share mailboxes.
// Use each from its own thread.
std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int n);

// MPI backend (OpenMPI). mpi_init() initialises MPI once per process (asking
// for thread support that lets the executor's comm stream call it); both
// functions throw tessera::Error when the build has no MPI. mpi_abort() ends
// the whole job (every rank) with `code`, after the caller has printed why.
bool mpi_available();  // built with MPI
void mpi_init(int *argc, char ***argv);
void mpi_finalize();
[[noreturn]] void mpi_abort(int code);
// Whether the launcher started this process as one of several: launcher.h.
std::unique_ptr<Communicator> make_mpi_communicator();
// MPI_Get_library_version's first line ("Open MPI v4.1.4, package: ..."), or
// "" without MPI. Needs no mpi_init().
std::string mpi_library_version();

// NCCL backend for GPU buffers, built when CUDA and NCCL are found. It needs a
// bootstrap communicator (MPI) to share its unique id. Buffers passed to it are
// device pointers.
//
// `rank_per_host` is a testing mode for several ranks on one GPU, never the
// default. NCCL refuses two ranks that share a host hash and a GPU, and takes
// the host hash from NCCL_HOSTID when that is set. This mode gives each rank
// its own NCCL_HOSTID before the first NCCL call, so NCCL treats each rank as
// a host of its own and connects them through its socket transport over
// loopback (NCCL_SOCKET_IFNAME=lo, NCCL_NET=Socket, P2P and SHM off, unless
// the environment sets them). Collectives take milliseconds, since the ranks
// time-slice the GPU, but it is real NCCL: set-up, groups, every collective,
// grouped sends and the watchdog's abort.
bool nccl_available();
std::string nccl_version();  // "2.27.3", or "" without NCCL
std::unique_ptr<Communicator> make_nccl_communicator(Communicator &bootstrap, int cuda_device,
                                                     bool rank_per_host = false);

}  // namespace tessera
