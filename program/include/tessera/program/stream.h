// The five streams of a device, in the CUDA model: each an ordered queue of
// work, ordered against the others only by events. A program binds each
// instruction to one of them; the device (exec/device.h) runs them. The host
// stream runs operators on the host, over host memory (the swap planner's
// host-side optimizer updates): CPU kernels on a host thread, ordered with the
// device's streams by the same events.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

enum class StreamKind : uint8_t { Compute, SwapOut, SwapIn, Comm, Host };
inline constexpr int kNumStreams = 5;
const char *stream_name(StreamKind s);  // "compute", "swap-out", "swap-in", "comm", "host"
// Throws tessera::Error listing the valid names.
StreamKind stream_from_name(const std::string &name);

}  // namespace tessera
