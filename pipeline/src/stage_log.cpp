#include "tessera/pipeline/stage_log.h"

#include <cstdlib>
#include <iostream>
#include <set>

#include "tessera/error.h"

namespace tessera {

namespace {

constexpr const char *kStages[] = {"model", "graph",   "partition", "lowered", "memory",
                                   "swap",  "program", "all",       nullptr};

std::set<std::string> parse_log_variable() {
    std::set<std::string> on;
    const char *v = std::getenv("TESSERA_LOG");
    if (v == nullptr) return on;
    std::string text = v;
    size_t start = 0;
    while (start <= text.size()) {
        size_t comma = text.find(',', start);
        std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!item.empty()) {
            bool known = false;
            for (const char *const *s = kStages; *s; s++) known = known || item == *s;
            TESSERA_CHECK(known, "TESSERA_LOG: unknown stage '", item,
                          "'; valid: model, graph, partition, lowered, memory, swap, program, all");
            on.insert(item);
        }
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return on;
}

}  // namespace

const char *const *log_stage_names() { return kStages; }

bool log_enabled(const std::string &stage) {
    static const std::set<std::string> on = parse_log_variable();
    return on.count("all") > 0 || on.count(stage) > 0;
}

void log_stage(const std::string &stage, const std::string &text) {
    if (!log_enabled(stage)) return;
    std::cerr << "---- " << stage << " ----\n" << text << (text.ends_with("\n") ? "" : "\n");
}

}  // namespace tessera
