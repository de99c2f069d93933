// The NCCL communicator's class, shared by its two sources: nccl.cpp (set-up
// and the collectives; the design is described there) and nccl_watchdog.cpp
// (the thread that watches the collectives issued onto streams). Built only
// with NCCL (TESSERA_HAVE_NCCL); nccl_stub.cpp stands in otherwise.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include "tessera/comm/communicator.h"
#include "tessera/comm/watchdog.h"
#include "tessera/error.h"

namespace tessera::nccl_detail {

inline std::string host_name() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0) return "unknown host";
    return buf;
}

inline std::string nccl_error_text(ncclResult_t r) {
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
inline ncclResult_t reduce_scatter_call(const float *in, float *out, const std::vector<size_t> &counts, ncclComm_t comm,
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
inline ncclResult_t exchange_call(const std::vector<Communicator::Transfer> &sends,
                                  const std::vector<Communicator::Transfer> &recvs, ncclComm_t comm,
                                  cudaStream_t stream) {
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

}  // namespace tessera::nccl_detail
