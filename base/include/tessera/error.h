// Tessera's two tiers of errors.
//
//   * tessera::Error is the user's fault: a bad shape, a bad attribute, a missing
//     file. Its message names the operator, tensor, file or value that was wrong
//     and, where it can, says what would work. Launchers print it and exit non-zero.
//   * TESSERA_INTERNAL_ASSERT is Tessera's own bug. It throws InternalError with
//     the file and line and asks for a bug report.
//
// Library code never calls abort() or exit(); only launch/ decides how a process
// ends. Both macros build their message only when the check fails.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string &message) : std::runtime_error(message) {}
};

class InternalError : public std::logic_error {
public:
    explicit InternalError(const std::string &message) : std::logic_error(message) {}
};

namespace detail {

template<typename... Args>
std::string concat(const Args &...args) {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
}

[[noreturn]] void throw_internal(const char *file, int line, const char *condition,
                                 const std::string &message);

}  // namespace detail

// Throws tessera::Error built from the streamed arguments.
template<typename... Args>
[[noreturn]] void fail(const Args &...args) {
    throw Error(detail::concat(args...));
}

}  // namespace tessera

#define TESSERA_CHECK(cond, ...)                                     \
    do {                                                             \
        if (!(cond)) ::tessera::fail(__VA_ARGS__);                   \
    } while (0)

#define TESSERA_INTERNAL_ASSERT(cond, ...)                                                 \
    do {                                                                                   \
        if (!(cond))                                                                       \
            ::tessera::detail::throw_internal(__FILE__, __LINE__, #cond,                   \
                                              ::tessera::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
    } while (0)
