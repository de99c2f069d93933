// The MPI backend (OpenMPI).
//
// exchange() posts a non-blocking receive and send and polls them with
// MPI_Test until both finish or the watchdog's deadline passes. Polling (not
// MPI_Wait) is what makes the deadline possible; it also drives OpenMPI's
// progress for large messages. It yields the CPU between polls, then sleeps
// briefly, because CI runs more ranks than cores.
//
// Every operation uses one tag on a private duplicate of MPI_COMM_WORLD: the
// members issue operations in the same order, and MPI keeps the messages of a
// pair in order, so messages match by position. A timed-out operation leaves
// that order broken (the base class then refuses further operations).
//
// On a timeout the pending receive is cancelled and completed; a pending send
// is released with MPI_Request_free and finishes, if ever, in the background.
// The job is expected to end soon after (launch/ calls mpi_abort).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <unistd.h>

#include "tessera/comm/communicator.h"
#include "tessera/comm/watchdog.h"
#include "tessera/error.h"

#ifdef TESSERA_HAVE_MPI
#include <mpi.h>
#endif

namespace tessera {

#ifndef TESSERA_HAVE_MPI

namespace {
[[noreturn]] void no_mpi(const char *what) {
    fail(what, ": this build has no MPI (configure with -DTESSERA_MPI=ON)");
}
}  // namespace

bool mpi_available() { return false; }
std::string mpi_library_version() { return ""; }
void mpi_init(int *, char ***) { no_mpi("mpi_init"); }
void mpi_finalize() { no_mpi("mpi_finalize"); }
void mpi_abort(int) { no_mpi("mpi_abort"); }
std::unique_ptr<Communicator> make_mpi_communicator() { no_mpi("make_mpi_communicator"); }

#else  // TESSERA_HAVE_MPI

namespace {

// Polling: this many polls with a yield between them, then sleeps of kPollSleep.
// Short messages finish within the yields; the sleeps keep waiting ranks off
// cores that other ranks need. A sleep adds at most its length to a late message.
constexpr int kPollYields = 200;
constexpr auto kPollSleep = std::chrono::microseconds(50);

// MPI counts are int, so messages go in pieces of at most this many bytes.
constexpr size_t kPiece = size_t{1} << 30;
constexpr int kTag = 7;

std::string host_name() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0) return "unknown host";
    return buf;
}

bool mpi_running() {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    return initialized && !finalized;
}

std::string mpi_error_string(int rc) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
    return std::string(text, len);
}

[[noreturn]] void mpi_fail(const char *call, int rc) {
    int rank = -1;
    if (mpi_running()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fail("rank ", rank, " on ", host_name(), ": ", call, " failed: ", mpi_error_string(rc));
}

#define TESSERA_MPI_CHECK(call)                              \
    do {                                                     \
        int tessera_mpi_rc_ = (call);                        \
        if (tessera_mpi_rc_ != MPI_SUCCESS) mpi_fail(#call, tessera_mpi_rc_); \
    } while (0)

const char *thread_level_name(int level) {
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    }
    return "an unknown thread level";
}

// A communicator handle freed on every path out of a scope.
struct OwnedComm {
    MPI_Comm comm = MPI_COMM_NULL;
    ~OwnedComm() {
        if (comm != MPI_COMM_NULL && mpi_running()) MPI_Comm_free(&comm);
    }
};

// Which ranks of `comm` share this host: MPI_COMM_TYPE_SHARED groups the
// ranks that can share memory, which is one node. Hosts are numbered in the
// order of their lowest rank: each host's first rank counts the first ranks
// below it (an exclusive scan) and tells the rest of its host.
Communicator::Placement host_placement(MPI_Comm comm, int rank) {
    OwnedComm host;
    TESSERA_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host.comm));
    Communicator::Placement p;
    TESSERA_MPI_CHECK(MPI_Comm_rank(host.comm, &p.local_rank));
    TESSERA_MPI_CHECK(MPI_Comm_size(host.comm, &p.local_size));
    int first = p.local_rank == 0 ? 1 : 0, below = 0;
    TESSERA_MPI_CHECK(MPI_Allreduce(&first, &p.num_nodes, 1, MPI_INT, MPI_SUM, comm));
    TESSERA_MPI_CHECK(MPI_Exscan(&first, &below, 1, MPI_INT, MPI_SUM, comm));
    p.node = rank == 0 ? 0 : below;  // MPI_Exscan leaves rank 0's result undefined
    TESSERA_MPI_CHECK(MPI_Bcast(&p.node, 1, MPI_INT, 0, host.comm));
    return p;
}

