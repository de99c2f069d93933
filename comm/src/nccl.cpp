// The NCCL backend: collectives on GPU buffers (device pointers), built only
// when CUDA and NCCL are found (TESSERA_HAVE_NCCL); otherwise a stub that says so.
//
// Set-up: rank 0 of the bootstrap communicator (MPI) makes an ncclUniqueId and
// broadcasts it over the bootstrap; every rank then joins with
// ncclCommInitRankConfig. Sub-groups get their own ncclComm when the executor
// prepares a program (prepare_group: before the first step, never while
// collectives are in flight), or else on first use, the same way over the
// group's members only (the group's first rank makes the id,
// and its NCCL ranks follow the group's order, so all_gather and
// reduce_scatter use group order). ncclCommSplit would be cheaper but is
// collective over the whole parent communicator, and a group's collective is
// called only by its members.
//
// Every ncclComm is non-blocking (ncclConfig_t::blocking = 0): no NCCL call
// waits for a peer on the host. A call that answers ncclInProgress (joining,
// connecting on first use, a group's end) is polled with
// ncclCommGetAsyncError until NCCL has finished it, under the watchdog's
// deadline, so joining and connecting have a watchdog too, and the NCCL lock
// below is never held across a wait for a peer.
//
// The synchronous operations are enqueued on one dedicated CUDA stream and
// waited for by polling cudaStreamQuery, so the watchdog can fire: past the
// deadline the NCCL communicator is aborted (ncclCommAbort ends its kernels)
// and the operation throws. NCCL cannot say which peer is late, so the message
// says "waiting for the other members". Asynchronous NCCL errors (a peer died,
// a network error) are turned into errors the same way.
//
// The enqueue_ operations (all-reduces of floats and doubles, reduce-scatters,
// batches of sends and receives) issue onto the caller's stream and return at once, so
// nobody waits there. A watchdog thread does instead (StreamWatchdog below):
// it watches each such all-reduce through two events recorded around it, from
// when the stream reaches it, and on a timeout or an asynchronous error reports
// the error against the stream (watchdog.h), then aborts the communicator so
// the stream drains; the device rethrows the error when it synchronizes the
// stream, and this communicator refuses every later operation.
//
// Counters hold the bytes of communicator.cpp's ring and tree algorithms
// (algorithm_bytes), not what NCCL's own algorithm moves, so they agree with
// the other backends and with the planner. The sums are NCCL's: identical on
// every member, but not in the ring order of the host backends.
//
// Limits: the bootstrap must outlive this communicator and must not be used
// from another thread while a sub-group's communicator is being created. Size
// mismatches between members cannot be detected. NCCL refuses two ranks on one
// GPU; such runs use the MPI backend with host staging, or, for testing, the
// rank_per_host mode (communicator.h).
#include "tessera/comm/communicator.h"
#include "tessera/comm/watchdog.h"
#include "tessera/error.h"

#include <map>
#include <mutex>
#include <string>

namespace tessera {

namespace {

std::mutex &stream_errors_mutex() {
    static std::mutex m;
    return m;
}
std::map<const void *, std::string> &stream_errors() {
    static std::map<const void *, std::string> errors;
    return errors;
}

}  // namespace

void report_stream_error(const void *native_stream, const std::string &message) {
    std::lock_guard lk(stream_errors_mutex());
    stream_errors().emplace(native_stream, message);  // keeps the first
}

std::string take_stream_error(const void *native_stream) {
    std::lock_guard lk(stream_errors_mutex());
    auto it = stream_errors().find(native_stream);
    if (it == stream_errors().end()) return "";
    std::string message = std::move(it->second);
    stream_errors().erase(it);
    return message;
}

}  // namespace tessera

#ifdef TESSERA_HAVE_NCCL

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <utility>
#include <thread>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

namespace tessera {
namespace {

// How often the watchdog thread looks at the all-reduces in flight. Detection
// is this much late at worst, which is nothing next to a timeout in seconds.
constexpr auto kWatchdogPoll = std::chrono::milliseconds(1);

std::string host_name() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0) return "unknown host";
    return buf;
}

std::string nccl_error_text(ncclResult_t r) {
    const char *detail = ncclGetLastError(nullptr);
    return std::string(ncclGetErrorString(r)) + (detail && *detail ? std::string(" (") + detail + ")" : "");
}

