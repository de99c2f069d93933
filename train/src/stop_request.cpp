#include "tessera/train/stop_request.h"

#include <atomic>
#include <csignal>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "tessera/comm/communicator.h"

namespace tessera {

namespace {

std::atomic<int> g_stop{0};

// Async-signal-safe: records the first signal; a second one restores the
// default action and raises it again.
void on_stop_signal(int sig) {
    int none = 0;
    if (g_stop.compare_exchange_strong(none, sig)) return;
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

}  // namespace

void install_stop_handlers() {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // system calls in flight go on; the loop looks at step boundaries
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
}

int stop_signal() { return g_stop.load(); }

int agreed_stop_signal(Communicator *comm) {
    const int32_t mine = stop_signal();
    if (!comm || comm->size() == 1) return mine;
    std::vector<int32_t> all(static_cast<size_t>(comm->size()));
    comm->all_gather(&mine, all.data(), sizeof mine, comm->world_group());
    int32_t most = 0;
    for (int32_t s : all) most = std::max(most, s);
    return most;
}

std::string StopRequested::message() const {
    const char *name = signal == SIGTERM ? "SIGTERM" : signal == SIGINT ? "SIGINT" : "a signal";
    std::string where = checkpoint.empty()
                            ? std::string("no --checkpoint was given, so nothing was saved")
                            : fmt::format("checkpoint {} (continue with --resume)", checkpoint);
    return fmt::format("stopped by {} after step {} of {}; {}", name, step, total, where);
}

}  // namespace tessera