class MpiCommunicator final : public Communicator {
public:
    MpiCommunicator(MPI_Comm comm, int rank, int size, const Placement &p) : Communicator(rank, size), comm_(comm) {
        set_placement(p);
    }
    ~MpiCommunicator() override {
        // After MPI_Finalize no MPI call is allowed; the handle died with MPI.
        if (mpi_running()) MPI_Comm_free(&comm_);
    }
    const char *backend() const override { return "mpi"; }

protected:
    void exchange(const void *send_buf, size_t send_bytes, int dst, void *recv_buf, size_t recv_bytes, int src,
                  CommOp op, const Group &g) override {
        recvs_.clear();
        sends_.clear();
        // The receive first, so that a matching send finds it posted.
        if (src >= 0) post(recvs_, recv_buf, recv_bytes, src, /*is_send=*/false);
        if (dst >= 0) post(sends_, const_cast<void *>(send_buf), send_bytes, dst, /*is_send=*/true);

        const bool watch = timeout() > 0;
        const auto deadline = deadline_after(std::chrono::steady_clock::now(), timeout());
        for (int polls = 0;; polls++) {
            bool recv_done = poll(recvs_, op, g, src);
            bool send_done = poll(sends_, op, g, dst);
            if (recv_done && send_done) return;
            if (watch && std::chrono::steady_clock::now() >= deadline) {
                abandon();
                fail(comm_timeout_message(op, g, recv_done ? dst : src));
            }
            if (polls < kPollYields)
                std::this_thread::yield();
            else
                std::this_thread::sleep_for(kPollSleep);
        }
    }

private:
    struct Pending {
        MPI_Request request = MPI_REQUEST_NULL;
        int bytes = 0;  // this piece's size, to check what arrived
    };

    void post(std::vector<Pending> &list, void *buf, size_t bytes, int peer, bool is_send) {
        auto *p = static_cast<unsigned char *>(buf);
        size_t offset = 0;
        do {  // an empty message is still one (empty) piece: barriers rely on it
            Pending piece;
            piece.bytes = static_cast<int>(std::min(kPiece, bytes - offset));
            int rc = is_send ? MPI_Isend(p + offset, piece.bytes, MPI_BYTE, peer, kTag, comm_, &piece.request)
                             : MPI_Irecv(p + offset, piece.bytes, MPI_BYTE, peer, kTag, comm_, &piece.request);
            if (rc != MPI_SUCCESS) {
                abandon();
                mpi_fail(is_send ? "MPI_Isend" : "MPI_Irecv", rc);
            }
            list.push_back(piece);
            offset += piece.bytes;
        } while (offset < bytes);
    }