// Resource holders: a constructor that throws half way still releases what it made.
// Destructors cannot report errors, and a failed release at teardown is not worth one.
struct Stream {
    cudaStream_t s = nullptr;
    ~Stream() {
        if (s) cudaStreamDestroy(s);
    }
};
struct DeviceFloat {
    float *p = nullptr;
    ~DeviceFloat() {
        if (p) cudaFree(p);
    }
};
// One group's NCCL communicator. `c` becomes null when it is aborted.
struct GroupComm {
    Group group;
    ncclComm_t c = nullptr;
    explicit GroupComm(Group g) : group(std::move(g)) {}
    GroupComm(const GroupComm &) = delete;
    GroupComm &operator=(const GroupComm &) = delete;
    ~GroupComm() {
        if (c) ncclCommDestroy(c);
    }
};

// Equal chunks: one ncclReduceScatter. Unequal chunks: one reduce per chunk
// to its owner, in one group call (only the owner's `out` is written).
ncclResult_t reduce_scatter_call(const float *in, float *out, const std::vector<size_t> &counts, ncclComm_t comm,
                                 cudaStream_t stream) {
    if (std::all_of(counts.begin(), counts.end(), [&](size_t n) { return n == counts[0]; }))
        return ncclReduceScatter(in, out, counts[0], ncclFloat, ncclSum, comm, stream);
    ncclResult_t rc = ncclGroupStart();
    size_t offset = 0;
    for (size_t j = 0; j < counts.size() && rc == ncclSuccess; j++) {
        rc = ncclReduce(in + offset, out, counts[j], ncclFloat, ncclSum, static_cast<int>(j), comm, stream);
        offset += counts[j];
    }
    const ncclResult_t end = ncclGroupEnd();
    return rc != ncclSuccess ? rc : end;
}

// A batch of sends and receives, in one group call so that NCCL runs them
// together whatever order the peers post theirs in.
ncclResult_t exchange_call(const std::vector<Communicator::Transfer> &sends,
                           const std::vector<Communicator::Transfer> &recvs, ncclComm_t comm, cudaStream_t stream) {
    ncclResult_t rc = ncclGroupStart();
    for (size_t i = 0; i < sends.size() && rc == ncclSuccess; i++)
        rc = ncclSend(sends[i].data, sends[i].bytes, ncclUint8, sends[i].peer, comm, stream);
    for (size_t i = 0; i < recvs.size() && rc == ncclSuccess; i++)
        rc = ncclRecv(recvs[i].data, recvs[i].bytes, ncclUint8, recvs[i].peer, comm, stream);
    const ncclResult_t end = ncclGroupEnd();
    return rc != ncclSuccess ? rc : end;
}

