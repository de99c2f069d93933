// cuDNN convolutions for the CUDA device (cudnn_conv.h).
#include "cudnn_conv.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "cuda_check.h"
#include "tessera/error.h"
#include "tessera/exec/cuda_device.h"
#include "tessera/tunables.h"

#ifdef TESSERA_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace tessera {

namespace {

// Read when each device is made, so that a test can run both paths.
std::string conv_mode() { return env_choice("TESSERA_CONV", {"auto", "cudnn", "hand"}, "auto", "convolution path"); }

bool conv_log() {
    static const bool on = env_choice("TESSERA_CONV_LOG", {"0", "1"}, "0", "value") == "1";
    return on;
}

}  // namespace

#ifdef TESSERA_HAVE_CUDNN

namespace {


// Runs `issue` once to warm up, then three times between events; the best time in ms.
float best_of_three(cudaStream_t stream, const std::function<void()> &issue) {
    cudaEvent_t start, stop;
    TESSERA_CUDA_CHECK(cudaEventCreate(&start), "cudaEventCreate");
    TESSERA_CUDA_CHECK(cudaEventCreate(&stop), "cudaEventCreate");
    float best = 1e30f;
    issue();
    for (int i = 0; i < 3; i++) {
        TESSERA_CUDA_CHECK(cudaEventRecord(start, stream), "cudaEventRecord");
        issue();
        TESSERA_CUDA_CHECK(cudaEventRecord(stop, stream), "cudaEventRecord");
        TESSERA_CUDA_CHECK(cudaEventSynchronize(stop), "cudaEventSynchronize");
        float ms = 0;
        TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        best = std::min(best, ms);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return best;
}


// One convolution's geometry: x [n, c, h, w], w [co, c, kh, kw], y [n, co, oh, ow].
struct ConvKey {
    int kind;                      // OpKind
    std::array<int64_t, 12> dims;  // n c h w co kh kw sh sw ph pw, device index
    std::string mode;              // TESSERA_CONV
    bool operator<(const ConvKey &o) const { return std::tie(kind, dims, mode) < std::tie(o.kind, o.dims, o.mode); }
};

// What was decided for one key: cuDNN with `algo`, or the hand kernel.
struct ConvChoice {
    bool cudnn = false;
    int algo = 0;
    size_t workspace = 0;
};

// The process's choices (cudnn_conv.h says why process-wide).
std::mutex &choices_mutex() {
    static std::mutex m;
    return m;
}
std::map<ConvKey, ConvChoice> &choices() {
    static std::map<ConvKey, ConvChoice> c;
    return c;
}

// The descriptors of one call.
struct ConvDescriptors {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr;
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    explicit ConvDescriptors(const ConvKey &k) {
        const auto &d = k.dims;
        const auto I = [](int64_t v) { return static_cast<int>(v); };
        const int64_t oh = (d[2] + 2 * d[9] - d[5]) / d[7] + 1, ow = (d[3] + 2 * d[10] - d[6]) / d[8] + 1;
        TESSERA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor");
        TESSERA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor");
        TESSERA_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor");
        TESSERA_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
        TESSERA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, I(d[0]), I(d[1]), I(d[2]), I(d[3])),
                   "cudnnSetTensor4dDescriptor");
        TESSERA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, I(d[0]), I(d[4]), I(oh), I(ow)),
                   "cudnnSetTensor4dDescriptor");
        TESSERA_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, I(d[4]), I(d[1]), I(d[5]), I(d[6])),
                   "cudnnSetFilter4dDescriptor");
        TESSERA_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, I(d[9]), I(d[10]), I(d[7]), I(d[8]), 1, 1,
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                   "cudnnSetConvolution2dDescriptor");
        // Plain fp32 multiply-adds: no TF32 tensor-core arithmetic, as cuBLAS here and the CPU.
        TESSERA_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType");
    }
    ~ConvDescriptors() {
        cudnnDestroyTensorDescriptor(x);
        cudnnDestroyTensorDescriptor(y);
        cudnnDestroyFilterDescriptor(w);
        cudnnDestroyConvolutionDescriptor(conv);
    }
};

// The call's three buffers in cuDNN's roles: x, w, y (or dx, dw, dy).
struct ConvBuffers {
    void *x, *w, *y;
};

ConvBuffers buffers_of(const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out) {
    switch (c.kind) {
    case OpKind::Conv2d: return {in[0].data, in[1].data, out[0].data};          // (x, w) -> y
    case OpKind::Conv2dGradInput: return {out[0].data, in[1].data, in[0].data};  // (dy, w) -> dx
    default: return {in[1].data, out[0].data, in[0].data};                       // (dy, x) -> dw
    }
}

