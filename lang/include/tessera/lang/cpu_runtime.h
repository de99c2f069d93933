// The libraries behind the CPU kernels: OpenBLAS (GEMMs) and the Halide
// runtime (everything else). Each keeps a process-wide thread pool; a rank
// that shares its host with other ranks must shrink both, or the ranks'
// threads outnumber the cores and every kernel slows down
// (exec/thread_budget.h decides how many).
#pragma once

#include <string>
#include <vector>

namespace tessera {

// Sets the size of OpenBLAS's pool (clamped to the MAX_THREADS it was built
// with) and of Halide's (clamped to Halide's own limit); both at least 1.
void set_cpu_kernel_threads(int openblas, int halide);
int openblas_threads();  // the pool OpenBLAS uses now

// "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64": its
// version, build options and the core it detected (openblas_get_config).
std::string openblas_config();
// The Halide targets the ahead-of-time kernels were compiled for
// (TESSERA_HALIDE_TARGET, "host" resolved to this build machine's features),
// in the order they are tried: the fastest first, a portable baseline last.
std::vector<std::string> halide_kernel_targets();
// The one that runs ("x86-64-linux-avx-avx2-f16c-fma-sse41"): the first of
// them whose features this CPU has, as the Halide runtime's
// halide_can_use_target_features() reports them, chosen once, at the first
// kernel call (or here). Every kernel runs that target. When this CPU has none
// of them it says so, and a kernel call throws tessera::Error.
std::string halide_kernel_target();
// Chooses again. For tests: after installing a hook with Halide's
// halide_set_custom_can_use_target_features(), and never while kernels run.
void choose_halide_kernel_target();

}  // namespace tessera
