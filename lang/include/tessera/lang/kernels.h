// CPU kernels. Every operator runs through one entry point; the kernels behind it
// were generated ahead of time by Halide from the descriptions in lang/defs/.
// Tensors are dense and row-major.
#pragma once

#include <vector>

#include "tessera/lang/op.h"

namespace tessera {

struct TensorRef {
    void *data = nullptr;
    TensorType type;
};

// Runs `call` on the CPU. Checks that the output types are what infer_types()
// gives for the inputs, and throws tessera::Error otherwise. Outputs must not
// alias inputs unless the operator is element-wise.
void run_op(const OpCall &call, const std::vector<TensorRef> &inputs,
            const std::vector<TensorRef> &outputs);

// Throws tessera::Error unless `outputs` have the types infer_types() gives
// for the inputs: the check every kernel entry point (CPU or GPU) makes first.
void check_output_types(const OpCall &call, const std::vector<TensorRef> &inputs,
                        const std::vector<TensorRef> &outputs);
// Throws tessera::Error when a bf16 or f16 tensor reaches a kernel that
// cannot take it: `forms` are the 16-bit storage types `device`'s kernels
// have; a device with any runs cast too.
void check_kernel_storage(const OpCall &call, const std::vector<TensorRef> &inputs,
                          const std::vector<TensorRef> &outputs, const char *device,
                          const std::vector<DType> &forms);

// Which kernel runs GEMMs (matmul, batch_matmul). The Halide kernel generated from
// the description is the definition; OpenBLAS sgemm is faster on CPUs (see the
// benchmarks) and is the default. TESSERA_GEMM=halide|blas overrides the default
// at start-up; tests run both. gemm_backend() throws tessera::Error naming an
// unknown TESSERA_GEMM value (the programs call it first thing).
enum class GemmBackend { Halide, Blas };
void set_gemm_backend(GemmBackend b);
GemmBackend gemm_backend();

// The names of the compiled Halide kernels, for inspection and tests.
std::vector<std::string> kernel_names();

}  // namespace tessera
