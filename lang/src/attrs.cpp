#include "tessera/attrs.h"

#include <sstream>

#include "tessera/error.h"

namespace tessera {

std::string attr_str(const AttrValue &v) {
    std::ostringstream os;
    if (auto *i = std::get_if<int64_t>(&v)) os << *i;
    else if (auto *d = std::get_if<double>(&v)) os << *d;
    else if (auto *s = std::get_if<std::string>(&v)) os << '"' << *s << '"';
    else {
        const auto &l = std::get<std::vector<int64_t>>(v);
        os << "[";
        for (size_t k = 0; k < l.size(); k++) os << (k ? ", " : "") << l[k];
        os << "]";
    }
    return os.str();
}

namespace {

const AttrValue &lookup(const std::map<std::string, AttrValue> &m, const std::string &who,
                        const std::string &name) {
    auto it = m.find(name);
    TESSERA_CHECK(it != m.end(), who, ": missing attribute '", name, "'");
    return it->second;
}

}  // namespace

int64_t Attrs::get_int(const std::string &who, const std::string &name) const {
    const AttrValue &v = lookup(values_, who, name);
    if (auto *i = std::get_if<int64_t>(&v)) return *i;
    fail(who, ": attribute '", name, "' must be an integer, got ", attr_str(v));
}

int64_t Attrs::get_int(const std::string &who, const std::string &name, int64_t fallback) const {
    return has(name) ? get_int(who, name) : fallback;
}

double Attrs::get_float(const std::string &who, const std::string &name) const {
    const AttrValue &v = lookup(values_, who, name);
    if (auto *d = std::get_if<double>(&v)) return *d;
    if (auto *i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    fail(who, ": attribute '", name, "' must be a number, got ", attr_str(v));
}

double Attrs::get_float(const std::string &who, const std::string &name, double fallback) const {
    return has(name) ? get_float(who, name) : fallback;
}

std::vector<int64_t> Attrs::get_ints(const std::string &who, const std::string &name) const {
    const AttrValue &v = lookup(values_, who, name);
    if (auto *l = std::get_if<std::vector<int64_t>>(&v)) return *l;
    fail(who, ": attribute '", name, "' must be a list of integers, got ", attr_str(v));
}

std::vector<int64_t> Attrs::get_ints(const std::string &who, const std::string &name,
                                     std::vector<int64_t> fallback) const {
    return has(name) ? get_ints(who, name) : fallback;
}

std::string Attrs::get_string(const std::string &who, const std::string &name) const {
    const AttrValue &v = lookup(values_, who, name);
    if (auto *s = std::get_if<std::string>(&v)) return *s;
    fail(who, ": attribute '", name, "' must be a string, got ", attr_str(v));
}

}  // namespace tessera
