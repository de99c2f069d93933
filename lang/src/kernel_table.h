// Internal: the table of generated kernels. tools/kernelc.cpp writes one
// kernels_<family>_table.cpp per family, which defines kernels_<family>(), and
// kernel_targets.cpp, which defines kernel_targets().
#pragma once

#include <cstdint>
#include <vector>

#include <HalideRuntime.h>

#include "family.h"

namespace tessera::lang::gen {

// A Halide target the kernels were compiled for (TESSERA_HALIDE_TARGET, one
// entry per comma-separated target, in the order they are tried).
struct KernelTarget {
    const char *name;                // "x86-64-linux-avx-avx2-f16c-fma-sse41"
    std::vector<uint64_t> features;  // as halide_can_use_target_features() takes them
};
const std::vector<KernelTarget> &kernel_targets();
// The index in kernel_targets() of the target that runs (cpu_runtime.h's
// halide_kernel_target()); throws tessera::Error when this CPU runs none.
int chosen_kernel_target();

// `call` runs the kernel compiled for kernel_targets()[target].
struct KernelEntry {
    const char *name;
    int (*call)(int target, halide_buffer_t **in, const Scalars &s, halide_buffer_t **out);
    int num_inputs, num_outputs;
};

#define TESSERA_KERNEL_FAMILY(f) const std::vector<KernelEntry> &kernels_##f();
TESSERA_KERNEL_FAMILY(matmul)
TESSERA_KERNEL_FAMILY(elementwise)
TESSERA_KERNEL_FAMILY(softmax)
TESSERA_KERNEL_FAMILY(norm)
TESSERA_KERNEL_FAMILY(conv)
TESSERA_KERNEL_FAMILY(layout)
TESSERA_KERNEL_FAMILY(misc)
TESSERA_KERNEL_FAMILY(optim)
#undef TESSERA_KERNEL_FAMILY

}  // namespace tessera::lang::gen
