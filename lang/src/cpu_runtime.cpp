#include "tessera/lang/cpu_runtime.h"

#include <algorithm>

#include <HalideRuntime.h>
#include <cblas.h>  // OpenBLAS's (lang/CMakeLists.txt): its openblas_* extensions

#include "kernels_matmul.h"  // generated: any kernel's metadata names the target

namespace tessera {

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

std::string halide_kernel_target() { return tk_matmul_nn_metadata()->target; }

}  // namespace tessera
