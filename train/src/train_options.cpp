#include "tessera/train/train_options.h"

#include <array>
#include <utility>

#include "tessera/error.h"
#include "tessera/text.h"

namespace tessera {

namespace {

template <typename E, size_t N>
using NameTable = std::array<std::pair<E, const char *>, N>;

constexpr NameTable<LrSchedule, 2> kLrSchedules = {{{LrSchedule::Constant, "constant"}, {LrSchedule::Cosine, "cosine"}}};
constexpr NameTable<ProgressMode, 4> kProgressModes = {{{ProgressMode::Auto, "auto"},
                                                        {ProgressMode::Bar, "bar"},
                                                        {ProgressMode::Lines, "lines"},
                                                        {ProgressMode::None, "none"}}};
constexpr NameTable<CommChoice, 3> kCommChoices = {
    {{CommChoice::Auto, "auto"}, {CommChoice::Mpi, "mpi"}, {CommChoice::Nccl, "nccl"}}};

template <typename E, size_t N>
const char *name_in(const NameTable<E, N> &table, E value) {
    for (const auto &[e, name] : table)
        if (e == value) return name;
    throw InternalError("an enumerator without a name");
}

// "FLAG: unknown WHAT 'NAME'; valid: a, b" when `name` is none of the table's.
template <typename E, size_t N>
E value_in(const NameTable<E, N> &table, const std::string &name, const char *flag, const char *what) {
    std::vector<std::string> names;
    for (const auto &[e, n] : table) {
        if (name == n) return e;
        names.push_back(n);
    }
    throw Error(detail::concat(flag, ": unknown ", what, " '", name, "'; valid: ", join(names, ", ")));
}

}  // namespace

const char *lr_schedule_name(LrSchedule s) { return name_in(kLrSchedules, s); }
LrSchedule lr_schedule_from_name(const std::string &name) {
    return value_in(kLrSchedules, name, "--lr-schedule", "schedule");
}
const char *progress_mode_name(ProgressMode m) { return name_in(kProgressModes, m); }
ProgressMode progress_mode_from_name(const std::string &name) {
    return value_in(kProgressModes, name, "--progress", "mode");
}
const char *comm_choice_name(CommChoice c) { return name_in(kCommChoices, c); }
CommChoice comm_choice_from_name(const std::string &name) {
    return value_in(kCommChoices, name, "--comm", "communicator");
}

}  // namespace tessera