    // True when every request in `list` has finished; checks the sizes received.
    bool poll(std::vector<Pending> &list, CommOp op, const Group &g, int peer) {
        bool all = true;
        for (Pending &piece : list) {
            if (piece.request == MPI_REQUEST_NULL) continue;
            int done = 0;
            MPI_Status status;
            int rc = MPI_Test(&piece.request, &done, &status);
            if (rc != MPI_SUCCESS) {
                const int expected = piece.bytes;
                const bool is_recv = &list == &recvs_;
                abandon();
                int error_class = MPI_ERR_OTHER;
                MPI_Error_class(rc, &error_class);
                if (error_class == MPI_ERR_TRUNCATE) size_mismatch(op, g, peer, "more than " + std::to_string(expected), expected);
                mpi_fail(is_recv ? "MPI_Test (receive)" : "MPI_Test (send)", rc);
            }
            if (!done) {
                all = false;
                continue;
            }
            if (&list == &recvs_) {
                int got = 0;
                TESSERA_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &got));
                if (got != piece.bytes) {
                    const int expected = piece.bytes;
                    abandon();
                    size_mismatch(op, g, peer, std::to_string(got), expected);
                }
            }
        }
        return all;
    }

    [[noreturn]] void size_mismatch(CommOp op, const Group &g, int peer, const std::string &got, int expected) {
        fail("rank ", rank(), ": ", comm_op_name(op), " over ranks ", g.str(), " received ", got, " bytes from rank ",
             peer, " but expected ", expected,
             "; every member must pass the same sizes (and call the same operations in the same order)");
    }

    // Gives up on whatever is still pending (see the comment at the top). Its
    // calls go unchecked: it runs only on the way to reporting a first error,
    // which is the one worth reading.
    void abandon() {
        for (Pending &piece : recvs_) {
            if (piece.request == MPI_REQUEST_NULL) continue;
            MPI_Cancel(&piece.request);
            MPI_Wait(&piece.request, MPI_STATUS_IGNORE);
        }
        for (Pending &piece : sends_)
            if (piece.request != MPI_REQUEST_NULL) MPI_Request_free(&piece.request);
        recvs_.clear();
        sends_.clear();
    }

    MPI_Comm comm_;
    std::vector<Pending> recvs_, sends_;  // kept to reuse their storage
};

}  // namespace

bool mpi_available() { return true; }

std::string mpi_library_version() {
    char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) return "unknown (MPI_Get_library_version failed)";
    std::string s(text, strnlen(text, len));  // Open MPI counts the terminating NUL
    s = s.substr(0, s.find_first_of("\r\n"));
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.pop_back();
    return s;
}

void mpi_init(int *argc, char ***argv) {
    int initialized = 0, finalized = 0;
    TESSERA_MPI_CHECK(MPI_Initialized(&initialized));
    TESSERA_MPI_CHECK(MPI_Finalized(&finalized));
    TESSERA_CHECK(!finalized, "mpi_init: MPI was already finalised in this process and cannot start again");
    int provided = MPI_THREAD_SINGLE;
    if (initialized)
        TESSERA_MPI_CHECK(MPI_Query_thread(&provided));
    else
        TESSERA_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    // From here on MPI reports errors to us instead of killing the job, so they become tessera::Error.
    TESSERA_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    if (provided < MPI_THREAD_SERIALIZED) {
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        fail("rank ", rank, " on ", host_name(), ": MPI provides only ", thread_level_name(provided),
             ", but Tessera calls MPI from its communication stream's thread and needs MPI_THREAD_SERIALIZED or "
             "better; use an MPI library built with thread support");
    }
}

void mpi_finalize() {
    if (mpi_running()) TESSERA_MPI_CHECK(MPI_Finalize());
}

void mpi_abort(int code) {
    if (mpi_running()) MPI_Abort(MPI_COMM_WORLD, code);
    // MPI_Abort does not return; without MPI running this process is the whole job.
    std::_Exit(code);
}

std::unique_ptr<Communicator> make_mpi_communicator() {
    TESSERA_CHECK(mpi_running(), "make_mpi_communicator: MPI is not running; call mpi_init() first (and before "
                                 "mpi_finalize())");
    OwnedComm dup;
    TESSERA_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup.comm));
    // Also when the caller initialised MPI itself, without mpi_init().
    TESSERA_MPI_CHECK(MPI_Comm_set_errhandler(dup.comm, MPI_ERRORS_RETURN));
    int rank = 0, size = 0;
    TESSERA_MPI_CHECK(MPI_Comm_rank(dup.comm, &rank));
    TESSERA_MPI_CHECK(MPI_Comm_size(dup.comm, &size));
    const Communicator::Placement placement = host_placement(dup.comm, rank);
    auto world = std::make_unique<MpiCommunicator>(dup.comm, rank, size, placement);
    dup.comm = MPI_COMM_NULL;  // the communicator owns it now
    return world;
}

#endif  // TESSERA_HAVE_MPI

}  // namespace tessera
