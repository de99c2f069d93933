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
#include "nccl_communicator.h"

namespace tessera {
namespace nccl_detail {

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

}  // namespace nccl_detail

using nccl_detail::host_name;
using nccl_detail::NcclCommunicator;

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
