#include "tessera/tunables.h"

#include <algorithm>
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
