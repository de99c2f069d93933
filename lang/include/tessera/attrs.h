// Operator attributes: a small ordered map from name to value, so that the graph
// can store and serialise any operator's attributes without knowing the operator.
// Typed getters name the operator and the attribute in their errors.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace tessera {

using AttrValue = std::variant<int64_t, double, std::vector<int64_t>, std::string>;

class Attrs {
public:
    Attrs() = default;
    Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> init) : values_(init) {}

    Attrs &set(const std::string &name, AttrValue v) {
        values_[name] = std::move(v);
        return *this;
    }
    bool has(const std::string &name) const { return values_.count(name) != 0; }

    // `who` is how errors name the operator, e.g. "conv2d 'block3.conv1'".
    int64_t get_int(const std::string &who, const std::string &name) const;
    int64_t get_int(const std::string &who, const std::string &name, int64_t fallback) const;
    double get_float(const std::string &who, const std::string &name) const;
    double get_float(const std::string &who, const std::string &name, double fallback) const;
    std::vector<int64_t> get_ints(const std::string &who, const std::string &name) const;
    std::vector<int64_t> get_ints(const std::string &who, const std::string &name,
                                  std::vector<int64_t> fallback) const;
    std::string get_string(const std::string &who, const std::string &name) const;

    const std::map<std::string, AttrValue> &values() const { return values_; }
    bool operator==(const Attrs &) const = default;

private:
    std::map<std::string, AttrValue> values_;
};

std::string attr_str(const AttrValue &v);

}  // namespace tessera
