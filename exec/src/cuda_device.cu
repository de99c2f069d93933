// The CUDA device (cuda_device.h) and the context the GPU kernels run on.
#include "tessera/exec/cuda_device.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <utility>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "cudnn_conv.h"
#include "gpu/box_copy.h"
#include "gpu/ops.h"
#include "tessera/align.h"
#include "tessera/comm/watchdog.h"
#include "tessera/error.h"
#include "tessera/size.h"

namespace tessera {

namespace {


}  // namespace

namespace gpu {

template <class F>
__global__ void for_each_kernel(int64_t n, F f) {
    const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) f(i);
}

// The device context of exec.h: kernels on one stream, GEMMs through cuBLAS.
class CudaExec {
public:
    CudaExec(cudaStream_t stream, cublasHandle_t blas, float *workspace, size_t workspace_bytes)
        : stream_(stream), blas_(blas), ws_(workspace), ws_bytes_(workspace_bytes) {}

    template <class F>
    void for_each(int64_t n, F f) {
        if (n <= 0) return;
        constexpr int kThreads = 256;
        constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // the grid-stride loop covers the rest
        const int64_t blocks = std::min((n + kThreads - 1) / kThreads, kMaxBlocks);
        for_each_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream_>>>(n, f);
        TESSERA_CUDA_CHECK(cudaGetLastError(), "a kernel launch");
    }

    // Row-major GEMMs through cuBLAS's column-major ones (column_major_gemm, exec.h).
    void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
              const float *b, int64_t ldb, float beta, float *c, int64_t ldc, int64_t batch = 1, int64_t stride_a = 0,
              int64_t stride_b = 0, int64_t stride_c = 0) {
        if (m == 0 || n == 0 || batch == 0) return;
        if (k == 0) {
            // cuBLAS leaves C alone when k is 0; the operator means alpha * 0 + beta C.
            TESSERA_INTERNAL_ASSERT(beta == 0.0f, "gemm with k = 0 and beta != 0");
            for (int64_t q = 0; q < batch; q++)
                TESSERA_CUDA_CHECK(cudaMemset2DAsync(c + q * stride_c, ldc * 4, 0, n * 4, m, stream_), "cudaMemset2DAsync");
            return;
        }
        const ColumnMajorGemm g = column_major_gemm(ta, tb, m, n, k, a, lda, stride_a, b, ldb, stride_b);
        const cublasOperation_t op1 = g.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
        const cublasOperation_t op2 = g.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
        const auto I = [](int64_t v) { return static_cast<int>(v); };
        if (batch == 1)
            TESSERA_CUBLAS_CHECK(cublasSgemm(blas_, op1, op2, I(g.m), I(g.n), I(g.k), &alpha, g.first, I(g.ld_first), g.second,
                                   I(g.ld_second), &beta, c, I(ldc)),
                       "cublasSgemm");
        else
            TESSERA_CUBLAS_CHECK(cublasSgemmStridedBatched(blas_, op1, op2, I(g.m), I(g.n), I(g.k), &alpha, g.first,
                                                 I(g.ld_first), g.stride_first, g.second, I(g.ld_second),
                                                 g.stride_second, &beta, c, I(ldc), stride_c, I(batch)),
                       "cublasSgemmStridedBatched");
    }

    float *workspace(size_t bytes) {
        TESSERA_INTERNAL_ASSERT(bytes <= ws_bytes_, "kernel workspace of ", bytes, " bytes asked, ", ws_bytes_,
                                " available");
        return ws_;
    }
    size_t workspace_bytes() const { return ws_bytes_; }
    void fill_zero(void *p, size_t bytes) { TESSERA_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemsetAsync"); }
    void copy(void *dst, const void *src, size_t bytes) {
        TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync");
    }

private:
    cudaStream_t stream_;
    cublasHandle_t blas_;
    float *ws_;
    size_t ws_bytes_;
};

}  // namespace gpu

