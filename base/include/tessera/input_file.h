// Small input files (machine descriptions, plan files, graph files, programs)
// read whole, but never more than a limit: a path such as /dev/zero or a FIFO
// that never ends must give an error naming the file and the limit, not read
// forever or exhaust memory.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

// Limits by kind of input: a machine description is a few lines; a plan file
// of the largest model with every rank's swap plans is tens of MiB.
inline constexpr int64_t kMaxMachineFileBytes = int64_t{1} << 20;  // 1 MiB
inline constexpr int64_t kMaxJsonFileBytes = int64_t{1} << 30;     // 1 GiB: plans, graphs

// The whole contents of `path`. Throws tessera::Error "cannot read WHAT
// 'PATH': REASON" (WHAT: "the machine description") when it cannot be opened
// or read or is a directory, and "WHAT 'PATH' is larger than LIMIT ..." once
// more than `max_bytes` have been read.
std::string read_input_file(const std::string &path, const std::string &what, int64_t max_bytes);

}  // namespace tessera
