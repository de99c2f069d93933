// The watchdog of communication on a device stream (comm/watchdog.h), without
// a GPU: the deadline against made-up polls and clocks, the polling loop
// against a fake poller standing in for cudaStreamQuery and
// ncclCommGetAsyncError, the errors left for a stream's owner, and the
// timeout message, which is the host backends' own.
//
// Test names start with "comm" so that `ctest -R comm` selects them.
#include "tessera/comm/watchdog.h"

#include <chrono>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "tessera/comm/communicator.h"

namespace tessera {
namespace {

using Clock = DeadlineWatch::Clock;
using std::chrono::milliseconds;

WatchPoll seen(bool started, bool done = false, bool failed = false) {
    WatchPoll p;
    p.started = started;
    p.done = done;
    p.failed = failed;
    return p;
}

// The clock starts when the stream reaches the operation, not when it was
// issued: an hour queued behind compute does not count.
TEST(commWatchdog, TheDeadlineStartsWhenTheOperationStarts) {
    DeadlineWatch w(1.5);
    const Clock::time_point t0 = Clock::now();
    EXPECT_EQ(w.update(seen(false), t0), WatchVerdict::Waiting);
    EXPECT_EQ(w.update(seen(false), t0 + std::chrono::hours(1)), WatchVerdict::Waiting);
    const Clock::time_point start = t0 + std::chrono::hours(1) + milliseconds(1);
    EXPECT_EQ(w.update(seen(true), start), WatchVerdict::Waiting);
    EXPECT_EQ(w.update(seen(true), start + milliseconds(1499)), WatchVerdict::Waiting);
    EXPECT_EQ(w.update(seen(true), start + milliseconds(1500)), WatchVerdict::TimedOut);
}

// A timeout longer than the clock's range never comes, rather than wrapping
// into the past; an ordinary one lands where it should.
TEST(commWatchdog, ADeadlineBeyondTheClocksRangeSaturates) {
    const Clock::time_point t0 = Clock::now();
    EXPECT_EQ(deadline_after(t0, 1.5), t0 + milliseconds(1500));
    EXPECT_EQ(deadline_after(t0, 1e10), Clock::time_point::max());
    EXPECT_EQ(deadline_after(t0, 1e300), Clock::time_point::max());
    EXPECT_EQ(deadline_after(t0, std::numeric_limits<double>::infinity()), Clock::time_point::max());
    EXPECT_GT(deadline_after(t0, 1e9), t0 + std::chrono::hours(24 * 365 * 30));
}

TEST(commWatchdog, ATimeoutOfZeroWaitsForever) {
    DeadlineWatch w(0);
    const Clock::time_point t0 = Clock::now();
    EXPECT_EQ(w.update(seen(true), t0), WatchVerdict::Waiting);
    EXPECT_EQ(w.update(seen(true), t0 + std::chrono::hours(24 * 365)), WatchVerdict::Waiting);
    EXPECT_EQ(w.update(seen(true, false, true), t0), WatchVerdict::Failed);  // errors still end it
}

TEST(commWatchdog, DoneWinsOverAFailureSeenInTheSamePoll) {
    const Clock::time_point t0 = Clock::now();
    DeadlineWatch a(1);
    EXPECT_EQ(a.update(seen(true, true, true), t0), WatchVerdict::Done);
    DeadlineWatch b(1);
    EXPECT_EQ(b.update(seen(true, false, true), t0), WatchVerdict::Failed);
    // Done after the deadline is still done: it finished before anyone looked.
    DeadlineWatch c(1);
    EXPECT_EQ(c.update(seen(true), t0), WatchVerdict::Waiting);
    EXPECT_EQ(c.update(seen(true, true), t0 + std::chrono::seconds(5)), WatchVerdict::Done);
}

// A fake poller: the operation starts at poll `start_at`, finishes at
// `done_at` and reports an asynchronous error from `fail_at` (-1: never).
struct FakePoller {
    int start_at = 0, done_at = -1, fail_at = -1;
    int polls = 0;
    WatchPoll operator()() {
        const int n = polls++;
        return seen(n >= start_at, done_at >= 0 && n >= done_at, fail_at >= 0 && n >= fail_at);
    }
};

TEST(commWatchdog, TheLoopStopsWhenTheOperationFinishes) {
    FakePoller p{.start_at = 0, .done_at = 5};
    EXPECT_EQ(watch_until_settled(p, 10.0), WatchVerdict::Done);
    EXPECT_EQ(p.polls, 6);
}

TEST(commWatchdog, TheLoopStopsAtAnAsynchronousError) {
    FakePoller p{.start_at = 0, .fail_at = 3};
    EXPECT_EQ(watch_until_settled(p, 0), WatchVerdict::Failed);
    EXPECT_EQ(p.polls, 4);
}

TEST(commWatchdog, TheLoopTimesOutFromTheStart) {
    FakePoller p{.start_at = 2000};  // past the yields, into the sleeps
    const auto t0 = Clock::now();
    EXPECT_EQ(watch_until_settled(p, 0.05), WatchVerdict::TimedOut);
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_GE(p.polls, 2001);
    EXPECT_GE(waited, 0.05);
    EXPECT_LT(waited, 5.0);
}

TEST(commWatchdog, AStreamKeepsItsFirstErrorUntilTaken) {
    int a = 0, b = 0;  // two stand-in stream handles
    EXPECT_EQ(take_stream_error(&a), "");
    report_stream_error(&a, "rank 1: all_reduce over ranks [0,1] timed out after 2 s waiting for the other members");
    report_stream_error(&a, "a later error, following from the first");
    EXPECT_EQ(take_stream_error(&b), "");
    EXPECT_EQ(take_stream_error(&a),
              "rank 1: all_reduce over ranks [0,1] timed out after 2 s waiting for the other members");
    EXPECT_EQ(take_stream_error(&a), "");
}

// The NCCL watchdog's message is the host backends' (comm_timeout_message):
// the same text, ending "waiting for the other members" since NCCL cannot
// say which peer is late.
class MessageOnly final : public Communicator {
public:
    MessageOnly() : Communicator(1, 4) {}
    const char *backend() const override { return "message"; }
    using Communicator::comm_timeout_message;

protected:
    void exchange(const void *, size_t, int, void *, size_t, int, CommOp, const Group &) override {}
};

TEST(commWatchdog, TheTimeoutMessageIsTheHostBackendsOne) {
    MessageOnly c;
    c.set_timeout(1.5);
    const Group g{{0, 1, 2, 3}};
    EXPECT_EQ(c.comm_timeout_message(CommOp::AllReduce, g, -1),
              "rank 1: all_reduce over ranks [0,1,2,3] timed out after 1.5 s waiting for the other members");
    EXPECT_EQ(c.comm_timeout_message(CommOp::AllReduce, g, 2),
              "rank 1: all_reduce over ranks [0,1,2,3] timed out after 1.5 s waiting for rank 2");
}

}  // namespace
}  // namespace tessera