namespace {

class CudaEvent final : public Event {
public:
    CudaEvent() { TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming), "cudaEventCreateWithFlags"); }
    ~CudaEvent() override { cudaEventDestroy(e_); }
    bool query() override {
        cudaError_t rc = cudaEventQuery(e_);
        if (rc == cudaErrorNotReady) return false;
        TESSERA_CUDA_CHECK(rc, "cudaEventQuery");
        return true;
    }
    void synchronize() override { TESSERA_CUDA_CHECK(cudaEventSynchronize(e_), "cudaEventSynchronize"); }
    cudaEvent_t get() const { return e_; }

private:
    cudaEvent_t e_ = nullptr;
};

cudaEvent_t cuda_event(Event &e) {
    auto *ce = dynamic_cast<CudaEvent *>(&e);
    TESSERA_INTERNAL_ASSERT(ce != nullptr, "an event of another device was used on a CUDA stream");
    return ce->get();
}

// Host work runs as a CUDA host function. As on the CPU device, an exception
// is captured and reported by synchronize(), and the stream's later host work
// is skipped; kernels already queued behind it still run (CUDA cannot take
// them back), which is harmless since the step's results are discarded.
class CudaStream final : public Stream {
public:
    CudaStream(StreamKind kind, int priority) : kind_(kind) {
        TESSERA_CUDA_CHECK(cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, priority), "cudaStreamCreateWithPriority");
    }
    ~CudaStream() override {
        cudaStreamDestroy(s_);
        take_stream_error(s_);  // a later stream may get the same handle
    }

    StreamKind kind() const override { return kind_; }
    cudaStream_t get() const { return s_; }

    void enqueue(std::function<void()> work) override {
        auto item = std::make_unique<HostWork>(HostWork{this, std::move(work)});
        TESSERA_CUDA_CHECK(cudaLaunchHostFunc(s_, &CudaStream::run_host, item.get()), "cudaLaunchHostFunc");
        item.release();  // run_host owns it now
    }
    void record(Event &event) override { TESSERA_CUDA_CHECK(cudaEventRecord(cuda_event(event), s_), "cudaEventRecord"); }
    void wait(Event &event) override {
        TESSERA_CUDA_CHECK(cudaStreamWaitEvent(s_, cuda_event(event), 0), "cudaStreamWaitEvent");
    }
    // Reports, in this order, an error of host work, one of an operation a
    // library issued onto this stream and found failed later (an NCCL
    // all-reduce's watchdog: comm/watchdog.h), and CUDA's own.
    void synchronize() override {
        cudaError_t rc = cudaStreamSynchronize(s_);
        std::exception_ptr error;
        {
            std::lock_guard lk(m_);
            std::swap(error, error_);
            failed_ = false;
        }
        const std::string issued = take_stream_error(s_);
        if (error) rethrow_stream_error(kind_, error);
        if (!issued.empty()) rethrow_stream_error(kind_, std::make_exception_ptr(Error(issued)));
        if (rc != cudaSuccess) {
            try {
                TESSERA_CUDA_CHECK(rc, "cudaStreamSynchronize");
            } catch (...) {
                rethrow_stream_error(kind_, std::current_exception());
            }
        }
    }

private:
    struct HostWork {
        CudaStream *stream;
        std::function<void()> work;
    };
    static void CUDART_CB run_host(void *p) {
        std::unique_ptr<HostWork> item(static_cast<HostWork *>(p));
        CudaStream &s = *item->stream;
        {
            std::lock_guard lk(s.m_);
            if (s.failed_) return;
        }
        try {
            item->work();
        } catch (...) {
            std::lock_guard lk(s.m_);
            if (!s.error_) s.error_ = std::current_exception();
            s.failed_ = true;
        }
    }

    StreamKind kind_;
    cudaStream_t s_ = nullptr;
    std::mutex m_;
    bool failed_ = false;
    std::exception_ptr error_;
};

constexpr int64_t kAlign = 256;