ConvKey key_of(const OpCall &c, const std::vector<TensorRef> &in, const std::vector<TensorRef> &out, int device,
               const std::string &mode) {
    const OpCall d = with_defaults(c);
    const Shape &x = c.kind == OpKind::Conv2d ? in[0].type.shape : c.kind == OpKind::Conv2dGradInput ? out[0].type.shape
                                                                                                    : in[1].type.shape;
    const Shape &w = c.kind == OpKind::Conv2dGradWeight ? out[0].type.shape : in[1].type.shape;
    auto attr = [&](const char *name) { return d.attrs.get_int(d.who(), name); };
    return {static_cast<int>(c.kind),
            {x[0], x[1], x[2], x[3], w[0], w[2], w[3], attr("stride_h"), attr("stride_w"), attr("pad_h"),
             attr("pad_w"), device},
            mode};
}

}  // namespace

struct CudnnConvolutions::Impl {
    int device;
    std::string mode;
    cudnnHandle_t handle = nullptr;
    std::map<ConvKey, std::unique_ptr<ConvDescriptors>> descriptors;

    ConvDescriptors &descriptors_of(const ConvKey &k) {
        auto &d = descriptors[k];
        if (!d) d = std::make_unique<ConvDescriptors>(k);
        return *d;
    }

    void issue(OpKind kind, const ConvDescriptors &d, const ConvBuffers &b, int algo, void *ws, size_t ws_bytes) {
        const float one = 1.0f, zero = 0.0f;
        switch (kind) {
        case OpKind::Conv2d:
            TESSERA_CUDNN_CHECK(cudnnConvolutionForward(handle, &one, d.x, b.x, d.w, b.w, d.conv,
                                               static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, ws_bytes, &zero, d.y,
                                               b.y),
                       "cudnnConvolutionForward");
            return;
        case OpKind::Conv2dGradInput:
            TESSERA_CUDNN_CHECK(cudnnConvolutionBackwardData(handle, &one, d.w, b.w, d.y, b.y, d.conv,
                                                    static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, ws_bytes,
                                                    &zero, d.x, b.x),
                       "cudnnConvolutionBackwardData");
            return;
        default:
            TESSERA_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, &one, d.x, b.x, d.y, b.y, d.conv,
                                                      static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, ws_bytes,
                                                      &zero, d.w, b.w),
                       "cudnnConvolutionBackwardFilter");
        }
    }

    // cuDNN's fastest usable algorithm for the call, by its own timing on
    // these buffers; choice.cudnn false when none is usable.
    ConvChoice find(OpKind kind, const ConvDescriptors &d, const ConvBuffers &b, void *ws, size_t ws_bytes);

    ConvChoice choose(const ConvKey &k, OpKind kind, cudaStream_t stream, const ConvBuffers &b, void *ws,
                      size_t ws_bytes, const std::function<void()> &hand);
};

namespace {

// Fills `best` from Find's results, sorted fastest first: the first that
// succeeded, is deterministic and fits the workspace.
template <class Perf>
ConvChoice first_usable(const Perf *perf, int count, size_t ws_bytes) {
    for (int i = 0; i < count; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
            perf[i].memory <= ws_bytes)
            return {true, static_cast<int>(perf[i].algo), perf[i].memory};
    return {};
}

}  // namespace

ConvChoice CudnnConvolutions::Impl::find(OpKind kind, const ConvDescriptors &d, const ConvBuffers &b, void *ws,
                                         size_t ws_bytes) {
    constexpr int kMax = 16;
    int got = 0;
    if (kind == OpKind::Conv2d) {
        cudnnConvolutionFwdAlgoPerf_t perf[kMax];
        TESSERA_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(handle, d.x, b.x, d.w, b.w, d.conv, d.y, b.y, kMax, &got,
                                                          perf, ws, ws_bytes),
                   "cudnnFindConvolutionForwardAlgorithmEx");
        return first_usable(perf, got, ws_bytes);
    }
    if (kind == OpKind::Conv2dGradInput) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
        TESSERA_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(handle, d.w, b.w, d.y, b.y, d.conv, d.x, b.x, kMax,
                                                               &got, perf, ws, ws_bytes),
                   "cudnnFindConvolutionBackwardDataAlgorithmEx");
        return first_usable(perf, got, ws_bytes);
    }
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
    TESSERA_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(handle, d.x, b.x, d.y, b.y, d.conv, d.w, b.w, kMax, &got,
                                                             perf, ws, ws_bytes),
               "cudnnFindConvolutionBackwardFilterAlgorithmEx");
    return first_usable(perf, got, ws_bytes);
}

