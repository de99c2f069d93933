// How many threads a rank's CPU kernels use (OpenBLAS's pool and Halide's).
//
// Both libraries default to one thread per core of the machine. With several
// ranks on one host that is one thread per core per rank: the threads outnumber
// the cores, they preempt each other mid-kernel, and every step slows down.
// So each rank gets its share, as torchrun sets OMP_NUM_THREADS:
//
//   threads = max(1, cpus / sharing)
//
// where `cpus` counts this process's affinity mask (what the launcher or the
// cgroup lets it run on) and `sharing` counts the ranks on this host with the
// same mask, itself included. Unbound ranks all hold the whole machine and
// split it; ranks that mpirun or srun bound to their own cores keep them; ranks
// bound to a socket split the socket.
//
// The user decides instead, in this order: --threads N (both libraries); then
// OPENBLAS_NUM_THREADS for OpenBLAS and HL_NUM_THREADS for Halide; then
// OMP_NUM_THREADS, the usual per-process knob, for both.
#pragma once

#include <string>

namespace tessera {

class Communicator;

// What decides the budget.
// The most threads either library is given (a typo such as
// OMP_NUM_THREADS=100000 would otherwise start that many).
inline constexpr int kMaxCpuKernelThreads = 1024;

struct ThreadRequest {
    int flag = 0;              // --threads; 0: not given
    std::string openblas_env;  // OPENBLAS_NUM_THREADS; empty: unset
    std::string halide_env;    // HL_NUM_THREADS
    std::string omp_env;       // OMP_NUM_THREADS
    int cpus = 1;              // CPUs in this process's affinity mask
    int sharing = 1;           // ranks on this host with this mask, this one included
};

struct ThreadBudget {
    int openblas = 1, halide = 1;
    std::string openblas_why, halide_why;  // "--threads", "OMP_NUM_THREADS", "8 CPUs shared by 2 ranks on this host"
    // "threads: 4 each for OpenBLAS and Halide (8 CPUs shared by 2 ranks on
    // this host)", for the first lines of a program's output.
    std::string summary() const;
    bool operator==(const ThreadBudget &) const = default;
};

// The policy above. Throws tessera::Error, naming the variable, when one of
// the environment values is not a whole number >= 1 (OMP_NUM_THREADS may be a
// list, "4,2", of which the first counts).
ThreadBudget plan_thread_budget(const ThreadRequest &request);

// This process's request: the environment, its affinity mask and, with a
// communicator, how many ranks on its host have the same mask (an all_gather
// over the world: every rank must call it, at the same point). Without one,
// the process is alone.
ThreadRequest thread_request(int flag, Communicator *comm);

// Plans this process's budget and sets both pools (set_cpu_kernel_threads);
// returns what was set. Every rank must call it (thread_request).
ThreadBudget apply_thread_budget(int flag, Communicator *comm);

}  // namespace tessera
