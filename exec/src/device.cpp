#include "tessera/exec/device.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>

#include "gpu/box_copy.h"
#include "tessera/error.h"
#include "tessera/size.h"

namespace tessera {

namespace {

void raise_to(std::atomic<int64_t> &a, int64_t v) {
    int64_t cur = a.load(std::memory_order_relaxed);
    while (v > cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
    }
}

}  // namespace

void rethrow_stream_error(StreamKind kind, std::exception_ptr error) {
    TESSERA_INTERNAL_ASSERT(error != nullptr);
    std::string where = std::string("on the ") + stream_name(kind) + " stream: ";
    try {
        std::rethrow_exception(error);
    } catch (const Error &e) {
        throw Error(where + e.what());
    } catch (const InternalError &e) {
        throw InternalError(where + e.what());
    } catch (const std::exception &e) {
        throw InternalError(where + e.what() + " (please report this as a bug)");
    } catch (...) {
        throw InternalError(where + "a non-standard exception (please report this as a bug)");
    }
}

void Device::launch_op(StreamKind s, const OpCall &call, const std::vector<TensorRef> &inputs,
                       const std::vector<TensorRef> &outputs) {
    // Pointers, not copies: the closure stays small enough for std::function's
    // inline storage, so a launch allocates nothing.
    stream(s).enqueue([c = &call, in = &inputs, out = &outputs] { run_op(*c, *in, *out); });
}

PinnedBuffer &PinnedBuffer::operator=(PinnedBuffer &&o) noexcept {
    if (this != &o) {
        if (release_) release_(data_, bytes_);
        data_ = std::exchange(o.data_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
        release_ = std::exchange(o.release_, nullptr);
    }
    return *this;
}

PinnedBuffer::~PinnedBuffer() {
    if (release_) release_(data_, bytes_);
}

PinnedBuffer Device::allocate_host(size_t bytes) {
    constexpr std::align_val_t kAlign{64};
    void *p = ::operator new(std::max<size_t>(bytes, 1), kAlign, std::nothrow);
    TESSERA_CHECK(p != nullptr, "cannot allocate ", bytes, " bytes (", format_bytes(static_cast<int64_t>(bytes)),
                  ") of host memory for the ", name(), " device's copies; the host does not have that much free");
    return PinnedBuffer(static_cast<std::byte *>(p), bytes,
                        [](std::byte *d, size_t) { ::operator delete(d, std::align_val_t{64}); });
}

void Device::copy_async(StreamKind s, void *dst, const void *src, size_t bytes, CopyDirection dir) {
    bool to_device = dir == CopyDirection::HostToDevice;
    int64_t off = arena_offset(to_device ? dst : src, bytes, to_device ? "copy_async to the device" :
                                                                         "copy_async to the host");
    if (bytes == 0) return;
    note_arena_use(off + static_cast<int64_t>(bytes));
    do_copy_async(s, dst, src, bytes, dir);
}

void Device::do_copy_async(StreamKind s, void *dst, const void *src, size_t bytes, CopyDirection) {
    stream(s).enqueue([dst, src, bytes] { std::memcpy(dst, src, bytes); });
}

void Device::copy_in_arena_async(StreamKind s, void *dst, const void *src, size_t bytes) {
    int64_t to = arena_offset(dst, bytes, "copy_in_arena_async to");
    int64_t from = arena_offset(src, bytes, "copy_in_arena_async from");
    if (bytes == 0) return;
    note_arena_use(std::max(to, from) + static_cast<int64_t>(bytes));
    do_copy_in_arena_async(s, dst, src, bytes);
}

void Device::do_copy_in_arena_async(StreamKind s, void *dst, const void *src, size_t bytes) {
    stream(s).enqueue([dst, src, bytes] { std::memmove(dst, src, bytes); });
}

void Device::copy_box_async(StreamKind s, const BoxCopyArgs &copy) {
    if (copy.count == 0) return;
    do_copy_box_async(s, copy);
}

void Device::do_copy_box_async(StreamKind s, const BoxCopyArgs &copy) {
    stream(s).enqueue([k = gpu::box_copy(copy), n = copy.count] {
        for (int64_t i = 0; i < n; i++) k(i);
    });
}

std::byte *Device::comm_workspace() {
    if (comm_workspace_.empty()) comm_workspace_.resize(comm_workspace_bytes());
    return comm_workspace_.data();
}

int64_t Device::arena_offset(const void *p, size_t bytes, const char *what) {
    auto base = reinterpret_cast<uintptr_t>(arena());
    auto addr = reinterpret_cast<uintptr_t>(p);
    auto size = static_cast<uint64_t>(arena_bytes());
    TESSERA_CHECK(addr >= base && addr - base <= size && bytes <= size - (addr - base), what, ": ", bytes,
                  " bytes at address ", p, " are not inside the ", name(), " arena [", static_cast<void *>(arena()),
                  ", +", arena_bytes(), " bytes)");
    return static_cast<int64_t>(addr - base);
}

void Device::copy_to_device(void *dst_dev, const void *src_host, size_t bytes) {
    int64_t off = arena_offset(dst_dev, bytes, "copy_to_device");
    if (bytes == 0) return;
    do_copy_to_device(dst_dev, src_host, bytes);
    note_arena_use(off + static_cast<int64_t>(bytes));
}

void Device::copy_to_host(void *dst_host, const void *src_dev, size_t bytes) {
    int64_t off = arena_offset(src_dev, bytes, "copy_to_host");
    if (bytes == 0) return;
    do_copy_to_host(dst_host, src_dev, bytes);
    note_arena_use(off + static_cast<int64_t>(bytes));
}

void Device::synchronize() {
    // Every stream is drained (and its error cleared) even when an earlier one
    // failed, so the device is usable again afterwards.
    std::exception_ptr first;
    for (int i = 0; i < kNumStreams; i++) {
        try {
            stream(static_cast<StreamKind>(i)).synchronize();
        } catch (...) {
            if (!first) first = std::current_exception();
        }
    }
    if (first) std::rethrow_exception(first);
}

MemoryCounters Device::counters() const {
    MemoryCounters c;
    c.live_bytes = live_.load();
    c.peak_live_bytes = peak_.load();
    c.arena_high_water = high_water_.load();
    c.swap_out_bytes = swap_out_.load();
    c.swap_in_bytes = swap_in_.load();
    c.comm_bytes = comm_.load();
    return c;
}

void Device::reset_peak() {
    peak_.store(live_.load());
    high_water_.store(0);
}

void Device::reset_counters() {
    for (auto *a : {&live_, &peak_, &high_water_, &swap_out_, &swap_in_, &comm_}) a->store(0);
}

void Device::add_live_bytes(int64_t delta) {
    int64_t now = live_.fetch_add(delta, std::memory_order_relaxed) + delta;
    raise_to(peak_, now);
}

void Device::note_arena_use(int64_t end_offset) { raise_to(high_water_, end_offset); }

}  // namespace tessera
