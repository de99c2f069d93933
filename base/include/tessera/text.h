// Small text helpers every module's messages and views share: one way to
// print a byte count, a duration and a large integer, and one plain-text
// table, so that a number reads the same in a plan table, an error and a
// progress line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

// Three significant digits in powers of 1024, so that columns of sizes read at
// a glance: "0 B", "512 B", "1.50 KiB", "12.3 MiB", "123 GiB"; negative
// counts with a leading "-".
std::string format_bytes(int64_t bytes);

// Seconds in the same style: three significant digits of ns, us, ms or s below
// a minute ("950 ns", "12.3 us", "1.50 ms", "2.00 s", "59.0 s"), then minutes
// and seconds ("4 min 05 s") and hours and minutes ("2 h 03 min"); "0 s",
// "n/a" for NaN, "inf", and a leading "-" for negative durations.
std::string format_duration(double seconds);

// `n` and the noun, plural unless n is 1: "1 rank", "3 ranks" (nouns that
// take an "s").
std::string count_of(int64_t n, const std::string &noun);

// An integer with its thousands separated by commas: "1,576,036", "-1,024",
// "512"; for byte counts exact to the byte beside format_bytes' rounding.
std::string with_commas(int64_t v);

// printf into a std::string, checked against its arguments like printf.
std::string strf(const char *format, ...) __attribute__((format(printf, 1, 2)));

// `s` with &, <, >, " and ' replaced by HTML entities.
std::string html_escape(const std::string &s);

// The items with `sep` between them.
std::string join(const std::vector<std::string> &items, const std::string &sep);
// "a, b,c" -> {"a", "b", "c"}: the items of a comma-separated list, each
// trimmed of spaces and tabs (an empty item stays, as "").
std::vector<std::string> split_list(const std::string &text);

// A plain-text table for terminals and logs: the header, then the rows, each
// column padded to its widest cell and separated by two spaces; right-aligned
// columns (numbers) pad on the left. Trailing spaces are dropped from every
// line, so a table diffs cleanly.
class TextTable {
public:
    // `right[c]`: column c is right-aligned; missing entries are left-aligned.
    TextTable(std::vector<std::string> header, std::vector<bool> right);
    // A row with fewer cells than the header is padded with empty ones; one
    // with more is cut to the header's width.
    void add(std::vector<std::string> row);
    // Every line starts with `indent` and ends with a newline.
    std::string str(const std::string &indent = "  ") const;

private:
    std::vector<std::vector<std::string>> rows_;  // rows_[0] is the header
    std::vector<bool> right_;
};

}  // namespace tessera
