// The thread budget (thread_budget.h has the policy).
#include "tessera/exec/thread_budget.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <sched.h>
#include <unistd.h>

#include "tessera/comm/communicator.h"
#include "tessera/error.h"
#include "tessera/lang/cpu_runtime.h"
#include "tessera/tunables.h"

namespace tessera {
namespace {

std::string env_or_empty(const char *name) { return env_text(name).value_or(""); }

// `value` of variable `name` as a thread count; OMP_NUM_THREADS's nested list
// ("4,2": 4 at the outer level) counts its first entry.
int parse_threads(const char *name, const std::string &value) {
    const std::string first = value.substr(0, value.find(','));
    errno = 0;
    char *end = nullptr;
    long v = std::strtol(first.c_str(), &end, 10);
    TESSERA_CHECK(!first.empty() && errno == 0 && *end == '\0' && v >= 1 && v <= kMaxCpuKernelThreads, name, "='",
                  value, "' is not a number of threads (a whole number from 1 to ", kMaxCpuKernelThreads,
                  "); set it to one, or unset it to give each rank its share of the host's cores");
    return static_cast<int>(v);
}

struct Choice {
    int threads;
    std::string why;
};

// One library's count: --threads, then its own variable, then OMP_NUM_THREADS, then the share.
Choice choose(const ThreadRequest &r, const char *own_name, const std::string &own_value, const Choice &share) {
    TESSERA_CHECK(r.flag <= kMaxCpuKernelThreads, "--threads ", r.flag, " is more than ", kMaxCpuKernelThreads,
                  ", the most threads a rank's CPU kernels run");
    if (r.flag > 0) return {r.flag, "--threads"};
    if (!own_value.empty()) return {parse_threads(own_name, own_value), own_name};
    if (!r.omp_env.empty()) return {parse_threads("OMP_NUM_THREADS", r.omp_env), "OMP_NUM_THREADS"};
    return share;
}

// What a process may run on, gathered from every rank to count who shares it.
struct HostCpus {
    int node;
    cpu_set_t mask;
};

HostCpus my_cpus(const Communicator *comm) {
    HostCpus h;
    std::memset(&h, 0, sizeof h);  // padding too: the bytes travel to other ranks
    // Without a mask (an error here is not worth failing a run for) the
    // process counts as unbound on the whole machine.
    if (sched_getaffinity(0, sizeof h.mask, &h.mask) != 0) {
        const long online = sysconf(_SC_NPROCESSORS_ONLN);
        for (long c = 0; c < std::clamp(online, 1L, long{CPU_SETSIZE}); c++) CPU_SET(c, &h.mask);
    }
    if (comm) h.node = comm->node();
    return h;
}

}  // namespace

std::string ThreadBudget::summary() const {
    if (openblas == halide && openblas_why == halide_why)
        return detail::concat("threads: ", openblas, " each for OpenBLAS and Halide (", openblas_why, ")");
    return detail::concat("threads: OpenBLAS ", openblas, " (", openblas_why, "), Halide ", halide, " (", halide_why,
                          ")");
}

ThreadBudget plan_thread_budget(const ThreadRequest &r) {
    const int cpus = std::max(1, r.cpus), sharing = std::max(1, r.sharing);
    const Choice share{std::max(1, cpus / sharing),
                       sharing > 1 ? detail::concat(cpus, " CPUs shared by ", sharing, " ranks on this host")
                                   : detail::concat(cpus, cpus == 1 ? " CPU" : " CPUs")};
    const Choice blas = choose(r, "OPENBLAS_NUM_THREADS", r.openblas_env, share);
    const Choice halide = choose(r, "HL_NUM_THREADS", r.halide_env, share);
    return ThreadBudget{blas.threads, halide.threads, blas.why, halide.why};
}

ThreadRequest thread_request(int flag, Communicator *comm) {
    ThreadRequest r;
    r.flag = flag;
    r.openblas_env = env_or_empty("OPENBLAS_NUM_THREADS");
    r.halide_env = env_or_empty("HL_NUM_THREADS");
    r.omp_env = env_or_empty("OMP_NUM_THREADS");
    const HostCpus mine = my_cpus(comm);
    r.cpus = CPU_COUNT(&mine.mask);
    if (!comm || comm->size() == 1) return r;
    std::vector<HostCpus> all(static_cast<size_t>(comm->size()));
    comm->all_gather(&mine, all.data(), sizeof mine, comm->world_group());
    r.sharing = static_cast<int>(std::count_if(all.begin(), all.end(), [&](const HostCpus &h) {
        return h.node == mine.node && CPU_EQUAL(&h.mask, &mine.mask);
    }));
    return r;
}

ThreadBudget apply_thread_budget(int flag, Communicator *comm) {
    ThreadBudget b = plan_thread_budget(thread_request(flag, comm));
    set_cpu_kernel_threads(b.openblas, b.halide);
    b.openblas = openblas_threads();  // OpenBLAS clamps to the MAX_THREADS it was built with
    return b;
}

}  // namespace tessera
