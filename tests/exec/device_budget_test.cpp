// The automatic device budget (device_budget.h): the formula with its reserve,
// sharing and workspaces; the host's source (the injected limit and
// /proc/meminfo); the errors when nothing is left or the limit is not a size.
#include "tessera/exec/device_budget.h"

#include <gtest/gtest.h>

#include "expect_error.h"
#include "scoped_env.h"
#include "tessera/exec/cuda_device.h"

namespace tessera {
namespace {

using test::error_of;
using test::ScopedEnv;

constexpr int64_t MiB = int64_t{1} << 20, GiB = int64_t{1} << 30;

BudgetSource source(int64_t available, int sharing = 1, int64_t workspaces = 0) {
    BudgetSource s;
    s.what = "MemAvailable";
    s.available = available;
    s.sharing = sharing;
    s.workspaces = workspaces;
    return s;
}

TEST(DeviceBudget, ReserveIsATenthWithAFloor) {
    EXPECT_EQ(budget_reserve(10 * GiB), GiB);
    EXPECT_EQ(budget_reserve(GiB), 256 * MiB);
    EXPECT_EQ(budget_reserve(0), 256 * MiB);
}

TEST(DeviceBudget, AvailableLessReserveSharedLessWorkspaces) {
    EXPECT_EQ(budget_from(source(10 * GiB)).bytes, 9 * GiB);
    EXPECT_EQ(budget_from(source(10 * GiB, 3)).bytes, 3 * GiB);
    EXPECT_EQ(budget_from(source(10 * GiB, 3, 96 * MiB)).bytes, 3 * GiB - 96 * MiB);
    EXPECT_EQ(budget_from(source(10 * GiB)).why, "auto: MemAvailable 10.0 GiB less reserve 1.00 GiB");
    EXPECT_EQ(budget_from(source(10 * GiB, 3, 96 * MiB)).why,
              "auto: MemAvailable 10.0 GiB less reserve 1.00 GiB, divided among 3 ranks on this host, less 96.0 MiB "
              "of kernel workspaces");
}

TEST(DeviceBudget, NothingLeftNamesTheNumbersAndTheWayOut) {
    EXPECT_EQ(error_of([] { budget_from(source(100 * MiB)); }),
              "no device memory budget is left (auto: MemAvailable 100 MiB less reserve 256 MiB); give "
              "--device-mem SIZE");
    EXPECT_NE(error_of([] { budget_from(source(257 * MiB, 1, 2 * MiB)); }).find("less 2.00 MiB of kernel"),
              std::string::npos);
}

TEST(DeviceBudget, CudaSizeCountsTheWorkspaces) {
    const DeviceBudget b = cuda_explicit_budget(4 * GiB);
    EXPECT_EQ(b.bytes, 4 * GiB - kCudaWorkspacesBytes);
    EXPECT_EQ(kCudaWorkspacesBytes, 128 * MiB);  // kernel 64, cuBLAS 32, comm 32
    EXPECT_FALSE(b.limit);  // the arena is exactly this, as under --device-mem on the cpu
    EXPECT_EQ(b.why, "--device-mem 4.00 GiB less 128 MiB of kernel workspaces");
    EXPECT_TRUE(budget_from(source(10 * GiB)).limit);
    EXPECT_EQ(error_of([] { cuda_explicit_budget(128 * MiB); }),
              "--device-mem 128 MiB leaves no arena on a CUDA device: the kernel, cuBLAS and communication "
              "workspaces take 128 MiB of it; give more than 128 MiB");
}

TEST(DeviceBudget, HostLimitFromTheEnvironment) {
    ScopedEnv env("TESSERA_HOST_MEM_AVAILABLE", "20GiB");
    const DeviceBudget b = host_auto_budget(2);
    EXPECT_EQ(b.bytes, 9 * GiB);
    EXPECT_EQ(b.why, "auto: TESSERA_HOST_MEM_AVAILABLE 20.0 GiB less reserve 2.00 GiB, divided among 2 ranks on "
                     "this host");
    EXPECT_EQ(host_auto_budget(0).bytes, 18 * GiB);  // no launcher's count: the process alone
}

TEST(DeviceBudget, HostLimitThatIsNotASize) {
    ScopedEnv env("TESSERA_HOST_MEM_AVAILABLE", "plenty");
    EXPECT_NE(error_of([] { host_auto_budget(1); }).find("TESSERA_HOST_MEM_AVAILABLE: 'plenty' is not a size"),
              std::string::npos);
}

// /proc/meminfo's MemAvailable: positive, and the budget below it.
TEST(DeviceBudget, HostMemAvailableFromProc) {
    ScopedEnv env("TESSERA_HOST_MEM_AVAILABLE", nullptr);
    const DeviceBudget b = host_auto_budget(1);
    EXPECT_GT(b.bytes, 0);
    EXPECT_EQ(b.why.rfind("auto: MemAvailable ", 0), 0u) << b.why;
}

TEST(DeviceBudget, CudaWithoutADeviceSaysSo) {
    if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
    EXPECT_NE(error_of([] { cuda_default_budget(0, 1); }), "<no error>");
}

}  // namespace
}  // namespace tessera
