#include "tessera/json_input.h"

#include "tessera/error.h"

namespace tessera {

namespace {

using json = nlohmann::json;

// The offset of the first '[' or '{' (outside strings) that opens level
// `limit` + 1; npos when nothing is nested that deep.
size_t first_byte_deeper_than(const std::string &text, int limit) {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < text.size(); i++) {
        const char c = text[i];
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > limit) return i;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return std::string::npos;
}

// A string's JSON text, its content cut to `max_chars` bytes (a cut UTF-8
// sequence is printed as U+FFFD rather than thrown on).
std::string quoted(const std::string &s, size_t max_chars) {
    const std::string text = json(s.substr(0, max_chars)).dump(-1, ' ', false, json::error_handler_t::replace);
    return s.size() > max_chars ? text.substr(0, text.size() - 1) + "...\"" : text;
}

// Appends `v` to `out`, two levels deep at most, stopping once `out` is
// longer than `budget`.
void append_preview(const json &v, int depth, size_t budget, std::string &out) {
    if (v.is_string()) {
        out += quoted(v.get_ref<const std::string &>(), budget);
        return;
    }
    if (!v.is_structured()) {
        out += v.dump();
        return;
    }
    const bool object = v.is_object();
    if (depth >= 2) {
        out += v.empty() ? (object ? "{}" : "[]") : (object ? "{...}" : "[...]");
        return;
    }
    out += object ? '{' : '[';
    for (auto it = v.begin(); it != v.end(); ++it) {
        if (it != v.begin()) out += ", ";
        if (out.size() > budget) {
            out += "...";
            break;
        }
        if (object) out += quoted(it.key(), budget) + ": ";
        append_preview(it.value(), depth + 1, budget, out);
    }
    out += object ? '}' : ']';
}

}  // namespace

json parse_json_input(const std::string &text, const std::string &source, const json::parser_callback_t &callback) {
    const size_t deep = first_byte_deeper_than(text, kMaxJsonDepth);
    TESSERA_CHECK(deep == std::string::npos, source, ": JSON nested deeper than ", kMaxJsonDepth,
                  " levels (at byte ", deep, "); no file Tessera reads nests that deep");
    try {
        return json::parse(text, callback);
    } catch (const json::exception &e) {  // syntax errors, and numbers beyond a double
        fail(source, ": not valid JSON (", e.what(), ")");
    }
}

std::string json_preview(const json &value, size_t max_chars) {
    std::string out;
    append_preview(value, 0, max_chars, out);
    return out.size() > max_chars ? out.substr(0, max_chars > 3 ? max_chars - 3 : 0) + "..." : out;
}

void check_known_keys(const json &j, std::initializer_list<const char *> known, const std::string &where) {
    for (const auto &[key, value] : j.items()) {
        bool found = false;
        for (const char *k : known) found = found || key == k;
        if (found) continue;
        std::string list;
        for (const char *k : known) list += (list.empty() ? "" : ", ") + std::string(k);
        fail(where, ": unknown field '", key, "' (expected ", list, ")");
    }
}

}  // namespace tessera
