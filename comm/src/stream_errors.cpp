// The process-wide record of errors reported against device streams
// (watchdog.h): a communicator's watchdog thread reports, the device that
// owns the stream takes the error when it synchronizes it.
#include "tessera/comm/watchdog.h"

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