// The operators cuDNN may run (cudnn_conv.h); staged calls never reach it.
bool is_convolution(const OpCall &call) {
    const bool conv = call.kind == OpKind::Conv2d || call.kind == OpKind::Conv2dGradInput ||
                      call.kind == OpKind::Conv2dGradWeight;
    return conv && !is_staged(call);
}

class CudaDevice final : public Device {
public:
    CudaDevice(int index, int64_t arena_bytes) : index_(index), arena_bytes_(arena_bytes) {
        TESSERA_CHECK(arena_bytes > 0, "the CUDA device arena must have a positive size, got ", arena_bytes,
                      " bytes; use e.g. --device-mem 8GiB");
        CudaDeviceInfo info = cuda_device_info(index);
        TESSERA_CUDA_CHECK(cudaSetDevice(index), "cudaSetDevice");
        const int64_t total = align_up(arena_bytes, kAlign) + kCudaWorkspacesBytes;
        TESSERA_CHECK(total <= info.free_bytes, "cannot allocate the cuda:", index, " arena of ", arena_bytes,
                      " bytes (", format_bytes(arena_bytes), ") plus ",
                      format_bytes(kCudaWorkspacesBytes), " of kernel workspace: ",
                      info.name, " has ", format_bytes(info.free_bytes), " free of ", format_bytes(info.total_bytes),
                      "; use a smaller --device-mem");
        void *p = nullptr;
        cudaError_t rc = cudaMalloc(&p, static_cast<size_t>(total));
        TESSERA_CHECK(rc == cudaSuccess, "cannot allocate the cuda:", index, " arena of ", format_bytes(total), ": ",
                      cudaGetErrorString(rc), "; use a smaller --device-mem");
        base_ = static_cast<std::byte *>(p);
        try {
            int least = 0, greatest = 0;
            TESSERA_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
            for (int i = 0; i < kNumStreams; i++) {
                auto kind = static_cast<StreamKind>(i);
                bool swap = kind == StreamKind::SwapIn || kind == StreamKind::SwapOut;
                streams_[i] = std::make_unique<CudaStream>(kind, swap ? greatest : least);
            }
            TESSERA_CUBLAS_CHECK(cublasCreate(&blas_), "cublasCreate");
            // Exact fp32 GEMMs (no TF32), as on the CPU.
            TESSERA_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
            handoff_ = std::make_unique<CudaEvent>();
            convolutions_ = std::make_unique<CudnnConvolutions>(index);
            use_stream_for_ops(cuda_stream(StreamKind::Compute));
        } catch (...) {
            release();
            throw;
        }
        name_ = "cuda:" + std::to_string(index);
    }

    ~CudaDevice() override {
        cudaSetDevice(index_);
        for (auto &s : streams_)
            if (s) cudaStreamSynchronize(s->get());
        release();
    }

    std::string name() const override { return name_; }
    int64_t arena_bytes() const override { return arena_bytes_; }
    std::byte *arena() override { return base_; }
    bool host_can_address_arena() const override { return false; }
    bool cheap_stream_host_work() const override { return false; }

    Stream &stream(StreamKind kind) override { return *streams_.at(static_cast<size_t>(kind)); }
    void *native_stream(StreamKind kind) override { return cuda_stream(kind); }
    std::unique_ptr<Event> create_event() override { return std::make_unique<CudaEvent>(); }

    void launch_op(StreamKind s, const OpCall &call, const std::vector<TensorRef> &inputs,
                   const std::vector<TensorRef> &outputs) override {
        cudaStream_t stream = cuda_stream(s);
        use_stream_for_ops(stream);
        gpu::CudaExec ex(stream, blas_, reinterpret_cast<float *>(kernel_workspace()),
                         static_cast<size_t>(kCudaKernelWorkspaceBytes));
        const auto hand = [&] { gpu::run_op(ex, call, inputs, outputs); };
        if (is_convolution(call) && convolutions_->run(stream, kernel_workspace(),
                                                       static_cast<size_t>(kCudaKernelWorkspaceBytes), call, inputs,
                                                       outputs, hand))
            return;
        hand();
    }

