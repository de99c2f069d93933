// Small text helpers shared by the planners' views and the executor's messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

// "512 B", "1.50 KiB", "22.22 MiB": powers of 1024, two decimals.
std::string format_bytes(int64_t bytes);
// `s` with &, <, >, " and ' replaced by HTML entities.
std::string html_escape(const std::string &s);

// The items with `sep` between them.
std::string join(const std::vector<std::string> &items, const std::string &sep);

}  // namespace tessera
