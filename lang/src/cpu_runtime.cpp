#include "tessera/lang/cpu_runtime.h"

#include <algorithm>
#include <atomic>

#include <HalideRuntime.h>
#include <cblas.h>  // OpenBLAS's (lang/CMakeLists.txt): its openblas_* extensions

#include "kernel_table.h"
#include "tessera/error.h"

namespace tessera {

namespace {

// Which of gen::kernel_targets() runs: not chosen yet, none (this CPU lacks
// every target's features), or its index. Choosing twice at once is harmless:
// both threads find the same target.
constexpr int kUnchosen = -2, kNone = -1;
std::atomic<int> chosen_target{kUnchosen};

int choose_target() {
    const std::vector<lang::gen::KernelTarget> &targets = lang::gen::kernel_targets();
    for (size_t i = 0; i < targets.size(); i++) {
        const std::vector<uint64_t> &f = targets[i].features;
        if (halide_can_use_target_features(static_cast<int>(f.size()), f.data())) return static_cast<int>(i);
    }
    return kNone;
}

int chosen_or_none() {
    int c = chosen_target.load(std::memory_order_acquire);
    if (c == kUnchosen) {
        c = choose_target();
        chosen_target.store(c, std::memory_order_release);
    }
    return c;
}

std::string target_list() {
    std::string s;
    for (const lang::gen::KernelTarget &t : lang::gen::kernel_targets()) s += (s.empty() ? "" : ", ") + std::string(t.name);
    return s;
}

}  // namespace

namespace lang::gen {

int chosen_kernel_target() {
    const int c = chosen_or_none();
    TESSERA_CHECK(c != kNone, "the CPU kernels were compiled for the Halide targets ", target_list(),
                  ", and this CPU has the features of none of them (halide_can_use_target_features); configure "
                  "with -DTESSERA_HALIDE_TARGET=host on this machine, or end the list with a target every CPU "
                  "of its kind runs, such as x86-64-linux-sse41");
    return c;
}

}  // namespace lang::gen

void set_cpu_kernel_threads(int openblas, int halide) {
    openblas_set_num_threads(std::max(1, openblas));
    halide_set_num_threads(std::max(1, halide));
}

int openblas_threads() { return openblas_get_num_threads(); }

std::string openblas_config() {
    std::string s = openblas_get_config();
    // It ends with a space.
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
}

std::vector<std::string> halide_kernel_targets() {
    std::vector<std::string> names;
    for (const lang::gen::KernelTarget &t : lang::gen::kernel_targets()) names.push_back(t.name);
    return names;
}

std::string halide_kernel_target() {
    const int c = chosen_or_none();
    if (c == kNone) return "none of " + target_list() + " (this CPU lacks their features)";
    return lang::gen::kernel_targets()[c].name;
}

void choose_halide_kernel_target() { chosen_target.store(choose_target(), std::memory_order_release); }

}  // namespace tessera