    PinnedBuffer allocate_host(size_t bytes) override {
        void *p = nullptr;
        cudaError_t rc = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault);
        TESSERA_CHECK(rc == cudaSuccess, "cannot allocate ", bytes, " bytes (",
                      format_bytes(static_cast<int64_t>(bytes)), ") of pinned host memory for ", name_, ": ",
                      cudaGetErrorString(rc), "; the host does not have that much page-lockable memory free");
        return PinnedBuffer(static_cast<std::byte *>(p), bytes, [](std::byte *d, size_t) { cudaFreeHost(d); });
    }

protected:
    void do_copy_to_device(void *dst_dev, const void *src_host, size_t bytes) override {
        copy_and_wait(dst_dev, src_host, bytes, cudaMemcpyHostToDevice, "cudaMemcpyAsync to the device");
    }
    void do_copy_to_host(void *dst_host, const void *src_dev, size_t bytes) override {
        copy_and_wait(dst_host, src_dev, bytes, cudaMemcpyDeviceToHost, "cudaMemcpyAsync to the host");
    }
    void do_copy_async(StreamKind s, void *dst, const void *src, size_t bytes, CopyDirection dir) override {
        TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes,
                                   dir == CopyDirection::HostToDevice ? cudaMemcpyHostToDevice
                                                                      : cudaMemcpyDeviceToHost,
                                   cuda_stream(s)),
                   "cudaMemcpyAsync");
    }

    void do_copy_in_arena_async(StreamKind s, void *dst, const void *src, size_t bytes) override {
        TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_stream(s)), "cudaMemcpyAsync");
    }

    // The box copy's kernel on the stream: no cuBLAS and no kernel workspace.
    void do_copy_box_async(StreamKind s, const BoxCopyArgs &copy) override {
        gpu::CudaExec ex(cuda_stream(s), blas_, nullptr, 0);
        ex.for_each(copy.count, gpu::box_copy(copy));
    }

public:
    std::byte *comm_workspace() override { return blas_workspace() + kCudaBlasWorkspaceBytes; }
    size_t comm_workspace_bytes() const override { return static_cast<size_t>(kCudaCommWorkspaceBytes); }

private:
    cudaStream_t cuda_stream(StreamKind s) { return streams_.at(static_cast<size_t>(s))->get(); }

    // The three workspaces (kernel, cuBLAS, comm) follow the arena in its allocation.
    std::byte *kernel_workspace() const { return base_ + align_up(arena_bytes_, kAlign); }
    std::byte *blas_workspace() const { return kernel_workspace() + kCudaKernelWorkspaceBytes; }

    // Makes `stream` the one operators' kernels and GEMMs run on. cuBLAS's
    // stream and workspace are set together, here and nowhere else:
    // cublasSetStream resets the workspace to cuBLAS's own pool, which
    // allocates outside the arena, so the arena's slice is handed back after
    // every change of stream. Both workspaces are one per device, so two
    // streams must never run operators at once: the new stream first waits
    // for what the old one was given (only the compute stream runs operators
    // in a program, so this happens outside steps, if ever).
    void use_stream_for_ops(cudaStream_t stream) {
        if (stream == blas_stream_) return;
        if (blas_stream_ != nullptr) {
            TESSERA_CUDA_CHECK(cudaEventRecord(handoff_->get(), blas_stream_), "cudaEventRecord");
            TESSERA_CUDA_CHECK(cudaStreamWaitEvent(stream, handoff_->get(), 0), "cudaStreamWaitEvent");
        }
        TESSERA_CUBLAS_CHECK(cublasSetStream(blas_, stream), "cublasSetStream");
        TESSERA_CUBLAS_CHECK(cublasSetWorkspace(blas_, blas_workspace(), static_cast<size_t>(kCudaBlasWorkspaceBytes)),
                   "cublasSetWorkspace");
        blas_stream_ = stream;
    }

    // A blocking copy: issued on the compute stream, then waited for. A plain
    // cudaMemcpy runs on the legacy default stream, which the four
    // non-blocking streams do not wait for, and from pageable memory it may
    // return before the DMA has finished, so a kernel issued next on the
    // compute stream could read stale bytes. On the compute stream the copy
    // also follows the compute work already queued.
    void copy_and_wait(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, const char *what) {
        cudaStream_t s = cuda_stream(StreamKind::Compute);
        TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s), what);
        TESSERA_CUDA_CHECK(cudaStreamSynchronize(s), "cudaStreamSynchronize after a blocking copy");
    }

    void release() {
        convolutions_.reset();
        if (blas_) cublasDestroy(blas_);
        blas_ = nullptr;
        handoff_.reset();
        for (auto &s : streams_) s.reset();
        if (base_) cudaFree(base_);
        base_ = nullptr;
    }

    int index_;
    int64_t arena_bytes_;
    std::string name_;
    std::byte *base_ = nullptr;
    std::array<std::unique_ptr<CudaStream>, kNumStreams> streams_;
    cublasHandle_t blas_ = nullptr;
    cudaStream_t blas_stream_ = nullptr;  // the stream operators last ran on
    std::unique_ptr<CudaEvent> handoff_;  // use_stream_for_ops' event
    std::unique_ptr<CudnnConvolutions> convolutions_;
};

}  // namespace

