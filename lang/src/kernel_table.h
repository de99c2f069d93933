// Internal: the table of generated kernels. tools/kernelc.cpp writes one
// kernels_<family>_table.cpp per family, which defines kernels_<family>().
#pragma once

#include <vector>

#include <HalideRuntime.h>

#include "family.h"

namespace tessera::lang::gen {

struct KernelEntry {
    const char *name;
    int (*call)(halide_buffer_t **in, const Scalars &s, halide_buffer_t **out);
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
