// What every fuzz target shares: a reader may refuse its input with
// tessera::Error (that is its job); anything else it throws, an internal
// error above all, is a finding, and so is every crash the sanitizers see.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <unistd.h>

#include "tessera/error.h"

namespace tessera::fuzz {

template<typename Fn>
void expect_only_user_errors(Fn &&fn) {
    try {
        fn();
    } catch (const tessera::Error &) {
        // a clear refusal of bad input
    } catch (const std::exception &e) {
        std::fprintf(stderr, "finding: not a user error: %s\n", e.what());
        std::abort();
    }
}

// A file of this process holding `data` (some readers take paths).
inline std::string write_temp(const uint8_t *data, size_t size, const char *suffix) {
    static const std::string path = "/tmp/tessera-fuzz-" + std::to_string(getpid()) + suffix;
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f) std::abort();
    if (size && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
    return path;
}

inline std::string text_of(const uint8_t *data, size_t size) {
    return std::string(reinterpret_cast<const char *>(data), size);
}

}  // namespace tessera::fuzz
