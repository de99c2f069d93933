// The watchdog's clock for communication that runs on a device stream, and
// the errors such communication leaves for the stream's owner.
//
// A host backend waits for its peers itself, so its deadline starts when the
// operation is called (communicator.h, "Watchdog"). An operation issued onto
// a device stream (NCCL's) starts only when the stream reaches it, which can
// be long after it was issued, behind a step's compute; its deadline starts
// when it is first seen started, so time spent queued never counts. Each poll
// says what was seen; the watch says whether to keep waiting, stop, or abort.
// This is pure logic: tests drive it with made-up polls and clocks.
//
// An operation issued without waiting (Communicator::enqueue_all_reduce) has
// no caller left to throw to when its watchdog fires. The watchdog reports the
// error against the stream (report_stream_error), then aborts the operation so
// the stream drains; the device that owns the stream takes the error when it
// synchronizes that stream and rethrows it there, naming the stream, exactly
// as it rethrows an error of host work on that stream.
#pragma once

#include <chrono>
#include <string>
#include <thread>

namespace tessera {

// `seconds` after `now`, saturating: a timeout beyond the clock's range
// (--comm-timeout 1e10 is more nanoseconds than an int64 holds) is a deadline
// that never comes, not one that has already passed.
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::time_point now,
                                                            double seconds) {
    using Clock = std::chrono::steady_clock;
    const std::chrono::duration<double> left = Clock::time_point::max() - now;
    if (!(seconds < left.count())) return Clock::time_point::max();
    return now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// What one poll of an operation in flight saw.
struct WatchPoll {
    bool started = false;  // the stream has reached the operation
    bool done = false;     // the operation has completed
    bool failed = false;   // the backend reports an asynchronous error (a peer died, a network error)
};

enum class WatchVerdict { Waiting, Done, Failed, TimedOut };

// One operation's deadline: `timeout_s` seconds (0: forever, as
// Communicator::timeout()) from the first poll that saw it started.
class DeadlineWatch {
public:
    using Clock = std::chrono::steady_clock;
    explicit DeadlineWatch(double timeout_s) : timeout_s_(timeout_s) {}

    // Done wins over a failure seen in the same poll: the operation's result
    // is in place, and the backend's error concerns later work.
    WatchVerdict update(const WatchPoll &seen, Clock::time_point now) {
        if (seen.done) return WatchVerdict::Done;
        if (seen.failed) return WatchVerdict::Failed;
        if (seen.started && !started_) {
            started_ = true;
            started_at_ = now;
        }
        if (timeout_s_ > 0 && started_ && now - started_at_ >= std::chrono::duration<double>(timeout_s_))
            return WatchVerdict::TimedOut;
        return WatchVerdict::Waiting;
    }

private:
    double timeout_s_;
    bool started_ = false;
    Clock::time_point started_at_{};
};

// Polls `poll()` (returning a WatchPoll) on the calling thread until the
// verdict is no longer Waiting, and returns it: a few thousand yields first
// (an operation usually ends within microseconds), then short sleeps.
template <class Poll>
WatchVerdict watch_until_settled(Poll &&poll, double timeout_s) {
    constexpr int kPollYields = 1000;
    constexpr auto kPollSleep = std::chrono::microseconds(20);
    DeadlineWatch watch(timeout_s);
    for (int polls = 0;; polls++) {
        const WatchVerdict v = watch.update(poll(), DeadlineWatch::Clock::now());
        if (v != WatchVerdict::Waiting) return v;
        if (polls < kPollYields)
            std::this_thread::yield();
        else
            std::this_thread::sleep_for(kPollSleep);
    }
}

// Errors of operations issued onto a device stream, by its native handle (a
// cudaStream_t). The first report for a stream is kept until taken; later
// ones are dropped (they follow from the first). Thread-safe.
void report_stream_error(const void *native_stream, const std::string &message);
// The stream's reported error, removing it; "" when there is none.
std::string take_stream_error(const void *native_stream);

}  // namespace tessera
