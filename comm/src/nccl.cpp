// The NCCL backend: collectives on GPU buffers (device pointers), built only
// when CUDA and NCCL are found (TESSERA_HAVE_NCCL); otherwise a stub that says so.
//
// Set-up: rank 0 of the bootstrap communicator (MPI) makes an ncclUniqueId and
// broadcasts it over the bootstrap; every rank then joins with
// ncclCommInitRank. Sub-groups get their own ncclComm on first use, the same
// way over the group's members only (the group's first rank makes the id, and
// its NCCL ranks follow the group's order, so all_gather and reduce_scatter use
// group order). ncclCommSplit would be cheaper but is collective over the whole
// parent communicator, and a group's collective is called only by its members.
//
// Operations are synchronous, like the host backends': they return when the
// result is in place. The caller makes sure the buffers' producers on other
// streams have finished (exec's comm stream waits on their events first).
//
// Each operation is enqueued on one dedicated CUDA stream and then waited for
// by polling cudaStreamQuery, so the watchdog can fire: past the deadline the
// NCCL communicator is aborted (ncclCommAbort ends its kernels) and the
// operation throws. NCCL cannot say which peer is late, so the message says
// "waiting for the other members". Asynchronous NCCL errors (a peer died, a
// network error) are turned into errors the same way.
//
// Counters hold the bytes of communicator.cpp's ring and tree algorithms
// (algorithm_bytes), not what NCCL's own algorithm moves, so they agree with
// the other backends and with the planner. The sums are NCCL's: identical on
// every member, but not in the ring order of the host backends.
//
// Limits: the bootstrap must outlive this communicator and must not be used
// from another thread while a sub-group's communicator is being created. Init
// has no watchdog (ncclCommInitRank blocks until all members join). Size
// mismatches between members cannot be detected. NCCL refuses two ranks on one
// GPU; such runs use the MPI backend with host staging.
#include "tessera/comm/communicator.h"
#include "tessera/error.h"

#ifdef TESSERA_HAVE_NCCL

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

namespace tessera {
namespace {

constexpr int kPollYields = 1000;  // yields between stream queries before sleeping
constexpr auto kPollSleep = std::chrono::microseconds(20);

std::string host_name() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0) return "unknown host";
    return buf;
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
struct NcclComm {
    ncclComm_t c = nullptr;
    NcclComm() = default;
    NcclComm(const NcclComm &) = delete;
    NcclComm &operator=(const NcclComm &) = delete;
    ~NcclComm() {
        if (c) ncclCommDestroy(c);
    }
};

class NcclCommunicator final : public Communicator {
public:
    NcclCommunicator(Communicator &bootstrap, int device)
        : Communicator(bootstrap.rank(), bootstrap.size()), bootstrap_(bootstrap), device_(device) {
        set_timeout(bootstrap.timeout());
        set_placement(bootstrap.placement());
        use_device();
        check_cuda("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&stream_.s, cudaStreamNonBlocking));
        check_cuda("cudaMalloc", cudaMalloc(&barrier_buf_.p, sizeof(float)));
        join(world_, world_group());
    }

    const char *backend() const override { return "nccl"; }

    void all_reduce(float *data, size_t count, const Group &g, ReduceOp reduce) override {
        const CommOp op = CommOp::AllReduce;
        check_group(g, op);
        count_call(op);
        if (g.size() == 1 || count == 0) return;
        ncclComm_t comm = begin(g, op);
        const ncclRedOp_t red = reduce == ReduceOp::Max ? ncclMax : ncclSum;
        check_nccl("ncclAllReduce", ncclAllReduce(data, data, count, ncclFloat, red, comm, stream_.s));
        wait(comm, op, g);
        this->count(op, algorithm_bytes(op, count, g.size(), g.index_of(rank())));
    }

    bool enqueue_all_reduce(float *data, size_t count, const Group &g, void *cuda_stream) override {
        const CommOp op = CommOp::AllReduce;
        check_group(g, op);
        count_call(op);
        if (g.size() == 1 || count == 0) return true;
        ncclComm_t comm = begin(g, op);
        check_nccl("ncclAllReduce", ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm,
                                                  static_cast<cudaStream_t>(cuda_stream)));
        this->count(op, algorithm_bytes(op, count, g.size(), g.index_of(rank())));
        return true;
    }

    void all_gather(const void *in, void *out, size_t bytes_each, const Group &g) override {
        const CommOp op = CommOp::AllGather;
        check_group(g, op);
        count_call(op);
        if (bytes_each == 0) return;
        ncclComm_t comm = begin(g, op);
        check_nccl("ncclAllGather", ncclAllGather(in, out, bytes_each, ncclUint8, comm, stream_.s));
        wait(comm, op, g);
        this->count(op, algorithm_bytes(op, bytes_each, g.size(), g.index_of(rank())));
    }