CudaProbe probe_cuda() {
    CudaProbe p;
    int n = 0;
    const cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        cudaGetLastError();  // clear it, as cuda_device_count() does
        p.error = static_cast<int>(rc);
        p.error_name = cudaGetErrorName(rc);
        p.error_text = cudaGetErrorString(rc);
    } else {
        p.device_count = n;
    }
    // Both answer without a device; a failure leaves 0.
    cudaDriverGetVersion(&p.driver_version);
    cudaRuntimeGetVersion(&p.runtime_version);
    return p;
}

int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no device" so later calls start clean
        return 0;
    }
    return n;
}

std::string cuda_unavailable_reason() {
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        cudaGetLastError();
        return std::string("CUDA reports ") + cudaGetErrorString(rc);
    }
    return n == 0 ? "CUDA reports no device" : "";
}

std::string cuda_versions() {
    int runtime = 0, driver = 0;
    // Both answer without a device; a failure leaves 0, shown as "none".
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    auto version = [](int v) {
        return v == 0 ? std::string("none") : std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
    };
    return "runtime " + version(runtime) + ", driver " + version(driver);
}

CudaDeviceInfo cuda_device_info(int index) {
    int n = cuda_device_count();
    TESSERA_CHECK(n > 0, "no CUDA device is usable: ", cuda_unavailable_reason(), "; use --device cpu");
    TESSERA_CHECK(index >= 0 && index < n, "CUDA device ", index, " does not exist; this machine has ", n,
                  n == 1 ? " (device 0)" : " (devices 0 to " + std::to_string(n - 1) + ")");
    cudaDeviceProp prop{};
    TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
    CudaDeviceInfo info;
    info.index = index;
    info.name = prop.name;
    info.major = prop.major;
    info.minor = prop.minor;
    // The free memory needs a context on `index`. Switching back afterwards
    // would make one on the previous device too (cudaSetDevice makes the
    // primary context since CUDA 12): on device 0, for every rank of a host.
    // So `index` stays current (cuda_device.h).
    TESSERA_CUDA_CHECK(cudaSetDevice(index), "cudaSetDevice");
    size_t free_b = 0, total_b = 0;
    TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    info.free_bytes = static_cast<int64_t>(free_b);
    info.total_bytes = static_cast<int64_t>(total_b);
    return info;
}

std::unique_ptr<Device> make_cuda_device(int index, int64_t arena_bytes) {
    return std::make_unique<CudaDevice>(index, arena_bytes);
}

}  // namespace tessera
