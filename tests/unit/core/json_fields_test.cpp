// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/json_fields.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sluice {
namespace {

json_path path_of(std::string_view text) {
    auto p = parse_json_path(text);
    EXPECT_TRUE(p.has_value()) << text;
    return p.value_or(json_path{});
}

/// The fields at `paths` in `document`; `valid` says what find_json_fields returned.
std::vector<json_scalar>
fields(std::string_view document, std::vector<std::string_view> texts, bool* valid = nullptr) {
    std::vector<json_path> paths;
    for (auto t : texts) {
        paths.push_back(path_of(t));
    }
    std::vector<const json_path*> pointers;
    for (const auto& p : paths) {
        pointers.push_back(&p);
    }
    std::vector<json_scalar> out(paths.size());
    const bool ok = find_json_fields(document, pointers, out);
    if (valid != nullptr) {
        *valid = ok;
    }
    return out;
}

using kind = json_scalar::kind;

TEST(JsonPath, SplitsOnDotsAndRefusesEmptySegmentsAndDeepPaths) {
    EXPECT_EQ(path_of("usage.total_tokens").segments,
              (std::vector<std::string>{"usage", "total_tokens"}));
    EXPECT_EQ(path_of("model").segments, (std::vector<std::string>{"model"}));
    for (auto bad : {"", ".", "a.", ".a", "a..b"}) {
        EXPECT_FALSE(parse_json_path(bad).has_value()) << bad;
    }
    std::string deep = "a";
    for (std::size_t i = 1; i < max_json_path_segments; ++i) {
        deep += ".a";
    }
    EXPECT_TRUE(parse_json_path(deep).has_value());
    EXPECT_FALSE(parse_json_path(deep + ".a").has_value());
}

TEST(JsonFields, FindsNumbersAsWrittenAndStringsUnescaped) {
    const auto out =
        fields(R"({"model":"gpt-\u00e9","max_tokens":60,"usage":{"total_tokens":1e3}})",
               {"max_tokens", "usage.total_tokens", "model", "missing", "usage"});
    EXPECT_EQ(out[0].what, kind::number);
    EXPECT_EQ(out[0].text, "60");
    EXPECT_EQ(out[1].what, kind::number);
    EXPECT_EQ(out[1].text, "1e3");
    EXPECT_EQ(out[2].what, kind::string);
    EXPECT_EQ(out[2].text, "gpt-\xc3\xa9");
    EXPECT_EQ(out[3].what, kind::absent);
    EXPECT_EQ(out[4].what, kind::other); // an object, not a scalar
}

TEST(JsonFields, TheLastOccurrenceOfARepeatedMemberCounts) {
    const auto out = fields(R"({"max_tokens":1,"x":{"max_tokens":7},"max_tokens":900})",
                            {"max_tokens", "x.max_tokens"});
    EXPECT_EQ(out[0].text, "900");
    EXPECT_EQ(out[1].text, "7");
}

TEST(JsonFields, TheLastOccurrenceOfARepeatedStepCountsAsAWhole) {
    // The upstream's reader keeps the last "parameters": what the first one held is gone.
    const auto out = fields(
        R"({"inputs":"x","parameters":{"max_new_tokens":1},"parameters":{},"a":[1,2],"a":[3],)"
        R"("b":{"c":5},"b":null,"d":{"e":1},"d":{"e":2}})",
        {"parameters.max_new_tokens", "a.1", "b.c", "d.e"});
    EXPECT_EQ(out[0].what, kind::absent);
    EXPECT_EQ(out[1].what, kind::absent);
    EXPECT_EQ(out[2].what, kind::absent);
    EXPECT_EQ(out[3].text, "2");
}

TEST(JsonFields, ALoneSurrogateEscapeRefusesTheDocument) {
    // The reader turns a lone low surrogate into bytes that are no UTF-8; a pair is one
    // character (U+1F600, four bytes).
    bool valid = true;
    const auto lone = fields(R"({"user":"a\udc00b"})", {"user"}, &valid);
    EXPECT_FALSE(valid);
    EXPECT_EQ(lone[0].what, kind::absent);
    const auto pair = fields(R"({"user":"\ud83d\ude00"})", {"user"}, &valid);
    EXPECT_TRUE(valid);
    EXPECT_EQ(pair[0].text, "\xF0\x9F\x98\x80");
}

TEST(JsonFields, DigitSegmentsIndexArrays) {
    const auto out = fields(R"({"choices":[{"n":1},{"n":2,"deep":[[0],[5]]}],"a":[10,20]})",
                            {"choices.1.n", "choices.0.n", "a.1", "a.2", "choices.1.deep.1.0"});
    EXPECT_EQ(out[0].text, "2");
    EXPECT_EQ(out[1].text, "1");
    EXPECT_EQ(out[2].text, "20");
    EXPECT_EQ(out[3].what, kind::absent);
    EXPECT_EQ(out[4].text, "5");
}

TEST(JsonFields, MembersOfContainersOffThePathAreNotMistakenForIt) {
    // "total_tokens" appears at depth 2 under another key and inside an array: neither is
    // usage.total_tokens.
    const auto out = fields(
        R"({"other":{"total_tokens":5},"list":[{"usage":{"total_tokens":6}}],"usage":{"n":{"total_tokens":7}}})",
        {"usage.total_tokens"});
    EXPECT_EQ(out[0].what, kind::absent);
}

TEST(JsonFields, AnythingButOneCompleteJsonTextFindsNothing) {
    for (std::string_view bad : {std::string_view(""),
                                 std::string_view("{"),
                                 std::string_view(R"({"max_tokens":60)"),
                                 std::string_view(R"({"max_tokens":60} {})"),
                                 std::string_view(R"({"max_tokens":60}x)"),
                                 std::string_view("{\"max_tokens\":60}\0", 18),
                                 std::string_view("{\"max_tokens\":60,\"s\":\"\xff\"}"),
                                 std::string_view(R"({max_tokens:60})"),
                                 std::string_view(R"({"max_tokens":NaN})")}) {
        bool valid = true;
        const auto out = fields(bad, {"max_tokens"}, &valid);
        EXPECT_FALSE(valid) << bad;
        EXPECT_EQ(out[0].what, kind::absent) << bad;
    }
    bool valid = false;
    const auto out = fields(" \n{\"max_tokens\":60}\r\n ", {"max_tokens"}, &valid);
    EXPECT_TRUE(valid);
    EXPECT_EQ(out[0].text, "60");
}

TEST(JsonFields, NegativeNumbersArePassedOnAndOverflowingOnesRefuseTheDocument) {
    const auto out = fields(R"({"m":-5,"f":12.5})", {"m", "f"});
    EXPECT_EQ(out[0].text, "-5"); // the caller refuses it as a cost
    EXPECT_EQ(out[1].text, "12.5");
    // RapidJSON refuses a number beyond a double's range (Python would read inf): the document
    // is no JSON it accepts, so nothing is found in it.
    bool valid = true;
    const auto huge = fields(R"({"n":1e309,"m":1})", {"n", "m"}, &valid);
    EXPECT_FALSE(valid);
    EXPECT_EQ(huge[0].what, kind::absent);
    EXPECT_EQ(huge[1].what, kind::absent);
}

TEST(JsonFields, NestingIsBoundedWithoutRecursion) {
    const std::string ok = std::string(max_json_depth, '[') + std::string(max_json_depth, ']');
    bool valid = false;
    fields(ok, {"a"}, &valid);
    EXPECT_TRUE(valid);
    // A million levels: refused at max_json_depth, with no stack to overflow on the way.
    const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
    fields(deep, {"a"}, &valid);
    EXPECT_FALSE(valid);
}

} // namespace
} // namespace sluice