    using Communicator::reduce_scatter;
    void reduce_scatter(const float *in, float *out, const std::vector<size_t> &counts, const Group &g) override {
        const CommOp op = CommOp::ReduceScatter;
        check_group(g, op);
        count_call(op);
        const int k = g.size(), me = g.index_of(rank());
        TESSERA_CHECK(counts.size() == static_cast<size_t>(k), "rank ", rank(), ": reduce_scatter over ranks ",
                      g.str(), " got ", counts.size(), " chunk sizes for ", k, " members");
        size_t total = 0;
        for (size_t c : counts) total += c;
        if (total == 0) return;
        ncclComm_t comm = begin(g, op);
        if (std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; })) {
            check_nccl("ncclReduceScatter", ncclReduceScatter(in, out, counts[0], ncclFloat, ncclSum, comm, stream_.s));
        } else {
            // Unequal chunks: one reduce per chunk to its owner, in one group call
            // (only the owner's `out` is written).
            check_nccl("ncclGroupStart", ncclGroupStart());
            size_t offset = 0;
            for (int j = 0; j < k; j++) {
                check_nccl("ncclReduce", ncclReduce(in + offset, out, counts[j], ncclFloat, ncclSum,
                                                    j, comm, stream_.s));
                offset += counts[j];
            }
            check_nccl("ncclGroupEnd", ncclGroupEnd());
        }
        wait(comm, op, g);
        this->count(op, reduce_scatter_bytes(counts, me));
    }

    void all_to_all(const void *in, void *out, size_t bytes_each, const Group &g) override {
        const CommOp op = CommOp::AllToAll;
        check_group(g, op);
        count_call(op);
        if (bytes_each == 0) return;
        const int k = g.size(), me = g.index_of(rank());
        const auto *i = static_cast<const unsigned char *>(in);
        auto *o = static_cast<unsigned char *>(out);
        const size_t total = k * bytes_each;
        TESSERA_CHECK(i + total <= o || o + total <= i, "rank ", rank(), ": all_to_all over ranks ", g.str(),
                      " cannot run in place; give it separate input and output buffers");
        ncclComm_t comm = begin(g, op);
        check_cuda("cudaMemcpyAsync", cudaMemcpyAsync(o + me * bytes_each, i + me * bytes_each, bytes_each,
                                                      cudaMemcpyDeviceToDevice, stream_.s));
        if (k > 1) {
            // One group call, so NCCL schedules all the pairs at once without deadlock.
            check_nccl("ncclGroupStart", ncclGroupStart());
            ncclResult_t rc = ncclSuccess;
            for (int j = 0; j < k && rc == ncclSuccess; j++) {
                if (j == me) continue;
                rc = ncclSend(i + j * bytes_each, bytes_each, ncclUint8, j, comm, stream_.s);
                if (rc == ncclSuccess) rc = ncclRecv(o + j * bytes_each, bytes_each, ncclUint8, j, comm, stream_.s);
            }
            ncclResult_t end = ncclGroupEnd();
            check_nccl("ncclSend/ncclRecv", rc);
            check_nccl("ncclGroupEnd", end);
        }
        wait(comm, op, g);
        this->count(op, algorithm_bytes(op, bytes_each, k, me));
    }

    void broadcast(void *buf, size_t bytes, int root, const Group &g) override {
        const CommOp op = CommOp::Broadcast;
        check_group(g, op);
        const int root_index = g.index_of(root);
        TESSERA_CHECK(root_index >= 0, "rank ", rank(), ": broadcast over ranks ", g.str(), " has root ", root,
                      ", which is not in the group; the root must be one of its members");
        count_call(op);
        if (g.size() == 1 || bytes == 0) return;
        ncclComm_t comm = begin(g, op);
        check_nccl("ncclBroadcast", ncclBroadcast(buf, buf, bytes, ncclUint8, root_index, comm, stream_.s));
        wait(comm, op, g);
        this->count(op, algorithm_bytes(op, bytes, g.size(), g.index_of(rank()), root_index));
    }

    // NCCL has no barrier; a one-float all-reduce of scratch is one. Counted as 0 bytes, like the host barrier.
    void barrier(const Group &g) override {
        const CommOp op = CommOp::Barrier;
        check_group(g, op);
        count_call(op);
        if (g.size() == 1) return;
        ncclComm_t comm = begin(g, op);
        check_nccl("ncclAllReduce",
                   ncclAllReduce(barrier_buf_.p, barrier_buf_.p, 1, ncclFloat, ncclSum, comm, stream_.s));
        wait(comm, op, g);
    }

protected:
    // Point to point over the world communicator, whose NCCL ranks are the world ranks.
    void exchange(const void *send_buf, size_t send_bytes, int dst, void *recv_buf, size_t recv_bytes, int src,
                  CommOp op, const Group &g) override {
        use_device();
        ncclComm_t comm = usable(world_, g, op);
        check_nccl("ncclGroupStart", ncclGroupStart());
        ncclResult_t rc = ncclSuccess;
        if (dst >= 0) rc = ncclSend(send_buf, send_bytes, ncclUint8, dst, comm, stream_.s);
        if (src >= 0 && rc == ncclSuccess) rc = ncclRecv(recv_buf, recv_bytes, ncclUint8, src, comm, stream_.s);
        ncclResult_t end = ncclGroupEnd();
        check_nccl("ncclSend/ncclRecv", rc);
        check_nccl("ncclGroupEnd", end);
        wait(comm, op, g);
    }

