// Byte sizes as people write them on a command line ("512MiB", "1.5GB") and as
// Tessera prints them ("1.50 MiB").
#pragma once

#include <cstdint>
#include <string>

#include "tessera/text.h"  // format_bytes

namespace tessera {

// Parses a positive byte count: a decimal number (digits, optionally one '.'
// and more digits) followed by an optional unit. Units are case-insensitive:
// B; KiB, MiB, GiB, TiB (powers of 1024); KB, MB, GB, TB (powers of 1000); the
// trailing B may be left out ("512Mi", "2G"). A fractional result is rounded to
// the nearest byte. Throws tessera::Error naming `what` (a flag or file field,
// e.g. "--device-mem") for anything else, zero, or more than 2^63-1 bytes.
int64_t parse_size(const std::string &text, const std::string &what);

// The shortest size flag that parse_size() reads back as at least `bytes`,
// rounded up to a whole KiB, MiB or tenth of a GiB: "12MiB" for 12345678. Error
// messages use it to say which budget would work.
std::string size_flag_at_least(int64_t bytes);

}  // namespace tessera
