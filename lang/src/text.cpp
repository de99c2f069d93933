#include "tessera/text.h"

#include <cstdio>

namespace tessera {

std::string format_bytes(int64_t bytes) {
    static const char *units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024 && bytes > -1024) return std::to_string(bytes) + " B";
    double v = static_cast<double>(bytes);
    int u = -1;
    while ((v >= 1024 || v <= -1024) && u < 5) {
        v /= 1024;
        u++;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
    return buf;
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

}  // namespace tessera
