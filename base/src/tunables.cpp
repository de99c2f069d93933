#include "tessera/tunables.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>

#include "tessera/error.h"
#include "tessera/text.h"

namespace tessera {

namespace {

void check_valid(const char *name, const std::string &value, const std::vector<std::string> &valid,
                 const std::string &what) {
    TESSERA_CHECK(std::find(valid.begin(), valid.end(), value) != valid.end(), name, ": unknown ", what, " '",
                  value, "'; valid: ", join(valid, ", "));
}

}  // namespace

std::optional<std::string> env_text(const char *name) {
    const char *v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
}

std::optional<int> env_int(const char *name, int min, const std::string &advice) {
    const std::optional<std::string> text = env_text(name);
    if (!text) return std::nullopt;
    errno = 0;
    char *end = nullptr;
    const long v = std::strtol(text->c_str(), &end, 10);
    TESSERA_CHECK(errno == 0 && end != text->c_str() && *end == '\0' && v >= min && v <= INT_MAX,
                  "environment variable ", name, "='", *text, "' is not an integer >= ", min, "; ", advice);
    return static_cast<int>(v);
}

std::string env_choice(const char *name, const std::vector<std::string> &valid, const std::string &fallback,
                       const std::string &what) {
    const char *v = std::getenv(name);
    if (v == nullptr) return fallback;
    check_valid(name, v, valid, what);
    return v;
}

std::set<std::string> env_list(const char *name, const std::vector<std::string> &valid, const std::string &what) {
    std::set<std::string> on;
    const char *v = std::getenv(name);
    if (v == nullptr) return on;
    const std::string text = v;
    size_t start = 0;
    while (start <= text.size()) {
        size_t comma = text.find(',', start);
        if (comma == std::string::npos) comma = text.size();
        const std::string item = text.substr(start, comma - start);
        if (!item.empty()) {
            check_valid(name, item, valid, what);
            on.insert(item);
        }
        start = comma + 1;
    }
    return on;
}

}  // namespace tessera
