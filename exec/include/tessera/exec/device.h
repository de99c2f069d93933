// The device-neutral interface of a device: one memory arena, five streams
// (program/stream.h: compute, swap-out, swap-in, comm, host), events, and memory counters. The CPU device (cpu_device.h) implements it with
// threads; a CUDA device implements it with CUDA streams and events. Nothing here
// includes CUDA.
//
// Memory policy. A device owns exactly one arena, allocated once when the device
// is created and freed when it is destroyed. Tessera never allocates device
// memory per tensor and has no caching allocator: every tensor's place in the
// arena is a static offset chosen by the memory plan (memory_plan.h) before the
// first step, so a run that starts cannot run out of memory later, and the peak
// is known before anything runs. Host memory that device copies need (swap
// buffers, staging) is likewise allocated once per run, never per tensor.
//
// Counter policy. The arena itself says nothing about which bytes hold live
// data, so the executor tells the device: it adds a tensor's bytes when the
// tensor's producer is about to run and subtracts them after its last reader
// has run, in stream order (on the stream thread for the CPU device, in host
// callbacks for CUDA). The device keeps
//   * live_bytes: bytes of tensors live now;
//   * peak_live_bytes: the most live_bytes seen since reset_peak();
//   * arena_high_water: the largest offset + size touched since reset_peak(),
//     by a kernel or a copy: how much of the arena a run really needs;
//   * swap_out_bytes / swap_in_bytes: bytes copied device-to-host / host-to-device
//     by swap instructions; comm_bytes: bytes sent by collectives.
// Counters are atomics: streams update them concurrently. Tests compare them
// with what the plans predict (docs/design.md, "Invariants").
//
// Stream model: the CUDA model. A stream is an ordered queue of work. An event is
// recorded at a point of one stream's queue and waited on by another: work that
// the waiting stream receives after wait() starts only once everything before
// the recorded point has completed. wait() refers to the most recent record()
// made before it (on the host), and waiting on an event never recorded is a
// no-op, as in CUDA. Because a wait can only refer to a record already issued,
// a program built of these operations cannot deadlock.
//
// Errors: an exception thrown by work on a stream is captured; the stream skips
// its remaining work (still completing its event records, so other streams never
// hang) until the error is reported by synchronize(), which rethrows it with the
// stream's name. tessera::Error stays tessera::Error; anything else becomes an
// InternalError.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/graph/box.h"
#include "tessera/lang/kernels.h"
#include "tessera/program/stream.h"  // StreamKind

namespace tessera {

// A point in one stream's work. Create with Device::create_event(); keep it
// alive until the device has been synchronized after its last use.
class Event {
public:
    virtual ~Event() = default;
    // Whether the work before the most recent record() has completed (true
    // when never recorded).
    virtual bool query() = 0;
    // Blocks the host until query() would return true.
    virtual void synchronize() = 0;
};

class Stream {
public:
    virtual ~Stream() = default;
    virtual StreamKind kind() const = 0;
    // Host work, run in stream order. The CPU device runs it on the stream's
    // thread; a CUDA device as a host function (cudaLaunchHostFunc).
    virtual void enqueue(std::function<void()> work) = 0;
    // Marks the current end of this stream's queue.
    virtual void record(Event &event) = 0;
    // Work enqueued on this stream after this call waits for `event`'s most
    // recent record() to complete.
    virtual void wait(Event &event) = 0;
    // Blocks until everything enqueued so far has run; rethrows a captured error.
    virtual void synchronize() = 0;
};

// For Stream implementations: rethrows a captured error with the stream's name
// ("on the compute stream: ..."), keeping the tier (tessera::Error or not).
[[noreturn]] void rethrow_stream_error(StreamKind kind, std::exception_ptr error);

// Host memory for a device's copies, allocated once per run (the swap area):
// page-locked on CUDA, so that copies run at full speed and overlap compute;
// plain 64-byte-aligned memory on the CPU device. Move-only; frees itself.
class PinnedBuffer {
public:
    using Release = void (*)(std::byte *data, size_t bytes);
    PinnedBuffer() = default;
    PinnedBuffer(std::byte *data, size_t bytes, Release release) : data_(data), bytes_(bytes), release_(release) {}
    PinnedBuffer(PinnedBuffer &&o) noexcept { *this = std::move(o); }
    PinnedBuffer &operator=(PinnedBuffer &&o) noexcept;
    PinnedBuffer(const PinnedBuffer &) = delete;
    PinnedBuffer &operator=(const PinnedBuffer &) = delete;
    ~PinnedBuffer();

    std::byte *data() const { return data_; }
    size_t size() const { return bytes_; }

private:
    std::byte *data_ = nullptr;
    size_t bytes_ = 0;
    Release release_ = nullptr;
};

enum class CopyDirection : uint8_t { HostToDevice, DeviceToHost };

struct MemoryCounters {
    int64_t live_bytes = 0;
    int64_t peak_live_bytes = 0;
    int64_t arena_high_water = 0;
    int64_t swap_out_bytes = 0;
    int64_t swap_in_bytes = 0;
    int64_t comm_bytes = 0;
    bool operator==(const MemoryCounters &) const = default;
};

// One box copy on a device (Device::copy_box_async): elements [first,
// first + count) of `region`, in its row-major order, from a buffer holding
// box `from` into one holding box `to` (copy_box's arguments, graph/box.h).
// A side marked packed is instead a dense run of just those `count`
// elements: a collective's send or receive chunk. Elements of 4 or 8 bytes.
struct BoxCopyArgs {
    const void *src = nullptr;
    Box from;
    bool src_packed = false;
    void *dst = nullptr;
    Box to;
    bool dst_packed = false;
    Box region;
    size_t elem = 4;
    int64_t first = 0, count = 0;
};

class Device {
public:
    Device() = default;
    virtual ~Device() = default;
    Device(const Device &) = delete;
    Device &operator=(const Device &) = delete;

