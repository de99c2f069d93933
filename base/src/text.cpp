#include "tessera/text.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <limits>

namespace tessera {

namespace {

// `v` (>= 0) with three significant digits (all its digits from 100 up), then the unit.
std::string three_digits(double v, const char *unit) {
    char buf[64];
    const char *format = v < 9.995 ? "%.2f %s" : v < 99.95 ? "%.1f %s" : "%.0f %s";
    std::snprintf(buf, sizeof buf, format, v, unit);
    return buf;
}

}  // namespace

std::string format_bytes(int64_t bytes) {
    if (bytes < 0) return "-" + format_bytes(bytes == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -bytes);
    if (bytes < 1024) return std::to_string(bytes) + " B";
    static const char *units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = static_cast<double>(bytes) / 1024;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    return three_digits(v, units[u]);
}

std::string format_duration(double s) {
    if (std::isnan(s)) return "n/a";
    if (s < 0) return "-" + format_duration(-s);
    if (std::isinf(s)) return "inf";
    if (s == 0) return "0 s";
    if (s < 999.5e-9) return three_digits(s * 1e9, "ns");
    if (s < 999.5e-6) return three_digits(s * 1e6, "us");
    if (s < 999.5e-3) return three_digits(s * 1e3, "ms");
    if (s < 59.95) return three_digits(s, "s");
    char buf[64];
    const auto whole = static_cast<int64_t>(std::llround(s));
    if (whole < 3600)
        std::snprintf(buf, sizeof buf, "%lld min %02lld s", static_cast<long long>(whole / 60),
                      static_cast<long long>(whole % 60));
    else
        std::snprintf(buf, sizeof buf, "%lld h %02lld min", static_cast<long long>(whole / 3600),
                      static_cast<long long>(whole / 60 % 60));
    return buf;
}

std::string count_of(int64_t n, const std::string &noun) {
    return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string with_commas(int64_t v) {
    // The magnitude as unsigned, so that the most negative value has one too.
    const uint64_t magnitude = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    const std::string digits = std::to_string(magnitude);
    std::string out;
    for (size_t i = 0; i < digits.size(); i++) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return v < 0 ? "-" + out : out;
}

std::string strf(const char *format, ...) {
    va_list args, copy;
    va_start(args, format);
    va_copy(copy, args);
    int n = std::vsnprintf(nullptr, 0, format, copy);
    va_end(copy);
    std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
    if (n > 0) std::vsnprintf(s.data(), s.size() + 1, format, args);
    va_end(args);
    return s;
}

std::string html_escape(const std::string &s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
        }
    }
    return out;
}

std::string join(const std::vector<std::string> &items, const std::string &sep) {
    std::string out;
    for (size_t i = 0; i < items.size(); i++) out += (i ? sep : "") + items[i];
    return out;
}

std::vector<std::string> split_list(const std::string &text) {
    std::vector<std::string> out;
    size_t start = 0;
    while (true) {
        size_t comma = text.find(',', start);
        std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
        out.push_back(b == std::string::npos ? "" : item.substr(b, e - b + 1));
        if (comma == std::string::npos) return out;
        start = comma + 1;
    }
}

TextTable::TextTable(std::vector<std::string> header, std::vector<bool> right) : right_(std::move(right)) {
    right_.resize(header.size(), false);
    rows_.push_back(std::move(header));
}

void TextTable::add(std::vector<std::string> row) {
    row.resize(rows_[0].size());
    rows_.push_back(std::move(row));
}

std::string TextTable::str(const std::string &indent) const {
    std::vector<size_t> width(rows_[0].size(), 0);
    for (const auto &r : rows_)
        for (size_t c = 0; c < r.size(); c++) width[c] = std::max(width[c], r[c].size());
    std::string s;
    for (const auto &r : rows_) {
        std::string line = indent;
        for (size_t c = 0; c < r.size(); c++) {
            std::string pad(width[c] - r[c].size(), ' ');
            line += right_[c] ? pad + r[c] : r[c] + (c + 1 < r.size() ? pad : "");
            if (c + 1 < r.size()) line += "  ";
        }
        while (!line.empty() && line.back() == ' ') line.pop_back();
        s += line + "\n";
    }
    return s;
}

}  // namespace tessera
