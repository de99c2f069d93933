// Convolutions through cuDNN on the CUDA device, where cuDNN is measured
// faster than the hand kernels (gpu/ops_conv.h), which stay as the fallback
// and as the reference the host can test.
//
// The three operators conv2d, conv2d_grad_input and conv2d_grad_weight map
// onto cudnnConvolutionForward, cudnnConvolutionBackwardData and
// cudnnConvolutionBackwardFilter (NCHW, fp32, cross-correlation). The legacy
// API rather than the graph API: it is still in cuDNN 9 (deprecated, not
// removed), its Find functions time every algorithm on the real buffers, and
// Tessera asks cuDNN for single convolutions, never for the fused graphs that
// only the graph API can express.
//
// The choice is made once per operator and shape, the first time one runs,
// and kept for the process (so that two runs of one shape in one process,
// swapped and not, run the same kernels): cuDNN's fastest algorithm that is
// deterministic, needs no more workspace than the kernel workspace, and uses
// plain fp32 arithmetic (CUDNN_FMA_MATH: no TF32, as on the CPU), against the
// hand kernel, each timed with CUDA events on the operator's stream (the
// better of three runs after one warm-up). The faster one runs from then on.
//
// TESSERA_CONV=auto (default) | cudnn | hand forces one side; cudnn still
// falls back to the hand kernel for a shape no algorithm fits.
// TESSERA_CONV_LOG=1 prints each choice with both times to stderr.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "tessera/lang/kernels.h"
#include "tessera/lang/op.h"

namespace tessera {

class CudnnConvolutions {
public:
    explicit CudnnConvolutions(int device_index);
    ~CudnnConvolutions();
    CudnnConvolutions(const CudnnConvolutions &) = delete;
    CudnnConvolutions &operator=(const CudnnConvolutions &) = delete;

    // Runs `call` (one of the three convolutions) on `stream` through cuDNN
    // and returns true, or returns false when the hand kernel is to run
    // instead (the caller then runs it). `hand` issues the hand kernel on
    // `stream`; it is called only while choosing, for timing.
    bool run(cudaStream_t stream, void *workspace, size_t workspace_bytes, const OpCall &call,
             const std::vector<TensorRef> &inputs, const std::vector<TensorRef> &outputs,
             const std::function<void()> &hand);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
