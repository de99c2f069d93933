// The libraries behind the CPU kernels: OpenBLAS (GEMMs) and the Halide
// runtime (everything else). Each keeps a process-wide thread pool; a rank
// that shares its host with other ranks must shrink both, or the ranks'
// threads outnumber the cores and every kernel slows down
// (exec/thread_budget.h decides how many).
#pragma once

#include <string>

namespace tessera {

// Sets the size of OpenBLAS's pool (clamped to the MAX_THREADS it was built
// with) and of Halide's (clamped to Halide's own limit); both at least 1.
void set_cpu_kernel_threads(int openblas, int halide);
int openblas_threads();  // the pool OpenBLAS uses now

// "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64": its
// version, build options and the core it detected (openblas_get_config).
std::string openblas_config();
// The Halide target the ahead-of-time kernels were compiled for, with the
// features it resolved "host" to ("x86-64-linux-avx-avx2-fma-..."): read from
// a compiled kernel's metadata, so it is what runs.
std::string halide_kernel_target();

}  // namespace tessera
