#include "tessera/exec/device_budget.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tessera/error.h"
#include "tessera/exec/cuda_device.h"
#include "tessera/size.h"
#include "tessera/text.h"
#include "tessera/tunables.h"

namespace tessera {

namespace {

constexpr int64_t kMinReserve = int64_t{256} << 20;
constexpr const char *kHostMemEnv = "TESSERA_HOST_MEM_AVAILABLE";

// MemAvailable of /proc/meminfo, in bytes.
int64_t mem_available_from_proc() {
    std::ifstream in("/proc/meminfo");
    TESSERA_CHECK(in.good(), "--device-mem auto: cannot read /proc/meminfo for the memory available; give "
                  "--device-mem SIZE or set ", kHostMemEnv);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("MemAvailable:", 0) != 0) continue;
        std::istringstream fields(line.substr(13));
        int64_t kib = -1;
        std::string unit;
        fields >> kib >> unit;
        TESSERA_CHECK(kib >= 0 && unit == "kB", "--device-mem auto: /proc/meminfo has an unreadable line '", line,
                      "'; give --device-mem SIZE or set ", kHostMemEnv);
        return kib * 1024;
    }
    fail("--device-mem auto: /proc/meminfo has no MemAvailable line (a kernel before 3.14?); give --device-mem "
         "SIZE or set ", kHostMemEnv);
}

}  // namespace

int64_t budget_reserve(int64_t available) { return std::max(kMinReserve, available / 10); }

DeviceBudget budget_from(const BudgetSource &s) {
    TESSERA_INTERNAL_ASSERT(s.sharing >= 1 && s.available >= 0 && s.workspaces >= 0, "bad budget source: sharing ",
                            s.sharing, ", available ", s.available, ", workspaces ", s.workspaces);
    const int64_t reserve = budget_reserve(s.available);
    DeviceBudget b;
    b.bytes = (s.available - reserve) / s.sharing - s.workspaces;
    b.why = detail::concat("auto: ", s.what, " ", format_bytes(s.available), " less reserve ", format_bytes(reserve));
    if (s.sharing > 1) b.why += detail::concat(", divided among ", count_of(s.sharing, "rank"), " on this host");
    if (s.workspaces > 0) b.why += detail::concat(", less ", format_bytes(s.workspaces), " of kernel workspaces");
    TESSERA_CHECK(b.bytes > 0, "no device memory budget is left (", b.why, "); give --device-mem SIZE");
    return b;
}

DeviceBudget host_auto_budget(int local_ranks) {
    BudgetSource s;
    s.sharing = std::max(1, local_ranks);
    if (const std::optional<std::string> v = env_text(kHostMemEnv)) {
        s.what = kHostMemEnv;
        s.available = parse_size(*v, kHostMemEnv);
    } else {
        s.what = "MemAvailable";
        s.available = mem_available_from_proc();
    }
    return budget_from(s);
}

DeviceBudget cuda_explicit_budget(int64_t size) {
    DeviceBudget b;
    b.bytes = size - kCudaWorkspacesBytes;
    b.limit = false;
    b.why = detail::concat("--device-mem ", format_bytes(size), " less ", format_bytes(kCudaWorkspacesBytes),
                           " of kernel workspaces");
    TESSERA_CHECK(b.bytes > 0, "--device-mem ", format_bytes(size), " leaves no arena on a CUDA device: the kernel, "
                  "cuBLAS and communication workspaces take ", format_bytes(kCudaWorkspacesBytes), " of it; give more than ",
                  format_bytes(kCudaWorkspacesBytes));
    return b;
}

DeviceBudget cuda_default_budget(int index, int sharing) {
    const CudaDeviceInfo info = cuda_device_info(index);
    BudgetSource s;
    s.what = detail::concat("cuda:", index, " free");
    s.available = info.free_bytes;
    s.sharing = std::max(1, sharing);
    s.workspaces = kCudaWorkspacesBytes;
    return budget_from(s);
}

}  // namespace tessera
