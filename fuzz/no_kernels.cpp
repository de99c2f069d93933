// The fuzz targets' stand-in for lang/src/kernels.cpp, whose kernels Halide
// generates at build time: the readers fuzzed here build graphs and infer
// shapes, and never run an operator, nor use Halide's thread pool.
#include <HalideRuntime.h>

#include <cstdlib>

#include "family.h"

namespace tessera::lang {

void call_kernel(const std::string &, const std::vector<KernelArg> &, const Scalars &,
                 const std::vector<KernelArg> &, bool) {
    std::abort();  // a reader ran a kernel: not what it is for
}

double Scalars::get(const std::string &) const { std::abort(); }

}  // namespace tessera::lang

extern "C" int halide_do_par_for(void *, halide_task_t, int, int, uint8_t *) { std::abort(); }
