// The thread budget: each rank's share of its cores, the user's overrides in
// their order, the errors for malformed variables, and the count of ranks that
// share a mask, over the in-process communicator with real affinity masks.
#include "tessera/exec/thread_budget.h"

#include <functional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include "expect_error.h"
#include "scoped_env.h"
#include "tessera/comm/communicator.h"
#include "tessera/lang/cpu_runtime.h"

namespace tessera {
namespace {

using test::expect_error;
using test::ScopedEnv;

ThreadRequest request(int cpus, int sharing) {
    ThreadRequest r;
    r.cpus = cpus;
    r.sharing = sharing;
    return r;
}

TEST(ThreadBudget, EachRankGetsItsShareOfTheCores) {
    ThreadBudget b = plan_thread_budget(request(16, 4));
    const std::string why = "16 CPUs shared by 4 ranks on this host";
    EXPECT_EQ(b, (ThreadBudget{4, 4, why, why}));
    EXPECT_EQ(b.summary(), "threads: 4 each for OpenBLAS and Halide (16 CPUs shared by 4 ranks on this host)");
    EXPECT_EQ(plan_thread_budget(request(8, 1)).summary(), "threads: 8 each for OpenBLAS and Halide (8 CPUs)");
    // More ranks than cores (CI oversubscribes): one thread each, never zero.
    EXPECT_EQ(plan_thread_budget(request(2, 3)).openblas, 1);
    EXPECT_EQ(plan_thread_budget(request(1, 1)).summary(), "threads: 1 each for OpenBLAS and Halide (1 CPU)");
    EXPECT_EQ(plan_thread_budget(request(7, 2)).halide, 3);
}

TEST(ThreadBudget, TheUserDecidesInOrder) {
    ThreadRequest r = request(16, 2);
    r.omp_env = "4,2";  // nested: the outer level counts
    EXPECT_EQ(plan_thread_budget(r).summary(), "threads: 4 each for OpenBLAS and Halide (OMP_NUM_THREADS)");
    r.openblas_env = "2";
    EXPECT_EQ(plan_thread_budget(r).summary(),
              "threads: OpenBLAS 2 (OPENBLAS_NUM_THREADS), Halide 4 (OMP_NUM_THREADS)");
    r.omp_env.clear();
    r.halide_env = "3";
    EXPECT_EQ(plan_thread_budget(r).summary(), "threads: OpenBLAS 2 (OPENBLAS_NUM_THREADS), Halide 3 (HL_NUM_THREADS)");
    r.halide_env.clear();
    EXPECT_EQ(plan_thread_budget(r).summary(),
              "threads: OpenBLAS 2 (OPENBLAS_NUM_THREADS), Halide 8 (16 CPUs shared by 2 ranks on this host)");
    r.flag = 5;
    EXPECT_EQ(plan_thread_budget(r).summary(), "threads: 5 each for OpenBLAS and Halide (--threads)");
}

TEST(ThreadBudget, MalformedVariablesAreErrors) {
    ThreadRequest r = request(4, 1);
    r.openblas_env = "many";
    expect_error([&] { plan_thread_budget(r); },
                 "OPENBLAS_NUM_THREADS='many' is not a number of threads (a whole number from 1 to 1024); set it to "
                 "one, or unset it to give each rank its share of the host's cores");
    r.openblas_env.clear();
    r.halide_env = "0";
    expect_error([&] { plan_thread_budget(r); }, "HL_NUM_THREADS='0' is not a number of threads");
    r.halide_env.clear();
    r.omp_env = ",4";
    expect_error([&] { plan_thread_budget(r); }, "OMP_NUM_THREADS=',4' is not a number of threads");
    r.omp_env = "4x";
    expect_error([&] { plan_thread_budget(r); }, "OMP_NUM_THREADS='4x' is not a number of threads");
    // A typo's thousands of threads are refused, not started.
    r.omp_env = "100000";
    expect_error([&] { plan_thread_budget(r); }, "OMP_NUM_THREADS='100000' is not a number of threads (a whole "
                                                 "number from 1 to 1024)");
    r.flag = 5000;
    expect_error([&] { plan_thread_budget(r); }, "--threads 5000 is more than 1024");
    r.flag = 2;  // --threads wins, so the variables are not read
    EXPECT_EQ(plan_thread_budget(r).openblas, 2);
}

TEST(ThreadBudget, RequestReadsTheEnvironmentAndTheMask) {
    ScopedEnv a("OPENBLAS_NUM_THREADS", "3"), b("HL_NUM_THREADS", nullptr), c("OMP_NUM_THREADS", "2");
    ThreadRequest r = thread_request(0, nullptr);
    EXPECT_EQ(r.openblas_env, "3");
    EXPECT_EQ(r.halide_env, "");
    EXPECT_EQ(r.omp_env, "2");
    cpu_set_t mask;
    ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
    EXPECT_EQ(r.cpus, CPU_COUNT(&mask));
    EXPECT_EQ(r.sharing, 1);
}

// Runs fn(rank) on one thread per communicator.
void on_ranks(int n, const std::function<void(Communicator &, int)> &fn) {
    auto comms = make_thread_communicators(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; r++) threads.emplace_back([&, r] { fn(*comms[r], r); });
    for (auto &t : threads) t.join();
}

TEST(ThreadBudget, RanksWithTheSameMaskShareIt) {
    std::vector<ThreadRequest> got(3);
    on_ranks(3, [&](Communicator &c, int r) { got[r] = thread_request(0, &c); });
    for (const ThreadRequest &r : got) {
        EXPECT_EQ(r.sharing, 3);
        EXPECT_EQ(r.cpus, got[0].cpus);
    }
}

TEST(ThreadBudget, RanksBoundToTheirOwnCoresKeepThem) {
    cpu_set_t all;
    ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; c++)
        if (CPU_ISSET(c, &all)) cpus.push_back(c);
    if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
    // Rank 0 alone on the first CPU, ranks 1 and 2 on the second (as a launcher binds them).
    std::vector<ThreadRequest> got(3);
    on_ranks(3, [&](Communicator &c, int r) {
        cpu_set_t mine;
        CPU_ZERO(&mine);
        CPU_SET(cpus[r == 0 ? 0 : 1], &mine);
        ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof mine, &mine), 0);
        got[r] = thread_request(0, &c);
    });
    EXPECT_EQ(got[0].cpus, 1);
    EXPECT_EQ(got[0].sharing, 1);
    EXPECT_EQ(got[1].sharing, 2);
    EXPECT_EQ(got[2].sharing, 2);
}

TEST(ThreadBudget, ApplySetsOpenBlas) {
    ScopedEnv a("OPENBLAS_NUM_THREADS", nullptr), b("HL_NUM_THREADS", nullptr), c("OMP_NUM_THREADS", nullptr);
    ThreadBudget b1 = apply_thread_budget(1, nullptr);
    EXPECT_EQ(b1.summary(), "threads: 1 each for OpenBLAS and Halide (--threads)");
    EXPECT_EQ(openblas_threads(), 1);
    ThreadBudget b2 = apply_thread_budget(2, nullptr);
    EXPECT_EQ(openblas_threads(), b2.openblas);
    EXPECT_GE(b2.openblas, 1);
}

}  // namespace
}  // namespace tessera
