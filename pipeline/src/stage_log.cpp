#include "tessera/pipeline/stage_log.h"

#include <iostream>
#include <set>

#include "tessera/tunables.h"

namespace tessera {

namespace {

constexpr const char *kStages[] = {"model", "precision", "graph",   "partition", "lowered", "memory",
                                   "times", "swap",      "program", "all",       nullptr};

}  // namespace

const char *const *log_stage_names() { return kStages; }

bool log_enabled(const std::string &stage) {
    static const std::set<std::string> on = [] {
        std::vector<std::string> valid;
        for (const char *const *s = kStages; *s; s++) valid.push_back(*s);
        return env_list("TESSERA_LOG", valid, "stage");
    }();
    return on.count("all") > 0 || on.count(stage) > 0;
}

void log_stage(const std::string &stage, const std::string &text) {
    if (!log_enabled(stage)) return;
    std::cerr << "---- " << stage << " ----\n" << text << (text.ends_with("\n") ? "" : "\n");
}

}  // namespace tessera
