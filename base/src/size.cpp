#include "tessera/size.h"

#include <cctype>
#include <cstdio>
#include <limits>

#include "tessera/error.h"

namespace tessera {

namespace {

constexpr const char *kExamples = "use e.g. 512MiB or 2GiB";

std::string lower(std::string s) {
    for (char &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// Bytes per unit, or 0 for a string that is not a unit.
int64_t unit_multiplier(const std::string &unit) {
    std::string u = lower(unit);
    if (u.empty() || u == "b") return 1;
    if (u.back() == 'b') u.pop_back();
    bool binary = u.size() == 2 && u[1] == 'i';
    if (u.size() != 1 && !binary) return 0;
    int power;
    switch (u[0]) {
    case 'k': power = 1; break;
    case 'm': power = 2; break;
    case 'g': power = 3; break;
    case 't': power = 4; break;
    default: return 0;
    }
    int64_t m = 1;
    for (int i = 0; i < power; i++) m *= binary ? 1024 : 1000;
    return m;
}

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

}  // namespace

int64_t parse_size(const std::string &text, const std::string &what) {
    size_t b = text.find_first_not_of(" \t"), e = text.find_last_not_of(" \t");
    std::string s = b == std::string::npos ? "" : text.substr(b, e - b + 1);
    auto not_a_size = [&]() {
        fail(what, ": '", text, "' is not a size; ", kExamples,
             " (units: B, KiB, MiB, GiB, TiB are powers of 1024; KB, MB, GB, TB powers of 1000)");
    };
    if (!s.empty() && s[0] == '-') fail(what, ": '", text, "' is negative; a size must be positive, ", kExamples);

    size_t i = 0;
    std::string int_digits, frac_digits;
    while (i < s.size() && is_digit(s[i])) int_digits += s[i++];
    if (i < s.size() && s[i] == '.') {
        i++;
        while (i < s.size() && is_digit(s[i])) frac_digits += s[i++];
    }
    if (int_digits.empty() && frac_digits.empty()) not_a_size();
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) i++;  // "16 MiB"
    int64_t mult = unit_multiplier(s.substr(i));
    if (mult == 0) not_a_size();

    auto too_large = [&]() {
        fail(what, ": '", text, "' is too large; the most Tessera can address is ",
             std::numeric_limits<int64_t>::max(), " bytes");
    };
    // Exact integer arithmetic, so that "1.5GB" is exactly 1500000000 bytes.
    constexpr __int128 kMax = std::numeric_limits<int64_t>::max();
    __int128 whole = 0;
    for (char c : int_digits) {
        whole = whole * 10 + (c - '0');
        if (whole > kMax) too_large();
    }
    __int128 bytes = whole * mult;
    if (bytes > kMax) too_large();
    if (frac_digits.size() > 18) frac_digits.resize(18);  // beyond a byte's precision
    if (!frac_digits.empty()) {
        __int128 frac = 0, scale = 1;
        for (char c : frac_digits) {
            frac = frac * 10 + (c - '0');
            scale *= 10;
        }
        bytes += (2 * frac * mult + scale) / (2 * scale);  // round to nearest
        if (bytes > kMax) too_large();
    }
    if (bytes == 0) fail(what, ": '", text, "' is zero bytes; a size must be positive, ", kExamples);
    return static_cast<int64_t>(bytes);
}

std::string size_flag_at_least(int64_t bytes) {
    constexpr int64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024;
    auto ceil_div = [](int64_t a, int64_t b) { return a / b + (a % b != 0); };
    if (bytes <= 0) return "1B";
    if (bytes < KiB) return std::to_string(bytes) + "B";
    if (bytes <= MiB) return std::to_string(ceil_div(bytes, KiB)) + "KiB";
    if (bytes <= 16 * GiB) return std::to_string(ceil_div(bytes, MiB)) + "MiB";
    if (bytes > std::numeric_limits<int64_t>::max() - GiB) return std::to_string(bytes) + "B";
    // Tenths of a GiB, rounded up; parse_size reads "x.yGiB" back exactly.
    auto tenths = static_cast<int64_t>((static_cast<__int128>(bytes) * 10 + GiB - 1) / GiB);
    return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + "GiB";
}

}  // namespace tessera
