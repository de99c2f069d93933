// Internal to exec/: the GPU operator kernels, one template per operator family
// over an execution context (exec.h), and the one entry point that checks types
// and dispatches, like tessera::run_op() does for the CPU kernels.
#pragma once

#include <string>
#include <vector>

#include "exec.h"
#include "tessera/lang/staged.h"
#include "ops_conv.h"
#include "ops_elementwise.h"
#include "ops_layout.h"
#include "ops_matmul.h"
#include "ops_misc.h"
#include "ops_norm.h"
#include "ops_optim.h"
#include "ops_softmax.h"
#include "ops_staged.h"

namespace tessera::gpu {

// Checks that the output types are what infer_types() gives (tessera::Error
// otherwise), then issues the operator's kernels on `ex`: one phase's kernels
// for a staged call (ops_staged.h).
template <class Exec>
void run_op(Exec &ex, const OpCall &call, const std::vector<TensorRef> &inputs,
            const std::vector<TensorRef> &outputs) {
    check_output_types(call, inputs, outputs);
    check_kernel_storage(call, inputs, outputs, "GPU", {});
    if (is_staged(call)) return run_staged(ex, call, inputs, outputs);
    const std::string family = op_info(call.kind).family;
    if (family == "matmul") return run_matmul(ex, call, inputs, outputs);
    if (family == "elementwise") return run_elementwise(ex, call, inputs, outputs);
    if (family == "softmax") return run_softmax(ex, call, inputs, outputs);
    if (family == "norm") return run_norm(ex, call, inputs, outputs);
    if (family == "conv") return run_conv(ex, call, inputs, outputs);
    if (family == "layout") return run_layout(ex, call, inputs, outputs);
    if (family == "misc") return run_misc(ex, call, inputs, outputs);
    if (family == "optim") return run_optim(ex, call, inputs, outputs);
    TESSERA_INTERNAL_ASSERT(false, "no GPU kernels for operator family '", family, "'");
}

}  // namespace tessera::gpu
