// The in-process backend: n communicators in one process, one per thread, for
// tests. It is a fake of the MPI backend with the same semantics: sends are
// buffered (they return at once), receives block with the watchdog's deadline,
// messages between a pair arrive in the order sent, and a receive that finds a
// message of the wrong size throws instead of reading garbage.
//
// State: one FIFO of byte messages per (src, dst) pair. Each destination has a
// mutex and a condition variable guarding all of its incoming FIFOs, so a
// receiver sleeps on its own variable and senders wake only it. Message buffers
// the receiver has drained go back to a spare list that the next send on that
// pair reuses, so a warmed-up collective allocates nothing.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

#include "tessera/comm/communicator.h"
#include "tessera/comm/watchdog.h"
#include "tessera/error.h"

namespace tessera {
namespace {

using Bytes = std::vector<unsigned char>;

struct Mailbox {
    std::deque<Bytes> queue;
    std::vector<Bytes> spare;
};

struct Shared {
    explicit Shared(int n) : n(n), boxes(static_cast<size_t>(n) * n), locks(n), arrived(n) {}
    Mailbox &box(int src, int dst) { return boxes[static_cast<size_t>(src) * n + dst]; }

    int n;
    std::vector<Mailbox> boxes;  // box(src, dst) is guarded by locks[dst]
    std::vector<std::mutex> locks;
    std::vector<std::condition_variable> arrived;
};

class ThreadCommunicator final : public Communicator {
public:
    ThreadCommunicator(int rank, int size, std::shared_ptr<Shared> shared)
        : Communicator(rank, size), shared_(std::move(shared)) {}
    const char *backend() const override { return "threads"; }

protected:
    void exchange(const void *send_buf, size_t send_bytes, int dst, void *recv_buf, size_t recv_bytes, int src,
                  CommOp op, const Group &g) override {
        if (dst >= 0) post(send_buf, send_bytes, dst);
        if (src >= 0) take(recv_buf, recv_bytes, src, op, g);
    }

private:
    void post(const void *buf, size_t bytes, int dst) {
        Mailbox &box = shared_->box(rank(), dst);
        Bytes msg;
        {
            std::lock_guard<std::mutex> lock(shared_->locks[dst]);
            if (!box.spare.empty()) {
                msg = std::move(box.spare.back());
                box.spare.pop_back();
            }
        }
        msg.resize(bytes);  // within the reused buffer's capacity once warmed up
        if (bytes > 0) std::memcpy(msg.data(), buf, bytes);
        {
            std::lock_guard<std::mutex> lock(shared_->locks[dst]);
            box.queue.push_back(std::move(msg));
        }
        shared_->arrived[dst].notify_one();
    }

    void take(void *buf, size_t bytes, int src, CommOp op, const Group &g) {
        Mailbox &box = shared_->box(src, rank());
        std::unique_lock<std::mutex> lock(shared_->locks[rank()]);
        auto ready = [&] { return !box.queue.empty(); };
        if (timeout() > 0) {
            auto deadline = deadline_after(std::chrono::steady_clock::now(), timeout());
            if (!shared_->arrived[rank()].wait_until(lock, deadline, ready)) fail(comm_timeout_message(op, g, src));
        } else {
            shared_->arrived[rank()].wait(lock, ready);
        }
        Bytes msg = std::move(box.queue.front());
        box.queue.pop_front();
        lock.unlock();

        const size_t got = msg.size();
        if (got == bytes && bytes > 0) std::memcpy(buf, msg.data(), bytes);
        lock.lock();
        box.spare.push_back(std::move(msg));
        lock.unlock();
        TESSERA_CHECK(got == bytes, "rank ", rank(), ": ", comm_op_name(op), " over ranks ", g.str(), " received ",
                      got, " bytes from rank ", src, " but expected ", bytes,
                      "; every member must pass the same sizes (and call the same operations in the same order)");
    }

    std::shared_ptr<Shared> shared_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int n) {
    TESSERA_CHECK(n >= 1, "make_thread_communicators: ", n, " ranks requested; need at least 1");
    auto shared = std::make_shared<Shared>(n);
    std::vector<std::unique_ptr<Communicator>> comms;
    for (int r = 0; r < n; r++) comms.push_back(std::make_unique<ThreadCommunicator>(r, n, shared));
    return comms;
}

}  // namespace tessera
