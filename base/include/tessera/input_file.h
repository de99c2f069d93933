// Small input files (machine descriptions, plan files, graph files, programs)
// read whole, but never more than a limit; and every input file checked to be
// a regular file: a path such as /dev/zero or a FIFO must give an error naming
// the file, not block or read forever.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

// Limits by kind of input: a machine description is a few lines; a plan file
// of the largest model with every rank's swap plans is tens of MiB.
inline constexpr int64_t kMaxMachineFileBytes = int64_t{1} << 20;  // 1 MiB
inline constexpr int64_t kMaxJsonFileBytes = int64_t{1} << 30;     // 1 GiB: plans, graphs

// A file descriptor of `path` opened for reading, refused unless `path` is a
// regular file: a FIFO (opened without blocking, so one with no writer cannot
// hang the program), a device or a directory gives tessera::Error "cannot
// read WHAT 'PATH': it is a FIFO, not a regular file". The caller closes it.
int open_regular_file(const std::string &path, const std::string &what);
// The same check for readers that open the path themselves (streams, zlib).
void check_regular_file(const std::string &path, const std::string &what);

// The whole contents of `path`. Throws tessera::Error "cannot read WHAT
// 'PATH': REASON" (WHAT: "the machine description") when it cannot be opened
// or read or is not a regular file, and "WHAT 'PATH' is larger than LIMIT ..." once
// more than `max_bytes` have been read.
std::string read_input_file(const std::string &path, const std::string &what, int64_t max_bytes);

}  // namespace tessera