class NcclCommunicator final : public Communicator {
public:
    NcclCommunicator(Communicator &bootstrap, int device)
        : Communicator(bootstrap.rank(), bootstrap.size()), bootstrap_(bootstrap), device_(device),
          world_(world_group()) {
        set_timeout(bootstrap.timeout());
        set_placement(bootstrap.placement());
        use_device();
        check_cuda("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&stream_.s, cudaStreamNonBlocking));
        check_cuda("cudaMalloc", cudaMalloc(&barrier_buf_.p, sizeof(float)));
        // No operation asked for the set-up; a barrier is what it amounts to.
        join(world_, CommOp::Barrier);
    }

    ~NcclCommunicator() override { stop_watchdog(); }

    const char *backend() const override { return "nccl"; }

    void all_reduce(float *data, size_t count, const Group &g, ReduceOp reduce) override {
        const CommOp op = CommOp::AllReduce;
        check_usable(g, op);
        count_call(op);
        if (g.size() == 1 || count == 0) return;
        GroupComm &c = begin(g, op);
        const ncclRedOp_t red = reduce == ReduceOp::Max ? ncclMax : ncclSum;
        issue(c, "ncclAllReduce", op,
              [&](ncclComm_t comm) { return ncclAllReduce(data, data, count, ncclFloat, red, comm, stream_.s); });
        wait(c, op);
        this->count(op, algorithm_bytes(op, count, g.size(), g.index_of(rank())));
    }

    bool enqueue_all_reduce(float *data, size_t count, const Group &g, void *cuda_stream) override {
        return enqueue_reduction(data, count, ncclFloat, ncclSum, g, cuda_stream);
    }
    bool enqueue_all_reduce_f64(double *data, size_t count, const Group &g, void *cuda_stream) override {
        return enqueue_reduction(data, count, ncclDouble, ncclSum, g, cuda_stream);
    }
    bool enqueue_all_reduce_max(float *data, size_t count, const Group &g, void *cuda_stream) override {
        return enqueue_reduction(data, count, ncclFloat, ncclMax, g, cuda_stream);
    }
    bool enqueue_all_reduce_many(const std::vector<void *> &bufs, const std::vector<size_t> &counts, bool f64,
                                 ReduceOp reduce, const Group &g, void *cuda_stream) override;
    bool enqueue_reduce_scatter(const float *in, float *out, const std::vector<size_t> &counts, const Group &g,
                                void *cuda_stream) override;
    bool enqueue_exchange(const std::vector<Transfer> &sends, const std::vector<Transfer> &recvs,
                          void *cuda_stream) override;
    // The group's NCCL communicator, made now (collectively over its members).
    void prepare_group(const Group &g) override {
        check_usable(g, CommOp::AllReduce);
        begin(g, CommOp::AllReduce);
    }

    void all_gather(const void *in, void *out, size_t bytes_each, const Group &g) override {
        const CommOp op = CommOp::AllGather;
        check_usable(g, op);
        count_call(op);
        if (bytes_each == 0) return;
        GroupComm &c = begin(g, op);
        issue(c, "ncclAllGather", op,
              [&](ncclComm_t comm) { return ncclAllGather(in, out, bytes_each, ncclUint8, comm, stream_.s); });
        wait(c, op);
        this->count(op, algorithm_bytes(op, bytes_each, g.size(), g.index_of(rank())));
    }

    using Communicator::reduce_scatter;
    void reduce_scatter(const float *in, float *out, const std::vector<size_t> &counts, const Group &g) override;

    void all_to_all(const void *in, void *out, size_t bytes_each, const Group &g) override;

    void broadcast(void *buf, size_t bytes, int root, const Group &g) override {
        const CommOp op = CommOp::Broadcast;
        check_usable(g, op);
        const int root_index = g.index_of(root);
        TESSERA_CHECK(root_index >= 0, "rank ", rank(), ": broadcast over ranks ", g.str(), " has root ", root,
                      ", which is not in the group; the root must be one of its members");
        count_call(op);
        if (g.size() == 1 || bytes == 0) return;
        GroupComm &c = begin(g, op);
        issue(c, "ncclBroadcast", op, [&](ncclComm_t comm) {
            return ncclBroadcast(buf, buf, bytes, ncclUint8, root_index, comm, stream_.s);
        });
        wait(c, op);
        this->count(op, algorithm_bytes(op, bytes, g.size(), g.index_of(rank()), root_index));
    }

    // NCCL has no barrier; a one-float all-reduce of scratch is one. Counted as 0 bytes, like the host barrier.
    void barrier(const Group &g) override {
        const CommOp op = CommOp::Barrier;
        check_usable(g, op);
        count_call(op);
        if (g.size() == 1) return;
        GroupComm &c = begin(g, op);
        issue(c, "ncclAllReduce", op, [&](ncclComm_t comm) {
            return ncclAllReduce(barrier_buf_.p, barrier_buf_.p, 1, ncclFloat, ncclSum, comm, stream_.s);
        });
        wait(c, op);
    }

protected:
    // Point to point over the world communicator, whose NCCL ranks are the world ranks.
    void exchange(const void *send_buf, size_t send_bytes, int dst, void *recv_buf, size_t recv_bytes, int src,
                  CommOp op, const Group &g) override {
        check_usable(g, op);
        use_device();
        std::vector<Transfer> sends, recvs;
        if (dst >= 0) sends.push_back({dst, const_cast<void *>(send_buf), send_bytes});
        if (src >= 0) recvs.push_back({src, recv_buf, recv_bytes});
        issue(world_, "ncclSend/ncclRecv", op,
              [&](ncclComm_t comm) { return exchange_call(sends, recvs, comm, stream_.s); });
        wait(world_, op);
    }

private:
    // One all-reduce issued onto a caller's stream: events recorded just
    // before and just after it, and its deadline.
    struct InFlight {
        GroupComm *comm;
        const void *stream;
        cudaEvent_t start, end;
        CommOp op;
        DeadlineWatch watch;
    };

    bool enqueue_reduction(void *data, size_t count, ncclDataType_t type, ncclRedOp_t red, const Group &g,
                           void *cuda_stream);

    // The calling thread may not be the one that made this communicator, and
    // the current CUDA device is per thread.
    void use_device() { check_cuda("cudaSetDevice", cudaSetDevice(device_)); }

    // check_group, after taking over a failure the watchdog thread found (the
    // communicator is then broken, and check_group says so, quoting it).
    void check_usable(const Group &g, CommOp op) {
        std::string found;
        {
            std::lock_guard lk(watch_m_);
            found = watchdog_failure_;
        }
        if (!found.empty()) mark_broken(found);
        check_group(g, op);
    }

    GroupComm &begin(const Group &g, CommOp op) {
        use_device();
        return comm_for(g, op);
    }

    // The NCCL communicator for `g`: the world's for the world in rank order,
    // otherwise the group's own, made on first use.
    GroupComm &comm_for(const Group &g, CommOp op) {
        if (g == world_.group) return world_;
        {
            std::lock_guard lk(nccl_m_);
            auto it = groups_.find(g.ranks);
            if (it != groups_.end()) return *it->second;
        }
        auto made = std::make_unique<GroupComm>(g);
        join(*made, op);
        std::lock_guard lk(nccl_m_);
        return *groups_.emplace(g.ranks, std::move(made)).first->second;
    }

    // Every member of `c.group` calls this at the same point of its sequence
    // of operations; `op` is the operation that needs the communicator.
    void join(GroupComm &c, CommOp op) {
        const Group &g = c.group;
        ncclUniqueId id{};
        if (rank() == g.ranks[0]) check_nccl("ncclGetUniqueId", ncclGetUniqueId(&id));
        bootstrap_.broadcast(&id, sizeof id, g.ranks[0], g);
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclResult_t rc;
        {
            std::lock_guard lk(nccl_m_);
            rc = ncclCommInitRankConfig(&c.c, g.size(), id, g.index_of(rank()), &config);
        }
        if (rc == ncclInProgress) settle(c, "ncclCommInitRankConfig", op, " (setting up the NCCL communicator)");
        else check_nccl("ncclCommInitRankConfig", rc);
    }

    // Makes one call of `c` (or one group of calls) under the NCCL lock, then
    // waits, unlocked, until NCCL has finished issuing it (ncclInProgress).
    template <class Call>
    void issue(GroupComm &c, const char *what, CommOp op, Call call) {
        ncclResult_t rc;
        {
            std::lock_guard lk(nccl_m_);
            rc = call(usable(c, op));
        }
        if (rc == ncclInProgress) settle(c, what, op, "");
        else check_nccl(what, rc);
    }

    // issue() onto the caller's `stream`, between two events, handed to the
    // watchdog thread: returns without waiting (every enqueue_ operation).
    template <class Call>
    void issue_watched(GroupComm &c, const char *what, CommOp op, cudaStream_t stream, Call call) {
        const auto [start, end] = spare_events();
        check_cuda("cudaEventRecord", cudaEventRecord(start, stream));
        issue(c, what, op, call);
        check_cuda("cudaEventRecord", cudaEventRecord(end, stream));
        watch(InFlight{&c, stream, start, end, op, DeadlineWatch(timeout())});
    }

    ncclComm_t usable(const GroupComm &c, CommOp op) {
        TESSERA_CHECK(c.c != nullptr, "rank ", rank(), ": ", comm_op_name(op), " over ranks ", c.group.str(),
                      ": this group's NCCL communicator was aborted after an earlier failure");
        return c.c;
    }

    // ncclCommGetAsyncError of `c` into `state`; false when it reports an
    // error (or `c` was aborted meanwhile).
    bool poll_async(const GroupComm &c, ncclResult_t &state) {
        std::lock_guard lk(nccl_m_);
        return async_ok(c, state);
    }
    // The same, with the NCCL lock held.
    static bool async_ok(const GroupComm &c, ncclResult_t &state) {
        if (c.c == nullptr) {
            state = ncclInvalidUsage;
            return false;
        }
        const ncclResult_t rc = ncclCommGetAsyncError(c.c, &state);
        if (rc != ncclSuccess) state = rc;
        return state == ncclSuccess || state == ncclInProgress;
    }

    // Waits until `c` has no call in progress (its state leaves ncclInProgress).
    void settle(GroupComm &c, const char *what, CommOp op, const char *context) {
        ncclResult_t state = ncclInProgress;
        const WatchVerdict v = watch_until_settled(
            [&] {
                WatchPoll p;
                p.started = true;
                p.failed = !poll_async(c, state);
                p.done = !p.failed && state == ncclSuccess;
                return p;
            },
            timeout());
        if (v != WatchVerdict::Done) give_up(c, v, what, state, op, context);
    }

    // Waits for the dedicated stream, watching `c` for asynchronous errors.
    void wait(GroupComm &c, CommOp op) {
        ncclResult_t state = ncclSuccess;
        cudaError_t stream_state = cudaSuccess;
        const WatchVerdict v = watch_until_settled(
            [&] {
                WatchPoll p;
                p.started = true;
                stream_state = cudaStreamQuery(stream_.s);
                p.done = stream_state != cudaErrorNotReady;
                if (!p.done) p.failed = !poll_async(c, state);
                return p;
            },
            timeout());
        check_cuda("cudaStreamQuery", stream_state == cudaErrorNotReady ? cudaSuccess : stream_state);
        if (v != WatchVerdict::Done) give_up(c, v, "ncclCommGetAsyncError", state, op, "");
    }

    // Ends a wait that failed or timed out: aborts `c` (ending its kernels, so
    // the stream drains), marks this communicator broken and throws. When the
    // watchdog thread aborted `c` first, its error is the one to report.
    [[noreturn]] void give_up(GroupComm &c, WatchVerdict v, const char *what, ncclResult_t state, CommOp op,
                              const char *context) {
        bool aborted_before;
        {
            std::lock_guard lk(nccl_m_);
            aborted_before = c.c == nullptr;
            abort(c);
        }
        std::string message;
        if (aborted_before) {
            std::lock_guard lk(watch_m_);
            message = watchdog_failure_;
        }
        if (message.empty())
            message = v == WatchVerdict::TimedOut ? comm_timeout_message(op, c.group, -1) + context
                                                  : failure_message(what, nccl_error_text(state));
        mark_broken(message);
        fail(message);
    }

    // With the NCCL lock held. Ends `c`'s kernels and forgets the handle.
    void abort(GroupComm &c) {
        if (c.c) ncclCommAbort(c.c);
        c.c = nullptr;
    }

    void check_cuda(const char *call, cudaError_t e) {
        if (e == cudaSuccess) return;
        failed(call, cudaGetErrorString(e));
    }
    void check_nccl(const char *call, ncclResult_t r) {
        if (r == ncclSuccess) return;
        failed(call, nccl_error_text(r));
    }
    std::string failure_message(const char *call, const std::string &why) const {
        return detail::concat("rank ", rank(), " on ", host_name(), ": ", call, " failed: ", why);
    }
    [[noreturn]] void failed(const char *call, const std::string &why) {
        std::string message = failure_message(call, why);
        mark_broken(message);
        fail(message);
    }

    // ---- the watchdog of enqueue_all_reduce (defined below) ----
    std::pair<cudaEvent_t, cudaEvent_t> spare_events();
    void watch(InFlight f);
    void watchdog_loop();
    bool poll_in_flight();
    WatchPoll poll(const InFlight &f, ncclResult_t &state);
    void fire(const InFlight &f, WatchVerdict v, ncclResult_t state);
    void forget(size_t i);
    void stop_watchdog();

    Communicator &bootstrap_;
    int device_;
    // Declared before the communicators, so destroyed after them.
    Stream stream_;
    DeviceFloat barrier_buf_;
    // Guards every NCCL call and the handles in world_ and groups_: the
    // caller's thread and the watchdog thread both use them. Held only for
    // calls that return at once (the communicators are non-blocking), never
    // across a wait, and never taken before watch_m_.
    std::mutex nccl_m_;
    GroupComm world_;
    std::map<std::vector<int>, std::unique_ptr<GroupComm>> groups_;

    // The watchdog thread's state, under watch_m_ (taken before nccl_m_).
    std::mutex watch_m_;
    std::condition_variable watch_cv_;
    std::vector<InFlight> in_flight_;
    std::vector<cudaEvent_t> events_, spare_;  // every event made; those free for reuse
    std::string watchdog_failure_;             // the first error it found
    bool stopping_ = false;
    std::thread watchdog_;
};

void NcclCommunicator::reduce_scatter(const float *in, float *out, const std::vector<size_t> &counts,
                                      const Group &g) {
    const CommOp op = CommOp::ReduceScatter;
    check_usable(g, op);
    count_call(op);
    const int k = g.size(), me = g.index_of(rank());
    TESSERA_CHECK(counts.size() == static_cast<size_t>(k), "rank ", rank(), ": reduce_scatter over ranks ", g.str(),
                  " got ", counts.size(), " chunk sizes for ", k, " members");
    size_t total = 0;
    for (size_t c : counts) total += c;
    if (total == 0) return;
    GroupComm &c = begin(g, op);
    issue(c, "ncclReduceScatter", op,
          [&](ncclComm_t comm) { return reduce_scatter_call(in, out, counts, comm, stream_.s); });
    wait(c, op);
    this->count(op, reduce_scatter_bytes(counts, me));
}

void NcclCommunicator::all_to_all(const void *in, void *out, size_t bytes_each, const Group &g) {
    const CommOp op = CommOp::AllToAll;
    check_usable(g, op);
    count_call(op);
    if (bytes_each == 0) return;
    const int k = g.size(), me = g.index_of(rank());
    const auto *i = static_cast<const unsigned char *>(in);
    auto *o = static_cast<unsigned char *>(out);
    const size_t total = k * bytes_each;
    TESSERA_CHECK(i + total <= o || o + total <= i, "rank ", rank(), ": all_to_all over ranks ", g.str(),
                  " cannot run in place; give it separate input and output buffers");
    GroupComm &c = begin(g, op);
    check_cuda("cudaMemcpyAsync", cudaMemcpyAsync(o + me * bytes_each, i + me * bytes_each, bytes_each,
                                                  cudaMemcpyDeviceToDevice, stream_.s));
    if (k > 1) {
        // One group call, so NCCL schedules all the pairs at once without deadlock.
        issue(c, "ncclSend/ncclRecv", op, [&](ncclComm_t comm) {
            ncclResult_t rc = ncclGroupStart();
            for (int j = 0; j < k && rc == ncclSuccess; j++) {
                if (j == me) continue;
                rc = ncclSend(i + j * bytes_each, bytes_each, ncclUint8, j, comm, stream_.s);
                if (rc == ncclSuccess) rc = ncclRecv(o + j * bytes_each, bytes_each, ncclUint8, j, comm, stream_.s);
            }
            const ncclResult_t end = ncclGroupEnd();
            return rc != ncclSuccess ? rc : end;
        });
    }
    wait(c, op);
    this->count(op, algorithm_bytes(op, bytes_each, k, me));
}

// Issued onto the caller's stream and not waited for: the watchdog thread
// watches it, so the caller's thread and its stream go on at once.
// An all-reduce in place on the caller's stream, watched; counted like the
// host ring with elements of `type`'s size.
bool NcclCommunicator::enqueue_reduction(void *data, size_t count, ncclDataType_t type, ncclRedOp_t red,
                                         const Group &g, void *cuda_stream) {
    const CommOp op = CommOp::AllReduce;
    check_usable(g, op);
    count_call(op);
    if (g.size() == 1 || count == 0) return true;
    auto stream = static_cast<cudaStream_t>(cuda_stream);
    GroupComm &c = begin(g, op);
    issue_watched(c, "ncclAllReduce", op, stream,
                  [&](ncclComm_t comm) { return ncclAllReduce(data, data, count, type, red, comm, stream); });
    const int64_t ring = algorithm_bytes(op, count, g.size(), g.index_of(rank()));
    this->count(op, type == ncclDouble ? 2 * ring : ring);
    return true;
}

bool NcclCommunicator::enqueue_all_reduce_many(const std::vector<void *> &bufs, const std::vector<size_t> &counts,
                                               bool f64, ReduceOp reduce, const Group &g, void *cuda_stream) {
    const CommOp op = CommOp::AllReduce;
    check_usable(g, op);
    count_call(op);
    TESSERA_CHECK(bufs.size() == counts.size(), "rank ", rank(), ": all_reduce_many got ", bufs.size(),
                  " buffers and ", counts.size(), " counts");
    if (g.size() == 1) return true;
    auto stream = static_cast<cudaStream_t>(cuda_stream);
    const ncclDataType_t type = f64 ? ncclDouble : ncclFloat;
    const ncclRedOp_t red = reduce == ReduceOp::Max ? ncclMax : ncclSum;
    GroupComm &c = begin(g, op);
    issue_watched(c, "ncclAllReduce (a group of them)", op, stream, [&](ncclComm_t comm) {
        ncclResult_t rc = ncclGroupStart();
        for (size_t m = 0; m < bufs.size() && rc == ncclSuccess; m++)
            if (counts[m] > 0) rc = ncclAllReduce(bufs[m], bufs[m], counts[m], type, red, comm, stream);
        const ncclResult_t end = ncclGroupEnd();
        return rc != ncclSuccess ? rc : end;
    });
    for (size_t n : counts) {
        const int64_t ring = algorithm_bytes(op, n, g.size(), g.index_of(rank()));
        this->count(op, f64 ? 2 * ring : ring);
    }
    return true;
}

bool NcclCommunicator::enqueue_reduce_scatter(const float *in, float *out, const std::vector<size_t> &counts,
                                              const Group &g, void *cuda_stream) {
    const CommOp op = CommOp::ReduceScatter;
    check_usable(g, op);
    count_call(op);
    TESSERA_CHECK(counts.size() == static_cast<size_t>(g.size()), "rank ", rank(), ": reduce_scatter over ranks ",
                  g.str(), " got ", counts.size(), " chunk sizes for ", g.size(), " members");
    if (g.size() == 1 || std::all_of(counts.begin(), counts.end(), [](size_t n) { return n == 0; })) return true;
    auto stream = static_cast<cudaStream_t>(cuda_stream);
    GroupComm &c = begin(g, op);
    issue_watched(c, "ncclReduceScatter", op, stream,
                  [&](ncclComm_t comm) { return reduce_scatter_call(in, out, counts, comm, stream); });
    this->count(op, reduce_scatter_bytes(counts, g.index_of(rank())));
    return true;
}

// Point to point over the world communicator, whose NCCL ranks are the world ranks.
bool NcclCommunicator::enqueue_exchange(const std::vector<Transfer> &sends, const std::vector<Transfer> &recvs,
                                        void *cuda_stream) {
    const CommOp op = CommOp::SendRecv;
    check_usable(world_.group, op);
    count_call(op);
    if (sends.empty() && recvs.empty()) return true;
    auto stream = static_cast<cudaStream_t>(cuda_stream);
    use_device();
    issue_watched(world_, "ncclSend/ncclRecv", op, stream,
                  [&](ncclComm_t comm) { return exchange_call(sends, recvs, comm, stream); });
    int64_t sent = 0;
    for (const Transfer &t : sends) sent += static_cast<int64_t>(t.bytes);
    this->count(op, sent);
    return true;
}

// Two events for one all-reduce, reused once the watchdog is done with them.
std::pair<cudaEvent_t, cudaEvent_t> NcclCommunicator::spare_events() {
    std::lock_guard lk(watch_m_);
    while (spare_.size() < 2) {
        cudaEvent_t e = nullptr;
        check_cuda("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        events_.push_back(e);
        spare_.push_back(e);
    }
    const cudaEvent_t a = spare_.back();
    spare_.pop_back();
    const cudaEvent_t b = spare_.back();
    spare_.pop_back();
    return {a, b};
}

void NcclCommunicator::watch(InFlight f) {
    {
        std::lock_guard lk(watch_m_);
        in_flight_.push_back(f);
        if (!watchdog_.joinable()) watchdog_ = std::thread([this] { watchdog_loop(); });
    }
    watch_cv_.notify_one();
}

// The watchdog thread. It never touches the streams it watches (no host
// functions, no waits on them), so it cannot slow them down: it sleeps while
// nothing is in flight, and otherwise polls every kWatchdogPoll, two
// cudaEventQuery and one ncclCommGetAsyncError per all-reduce, taking the
// NCCL lock only for that query, so an issue on the caller's thread waits at
// most that long for it.
void NcclCommunicator::watchdog_loop() {
    // Its own thread: without this, CUDA would make a context on device 0.
    const cudaError_t set = cudaSetDevice(device_);
    std::unique_lock lk(watch_m_);
    if (set != cudaSuccess) {
        // Nothing can be watched; the next operation says why.
        if (watchdog_failure_.empty()) watchdog_failure_ = failure_message("cudaSetDevice", cudaGetErrorString(set));
        return;
    }
    while (!stopping_) {
        if (in_flight_.empty()) {
            watch_cv_.wait(lk, [&] { return stopping_ || !in_flight_.empty(); });
            continue;
        }
        while (poll_in_flight()) {
        }
        watch_cv_.wait_for(lk, kWatchdogPoll);
    }
}

// One round over the all-reduces in flight, with watch_m_ held. Returns true
// when it fired, since firing forgets entries and the round starts again.
bool NcclCommunicator::poll_in_flight() {
    const auto now = DeadlineWatch::Clock::now();
    for (size_t i = 0; i < in_flight_.size();) {
        InFlight &f = in_flight_[i];
        ncclResult_t state = ncclSuccess;
        const WatchVerdict v = f.watch.update(poll(f, state), now);
        if (v == WatchVerdict::Waiting) {
            i++;
        } else if (v == WatchVerdict::Done) {
            forget(i);
        } else {
            fire(f, v, state);
            return true;
        }
    }
    return false;
}

// What one all-reduce in flight looks like now; `state` receives its
// communicator's asynchronous error.
WatchPoll NcclCommunicator::poll(const InFlight &f, ncclResult_t &state) {
    // An event query that fails for another reason than "not ready" ends the
    // watch: the device reports CUDA's errors itself when it synchronizes.
    auto reached = [](cudaEvent_t e) { return cudaEventQuery(e) != cudaErrorNotReady; };
    WatchPoll p;
    p.done = reached(f.end);
    p.started = p.done || reached(f.start);
    if (p.done) return p;
    std::lock_guard lk(nccl_m_);
    // Aborted meanwhile after a failure on the caller's thread, which
    // reported it: nothing left to watch.
    if (f.comm->c == nullptr) p.done = true;
    else p.failed = !async_ok(*f.comm, state);
    return p;
}

// Reports the error against the stream before aborting, so that it is there
// when the stream, drained by the abort, is synchronized. Then forgets every
// all-reduce of that communicator: the abort ends them all.
void NcclCommunicator::fire(const InFlight &f, WatchVerdict v, ncclResult_t state) {
    const std::string message = v == WatchVerdict::TimedOut
                                    ? comm_timeout_message(f.op, f.comm->group, -1)
                                    : failure_message("ncclCommGetAsyncError", nccl_error_text(state));
    report_stream_error(f.stream, message);
    if (watchdog_failure_.empty()) watchdog_failure_ = message;
    GroupComm *comm = f.comm;
    {
        std::lock_guard lk(nccl_m_);
        abort(*comm);
    }
    for (size_t i = in_flight_.size(); i-- > 0;)
        if (in_flight_[i].comm == comm) forget(i);
}

// Drops in_flight_[i] (with watch_m_ held); its events are free again.
void NcclCommunicator::forget(size_t i) {
    spare_.push_back(in_flight_[i].start);
    spare_.push_back(in_flight_[i].end);
    in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
}

void NcclCommunicator::stop_watchdog() {
    {
        std::lock_guard lk(watch_m_);
        stopping_ = true;
    }
    watch_cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

}  // namespace

bool nccl_available() { return true; }

std::string nccl_version() {
    int code = 0;
    if (ncclGetVersion(&code) != ncclSuccess) return "unknown (ncclGetVersion failed)";
    // NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z before 2.9, X*10000+Y*100+Z since.
    const int major = code >= 20900 ? code / 10000 : code / 1000;
    const int minor = code >= 20900 ? code / 100 % 100 : code / 100 % 10;
    return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

namespace {

// make_nccl_communicator's rank_per_host mode (communicator.h): NCCL reads
// these when it first initialises, so they are set before any NCCL call.
void treat_each_rank_as_a_host(int rank) {
    const std::string host_id = "tessera-rank-" + std::to_string(rank) + "-" + host_name();
    ::setenv("NCCL_HOSTID", host_id.c_str(), 1);
    for (const auto &[name, value] : {std::pair{"NCCL_SOCKET_IFNAME", "lo"}, std::pair{"NCCL_NET", "Socket"},
                                      std::pair{"NCCL_P2P_DISABLE", "1"}, std::pair{"NCCL_SHM_DISABLE", "1"}})
        ::setenv(name, value, 0);  // the user's own setting wins
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator &bootstrap, int cuda_device, bool rank_per_host) {
    if (rank_per_host) treat_each_rank_as_a_host(bootstrap.rank());
    int devices = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    TESSERA_CHECK(e == cudaSuccess, "rank ", bootstrap.rank(), " on ", host_name(),
                  ": make_nccl_communicator: cudaGetDeviceCount failed: ", cudaGetErrorString(e),
                  "; without a usable GPU, use the MPI communicator");
    TESSERA_CHECK(cuda_device >= 0 && cuda_device < devices, "rank ", bootstrap.rank(), " on ", host_name(),
                  ": make_nccl_communicator: CUDA device ", cuda_device, " does not exist; this host has ", devices,
                  " (0..", devices - 1, ")");
    return std::make_unique<NcclCommunicator>(bootstrap, cuda_device);
}

}  // namespace tessera

#else  // no NCCL in this build

namespace tessera {

bool nccl_available() { return false; }
std::string nccl_version() { return ""; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator &bootstrap, int, bool) {
    fail("rank ", bootstrap.rank(), ": make_nccl_communicator: built without NCCL (configure with CUDA and NCCL "
         "installed); use the MPI communicator with host buffers instead");
}

}  // namespace tessera

#endif
