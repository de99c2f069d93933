// The CPU device: the arena is one aligned host allocation and each stream is a
// worker thread with its own queue, so that the overlap of compute, swap and
// communication is real and runs in CI without a GPU.
#pragma once

#include <array>
#include <memory>

#include "tessera/exec/device.h"

namespace tessera {

class CpuStream;

class CpuDevice final : public Device {
public:
    // Allocates the whole arena (64-byte aligned, exactly `arena_bytes`) and
    // starts one thread per stream. Throws tessera::Error when the arena cannot
    // be allocated or `arena_bytes` is not positive.
    explicit CpuDevice(int64_t arena_bytes);
    // Finishes the queued work, then joins the threads and frees the arena.
    ~CpuDevice() override;

    std::string name() const override { return "cpu"; }
    int64_t arena_bytes() const override { return arena_bytes_; }
    std::byte *arena() override { return arena_; }

    Stream &stream(StreamKind kind) override;
    std::unique_ptr<Event> create_event() override;

    static constexpr size_t kAlignment = 64;

protected:
    void do_copy_to_device(void *dst_dev, const void *src_host, size_t bytes) override;
    void do_copy_to_host(void *dst_host, const void *src_dev, size_t bytes) override;

private:
    int64_t arena_bytes_;
    std::byte *arena_ = nullptr;
    std::array<std::unique_ptr<CpuStream>, kNumStreams> streams_;
};

}  // namespace tessera
