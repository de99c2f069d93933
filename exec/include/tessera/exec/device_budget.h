// The memory budget a run trains under when it is not given in bytes:
// `--device-mem auto` on any device, and no --device-mem at all on a CUDA
// device, whose memory is fixed. (And on CUDA an explicit --device-mem SIZE,
// which counts the workspaces: cuda_explicit_budget below.)
//
// Such a budget is a limit, not an arena size. A run whose memory plan fits
// gets an arena of exactly what the plan needs; one that does not swaps
// (swapping.md), exactly as under `--device-mem` of the budget's bytes. The
// budget is what the device has available, less a reserve for what Tessera
// does not count (other processes, the CUDA context, allocator overhead),
// shared among the ranks of this host that draw on the same memory, less the
// workspaces the device allocates beside its arena:
//
//   budget  = (available - reserve) / sharing - workspaces
//   reserve = max(256 MiB, available / 10)
//
//   cpu   available: MemAvailable of /proc/meminfo, or TESSERA_HOST_MEM_AVAILABLE
//         (a size, e.g. 2GiB: a stated limit, and how tests pin the budget);
//         sharing: the ranks on this host; no workspaces.
//   cuda  available: the GPU's free memory (cudaMemGetInfo); sharing: the ranks
//         of this host on this GPU; workspaces: the kernel workspace and
//         cuBLAS's (cuda_device.h), so that arena and workspaces together stay
//         within the budget.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

struct BudgetSource {
    std::string what;             // "MemAvailable", "TESSERA_HOST_MEM_AVAILABLE", "cuda:0 free"
    int64_t available = 0;        // bytes
    int sharing = 1;              // ranks drawing on the same memory, this one included
    int64_t workspaces = 0;       // bytes the device allocates beside its arena
};

struct DeviceBudget {
    int64_t bytes = 0;
    // A limit (auto, the CUDA default: the arena is what the plan needs, up
    // to `bytes`), or the arena's exact size (--device-mem SIZE on CUDA).
    bool limit = true;
    // "auto: MemAvailable 15.2 GiB less reserve 1.52 GiB, shared by 2 ranks"
    std::string why;
};

// The reserve kept back from `available` bytes.
int64_t budget_reserve(int64_t available);

// The budget the formula above gives. Throws tessera::Error, naming the
// numbers and `--device-mem SIZE` as the way out, when nothing is left.
DeviceBudget budget_from(const BudgetSource &source);

// `--device-mem auto` on the CPU device, for one of `local_ranks` ranks on
// this host. Throws tessera::Error when TESSERA_HOST_MEM_AVAILABLE is not a
// size or /proc/meminfo cannot be read.
DeviceBudget host_auto_budget(int local_ranks);

// `--device-mem SIZE` on a CUDA device: SIZE is all the device memory the
// run allocates, workspaces included (as PyTorch's memory fraction caps its
// workspaces too), so the arena is SIZE less kCudaWorkspacesBytes, exactly.
// Throws tessera::Error when SIZE leaves no arena.
DeviceBudget cuda_explicit_budget(int64_t size);

// The default budget of CUDA device `index`, shared by `sharing` ranks.
// Throws tessera::Error when the device is not usable.
DeviceBudget cuda_default_budget(int index, int sharing);

}  // namespace tessera
