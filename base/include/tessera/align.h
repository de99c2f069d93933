// Rounding a byte count up to an alignment: arena offsets (64 bytes, the
// memory plan and the swap planner), CUDA workspaces (256 bytes).
#pragma once

#include <cstdint>

namespace tessera {

// The least multiple of `alignment` (> 0) that is at least `bytes` (>= 0).
constexpr int64_t align_up(int64_t bytes, int64_t alignment) {
    return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace tessera
