// The four streams of a device, in the CUDA model: each an ordered queue of
// work, ordered against the others only by events. A program binds each
// instruction to one of them; the device (exec/device.h) runs them.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

enum class StreamKind : uint8_t { Compute, SwapOut, SwapIn, Comm };
inline constexpr int kNumStreams = 4;
const char *stream_name(StreamKind s);  // "compute", "swap-out", "swap-in", "comm"
// Throws tessera::Error listing the valid names.
StreamKind stream_from_name(const std::string &name);

}  // namespace tessera