    virtual std::string name() const = 0;  // "cpu", "cuda:0"
    virtual int64_t arena_bytes() const = 0;
    // The base of the arena in the device's address space. Only the CPU
    // device's arena is readable from the host; use the copies otherwise.
    virtual std::byte *arena() = 0;

    // Whether the host can read and write the arena directly (the CPU
    // device). When it cannot, collectives stage through pinned host memory.
    virtual bool host_can_address_arena() const { return true; }
    // Whether host work on a stream (Stream::enqueue) is cheap. On CUDA each
    // piece is a host function that stalls its stream for a round trip to a
    // host thread, so the executor keeps per-operator bookkeeping off the
    // streams there.
    virtual bool cheap_stream_host_work() const { return true; }

    virtual Stream &stream(StreamKind kind) = 0;
    // The native handle of a stream, for libraries that issue onto it (NCCL):
    // a cudaStream_t on CUDA; nullptr where there is none (CPU).
    virtual void *native_stream(StreamKind kind) { return nullptr; }
    virtual std::unique_ptr<Event> create_event() = 0;

    // Runs `call` on `stream`, in stream order. `inputs` and `outputs` point
    // into the arena and must stay alive until the stream has run the call.
    // The default enqueues tessera::run_op() (CPU kernels); a CUDA device
    // launches its own kernels.
    virtual void launch_op(StreamKind stream, const OpCall &call, const std::vector<TensorRef> &inputs,
                           const std::vector<TensorRef> &outputs);

    // A stream-ordered copy between the arena and host memory (a swap): the
    // device side must lie inside the arena (checked now: tessera::Error), and
    // both sides must stay valid until the stream has run the copy. The
    // default enqueues a memcpy, for devices whose arena the host can address;
    // a CUDA device issues cudaMemcpyAsync on the stream. Counts nothing: the
    // executor counts swap bytes where it knows what they are for.
    void copy_async(StreamKind stream, void *dst, const void *src, size_t bytes, CopyDirection dir);
    // A stream-ordered copy between two places in the arena (both checked).
    // The default enqueues a memcpy; a CUDA device issues a device-to-device
    // cudaMemcpyAsync.
    void copy_in_arena_async(StreamKind stream, void *dst, const void *src, size_t bytes);
    // A box copy (BoxCopyArgs) in device memory, in stream order: how a
    // collective packs and unpacks its pieces on the device. Both sides must
    // stay valid until the stream has run it. The default enqueues the GPU
    // kernel's body as a loop (exec/src/gpu/box_copy.h); a CUDA device
    // launches it.
    void copy_box_async(StreamKind stream, const BoxCopyArgs &copy);
    // Device memory beside the arena where the comm stream's collectives pack
    // their pieces: comm_workspace_bytes() bytes, made on first use, for the
    // comm stream alone. The default is host memory (for devices whose arena
    // the host can address, and tests); a CUDA device carves it from its
    // workspaces.
    virtual std::byte *comm_workspace();
    virtual size_t comm_workspace_bytes() const { return kDefaultCommWorkspaceBytes; }
    static constexpr size_t kDefaultCommWorkspaceBytes = size_t{32} << 20;

    // Host memory for copy_async(); throws tessera::Error when the host has
    // too little.
    virtual PinnedBuffer allocate_host(size_t bytes);

    // Blocking copies between host memory and the arena, outside stream order:
    // use them only while no stream touches the same bytes (between steps).
    // `dst_dev`/`src_dev` must lie inside the arena (checked: tessera::Error).
    void copy_to_device(void *dst_dev, const void *src_host, size_t bytes);
    void copy_to_host(void *dst_host, const void *src_dev, size_t bytes);

    // Waits for every stream; rethrows the first captured error, naming its stream.
    virtual void synchronize();

    // Counters (see the policy at the top of this file).
    MemoryCounters counters() const;
    void reset_peak();  // peak_live_bytes = live_bytes; arena_high_water = 0
    void reset_counters();  // everything to zero
    void add_live_bytes(int64_t delta);
    void note_arena_use(int64_t end_offset);  // raises arena_high_water to end_offset
    void add_swap_out_bytes(int64_t b) { swap_out_.fetch_add(b, std::memory_order_relaxed); }
    void add_swap_in_bytes(int64_t b) { swap_in_.fetch_add(b, std::memory_order_relaxed); }
    void add_comm_bytes(int64_t b) { comm_.fetch_add(b, std::memory_order_relaxed); }

protected:
    virtual void do_copy_to_device(void *dst_dev, const void *src_host, size_t bytes) = 0;
    virtual void do_copy_to_host(void *dst_host, const void *src_dev, size_t bytes) = 0;
    virtual void do_copy_async(StreamKind stream, void *dst, const void *src, size_t bytes, CopyDirection dir);
    virtual void do_copy_in_arena_async(StreamKind stream, void *dst, const void *src, size_t bytes);
    virtual void do_copy_box_async(StreamKind stream, const BoxCopyArgs &copy);

private:
    // Offset of [p, p + bytes) in the arena; throws when it is not inside.
    int64_t arena_offset(const void *p, size_t bytes, const char *what);

    std::atomic<int64_t> live_{0}, peak_{0}, high_water_{0};
    std::atomic<int64_t> swap_out_{0}, swap_in_{0}, comm_{0};
    std::vector<std::byte> comm_workspace_;  // the default comm_workspace()
};

}  // namespace tessera