private:
    // The calling thread may not be the one that made this communicator, and
    // the current CUDA device is per thread.
    void use_device() { check_cuda("cudaSetDevice", cudaSetDevice(device_)); }

    ncclComm_t begin(const Group &g, CommOp op) {
        use_device();
        return comm_for(g, op);
    }

    // The NCCL communicator for `g`: the world's for the world in rank order,
    // otherwise the group's own, made on first use.
    ncclComm_t comm_for(const Group &g, CommOp op) {
        bool is_world = g.size() == size();
        for (int i = 0; is_world && i < g.size(); i++) is_world = g.ranks[i] == i;
        if (is_world) return usable(world_, g, op);
        auto it = groups_.find(g.ranks);
        if (it == groups_.end()) {
            auto made = std::make_unique<NcclComm>();
            join(*made, g);
            it = groups_.emplace(g.ranks, std::move(made)).first;
        }
        return usable(*it->second, g, op);
    }

    ncclComm_t usable(const NcclComm &c, const Group &g, CommOp op) {
        TESSERA_CHECK(c.c != nullptr, "rank ", rank(), ": ", comm_op_name(op), " over ranks ", g.str(),
                      ": this group's NCCL communicator was aborted after an earlier failure");
        return c.c;
    }

    // Every member of `g` calls this at the same point of its sequence of operations.
    void join(NcclComm &c, const Group &g) {
        ncclUniqueId id{};
        if (rank() == g.ranks[0]) check_nccl("ncclGetUniqueId", ncclGetUniqueId(&id));
        bootstrap_.broadcast(&id, sizeof id, g.ranks[0], g);
        check_nccl("ncclCommInitRank", ncclCommInitRank(&c.c, g.size(), id, g.index_of(rank())));
    }

    void wait(ncclComm_t comm, CommOp op, const Group &g) {
        const bool watch = timeout() > 0;
        const auto deadline = std::chrono::steady_clock::now() +
                              std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  std::chrono::duration<double>(timeout()));
        for (int polls = 0;; polls++) {
            cudaError_t e = cudaStreamQuery(stream_.s);
            if (e == cudaSuccess) return;
            if (e != cudaErrorNotReady) check_cuda("cudaStreamQuery", e);
            ncclResult_t async = ncclSuccess;
            ncclResult_t rc = ncclCommGetAsyncError(comm, &async);
            if (rc != ncclSuccess || async != ncclSuccess) {
                abort_comm(comm);
                check_nccl("ncclCommGetAsyncError", rc != ncclSuccess ? rc : async);
            }
            if (watch && std::chrono::steady_clock::now() >= deadline) {
                abort_comm(comm);
                std::string message = comm_timeout_message(op, g, -1);
                mark_broken(message);
                fail(message);
            }
            if (polls < kPollYields)
                std::this_thread::yield();
            else
                std::this_thread::sleep_for(kPollSleep);
        }
    }

    // Ends `comm`'s kernels, so the stream drains, and forgets the handle.
    void abort_comm(ncclComm_t comm) {
        auto forget = [&](NcclComm &c) {
            if (c.c == comm) {
                ncclCommAbort(c.c);
                c.c = nullptr;
            }
        };
        forget(world_);
        for (auto &[ranks, c] : groups_) forget(*c);
    }

    void check_cuda(const char *call, cudaError_t e) {
        if (e == cudaSuccess) return;
        failed(call, cudaGetErrorString(e));
    }
    void check_nccl(const char *call, ncclResult_t r) {
        if (r == ncclSuccess) return;
        const char *detail = ncclGetLastError(nullptr);
        failed(call, std::string(ncclGetErrorString(r)) + (detail && *detail ? std::string(" (") + detail + ")" : ""));
    }
    [[noreturn]] void failed(const char *call, const std::string &why) {
        std::string message = detail::concat("rank ", rank(), " on ", host_name(), ": ", call, " failed: ", why);
        mark_broken(message);
        fail(message);
    }

    Communicator &bootstrap_;
    int device_;
    // Declared before the communicators, so destroyed after them.
    Stream stream_;
    DeviceFloat barrier_buf_;
    NcclComm world_;
    std::map<std::vector<int>, std::unique_ptr<NcclComm>> groups_;
};

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

std::unique_ptr<Communicator> make_nccl_communicator(Communicator &bootstrap, int cuda_device) {
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

std::unique_ptr<Communicator> make_nccl_communicator(Communicator &bootstrap, int cuda_device) {
    fail("rank ", bootstrap.rank(), ": make_nccl_communicator: built without NCCL (configure with CUDA and NCCL "
         "installed); use the MPI communicator with host buffers instead");
}

}  // namespace tessera

#endif
