// JSON from outside: nesting bounded before nlohmann sees it, and values
// quoted in errors through a short, shallow preview.
#include <string>

#include <gtest/gtest.h>

#include "expect_error.h"
#include "tessera/json_input.h"

namespace tessera {
namespace {

using json = nlohmann::json;

TEST(JsonInput, ParsesAndNamesTheSourceOfSyntaxErrors) {
    EXPECT_EQ(parse_json_input(R"({"a": [1, {"b": "[[["}]})", "f.json"), json::parse(R"({"a": [1, {"b": "[[["}]})"));
    test::expect_error([] { parse_json_input("{\"a\": ", "f.json"); }, "f.json: not valid JSON (");
}

// 100,000 nested '[' crashed the process once an error quoted the value.
TEST(JsonInput, DeepNestingIsRefusedBeforeParsing) {
    test::expect_error([] { parse_json_input(std::string(100000, '['), "header"); },
                       "header: JSON nested deeper than 64 levels (at byte 64)");
    const std::string deep_object = "{\"a\": " + std::string(200000, '[');
    test::expect_error([&] { parse_json_input(deep_object, "m.json"); }, "m.json: JSON nested deeper than 64 levels");
    // Exactly the limit is fine, and brackets inside strings (escaped quotes too) do not count.
    const std::string limit = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
    EXPECT_NO_THROW(parse_json_input(limit, "ok"));
    EXPECT_NO_THROW(parse_json_input("[\"\\\"" + std::string(1000, '[') + "\"]", "ok"));
}

TEST(JsonInput, ThePreviewIsShortAndShallow) {
    EXPECT_EQ(json_preview(json(3)), "3");
    EXPECT_EQ(json_preview(json("text")), "\"text\"");
    EXPECT_EQ(json_preview(json::parse("[1, [2, [3, [4]]], {}]")), "[1, [2, [...]], {}]");
    EXPECT_EQ(json_preview(json::parse(R"({"a": {"b": {"c": 1}}})")), R"({"a": {"b": {...}}})");
    json big = json::array();
    for (int i = 0; i < 100000; i++) big.push_back(i);
    const std::string p = json_preview(big);
    EXPECT_EQ(p.size(), 60u);
    EXPECT_EQ(p.substr(0, 10), "[0, 1, 2, ");
    EXPECT_EQ(p.substr(57), "...");
    EXPECT_EQ(json_preview(json(std::string(1000, 'x'))).size(), 60u);
    // A cut inside a UTF-8 sequence prints, rather than throwing.
    EXPECT_NO_THROW(json_preview(json(std::string(59, 'x') + "\xc3\xa9")));
    json deep = json::array();
    for (int i = 0; i < 1000; i++) deep = json::array({deep});
    EXPECT_EQ(json_preview(deep), "[[[...]]]");
}

}  // namespace
}  // namespace tessera
