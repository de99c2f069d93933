#include "tessera/partition/layout.h"

#include "tessera/error.h"

namespace tessera {

std::string Layout::str() const {
    return is_split() ? "split(" + std::to_string(dim) + ")" : is_partial() ? "partial" : "replicated";
}

Layout layout_from_str(const std::string &s, const std::string &where) {
    if (s == "replicated") return Layout::replicated();
    if (s == "partial") return Layout::partial();
    if (s.size() > 7 && s.rfind("split(", 0) == 0 && s.back() == ')') {
        std::string d = s.substr(6, s.size() - 7);
        bool digits = !d.empty() && d.size() < 4 && d.find_first_not_of("0123456789") == std::string::npos;
        if (digits) return Layout::split(std::stoi(d));
    }
    fail(where, ": bad layout '", s, "' (expected \"split(D)\", \"replicated\" or \"partial\")");
}

namespace {
constexpr const char *kCommNames[] = {"all-gather", "all-to-all", "reduce-scatter", "all-reduce", "halo"};
}

const char *comm_kind_name(CommKind k) { return kCommNames[static_cast<int>(k)]; }

CommKind comm_kind_from_name(const std::string &s, const std::string &where) {
    for (int i = 0; i < 5; i++)
        if (s == kCommNames[i]) return static_cast<CommKind>(i);
    fail(where, ": unknown communication kind '", s,
         "' (expected all-gather, all-to-all, reduce-scatter, all-reduce or halo)");
}

int64_t all_gather_bytes(int k, int64_t bytes) { return (k - 1) * bytes; }
int64_t all_to_all_bytes(int k, int64_t bytes) { return (k - 1) * (bytes / k); }
int64_t reduce_scatter_bytes(int k, int64_t bytes) { return (k - 1) * bytes; }
int64_t all_reduce_bytes(int k, int64_t bytes) { return 2 * (k - 1) * bytes; }

int comm_steps(CommKind kind, int k) {
    switch (kind) {
    case CommKind::AllReduce: return 2 * (k - 1);
    case CommKind::Halo: return 2;
    default: return k - 1;
    }
}

}  // namespace tessera
