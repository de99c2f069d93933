// JSON that comes from outside the process: plan, graph, machine and program
// files, safetensors headers, checkpoint metadata. Every reader of such input
// parses through parse_json_input and quotes values in its errors through
// json_preview, so that hostile input cannot exhaust the stack:
//
//   * nlohmann's own parser is iterative, but printing (dump) and destroying
//     a value recurse once per level, so 100,000 nested '[' crash the process
//     when an error quotes the value. parse_json_input scans the bytes first
//     and refuses anything nested deeper than kMaxJsonDepth, before nlohmann
//     sees it. Tessera's own files nest a handful of levels.
//   * json_preview prints a bounded, shallow preview of a value (a few levels,
//     a few dozen characters), never the whole of it.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera {

inline constexpr int kMaxJsonDepth = 64;

// Parses `text` (from `source`, which starts every error). Throws
// tessera::Error "SOURCE: not valid JSON (...)" for a syntax error and
// "SOURCE: JSON nested deeper than 64 levels ..." for deep nesting. `callback`
// is nlohmann's parser callback (e.g. to notice repeated keys), if any.
nlohmann::json parse_json_input(const std::string &text, const std::string &source,
                                const nlohmann::json::parser_callback_t &callback = nullptr);

// A value for an error message: its JSON text, cut at `max_chars` characters
// (with "...") and at two levels of nesting ("[1, [2, [...]]]"). Printing it
// visits at most about `max_chars` elements, however large or deep the value.
std::string json_preview(const nlohmann::json &value, size_t max_chars = 60);

// Refuses a key of the object `j` that is not in `known`: tessera::Error
// "WHERE: unknown field 'KEY' (expected A, B, C)". A misspelt optional field
// would otherwise be silently ignored.
void check_known_keys(const nlohmann::json &j, std::initializer_list<const char *> known, const std::string &where);

}  // namespace tessera
