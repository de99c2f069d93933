// The NCCL communicator's watchdog (nccl_communicator.h, nccl.cpp): events
// around each collective issued onto a stream, and a thread that polls them
// against the deadline and NCCL's asynchronous errors, reports a failure
// against the stream and aborts the communicator.
#include "nccl_communicator.h"

namespace tessera::nccl_detail {

// How often the watchdog thread looks at the all-reduces in flight. Detection
// is this much late at worst, which is nothing next to a timeout in seconds.
constexpr auto kWatchdogPoll = std::chrono::milliseconds(1);

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

}  // namespace tessera::nccl_detail