ConvChoice CudnnConvolutions::Impl::choose(const ConvKey &k, OpKind kind, cudaStream_t stream, const ConvBuffers &b,
                                           void *ws, size_t ws_bytes, const std::function<void()> &hand) {
    ConvDescriptors &d = descriptors_of(k);
    // Find runs on the handle's stream and waits for it: whatever the stream
    // was given before (this operator's inputs) is done first.
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream), "cudaStreamSynchronize before choosing a convolution");
    ConvChoice c = find(kind, d, b, ws, ws_bytes);
    if (!c.cudnn || mode == "cudnn") return c;
    const float cudnn_ms = best_of_three(stream, [&] { issue(kind, d, b, c.algo, ws, ws_bytes); });
    float hand_ms = 1e30f;
    try {
        hand_ms = best_of_three(stream, hand);
    } catch (const Error &) {
        // The hand kernel cannot run this shape (its workspace is too small): cuDNN can.
    }
    if (conv_log())
        std::fprintf(stderr, "tessera: %s [n %lld c %lld %lldx%lld -> %lld, k %lldx%lld s %lld]: cudnn algo %d %.3f ms, "
                             "hand %.3f ms: %s\n",
                     op_info(kind).name, static_cast<long long>(k.dims[0]), static_cast<long long>(k.dims[1]),
                     static_cast<long long>(k.dims[2]), static_cast<long long>(k.dims[3]),
                     static_cast<long long>(k.dims[4]), static_cast<long long>(k.dims[5]),
                     static_cast<long long>(k.dims[6]), static_cast<long long>(k.dims[7]), c.algo, cudnn_ms, hand_ms,
                     cudnn_ms < hand_ms ? "cudnn" : "hand");
    c.cudnn = cudnn_ms < hand_ms;
    return c;
}

CudnnConvolutions::CudnnConvolutions(int device_index) : impl_(std::make_unique<Impl>()) {
    impl_->device = device_index;
    impl_->mode = conv_mode();
    if (impl_->mode != "hand") TESSERA_CUDNN_CHECK(cudnnCreate(&impl_->handle), "cudnnCreate");
}

CudnnConvolutions::~CudnnConvolutions() {
    impl_->descriptors.clear();
    if (impl_->handle) cudnnDestroy(impl_->handle);
}

bool CudnnConvolutions::run(cudaStream_t stream, void *workspace, size_t workspace_bytes, const OpCall &call,
                            const std::vector<TensorRef> &inputs, const std::vector<TensorRef> &outputs,
                            const std::function<void()> &hand) {
    if (!impl_->handle) return false;
    const ConvKey k = key_of(call, inputs, outputs, impl_->device, impl_->mode);
    const ConvBuffers b = buffers_of(call, inputs, outputs);
    TESSERA_CUDNN_CHECK(cudnnSetStream(impl_->handle, stream), "cudnnSetStream");
    ConvChoice c;
    {
        std::lock_guard lk(choices_mutex());
        auto it = choices().find(k);
        if (it == choices().end())
            it = choices().emplace(k, impl_->choose(k, call.kind, stream, b, workspace, workspace_bytes, hand)).first;
        c = it->second;
    }
    if (!c.cudnn) return false;
    impl_->issue(call.kind, impl_->descriptors_of(k), b, c.algo, workspace, workspace_bytes);
    return true;
}

std::string cudnn_version() {
    const size_t v = cudnnGetVersion();
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

#else  // no cuDNN in this build: the hand kernels always run

struct CudnnConvolutions::Impl {};

CudnnConvolutions::CudnnConvolutions(int) : impl_(std::make_unique<Impl>()) {
    TESSERA_CHECK(conv_mode() != "cudnn", "TESSERA_CONV=cudnn: this build has no cuDNN (configure with cuDNN's "
                  "headers and library beside CUDA's)");
}
CudnnConvolutions::~CudnnConvolutions() = default;

bool CudnnConvolutions::run(cudaStream_t, void *, size_t, const OpCall &, const std::vector<TensorRef> &,
                            const std::vector<TensorRef> &, const std::function<void()> &) {
    return false;
}

std::string cudnn_version() { return ""; }

#endif

}  // namespace tessera
