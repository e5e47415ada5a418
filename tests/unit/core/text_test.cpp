// SPDX-License-Identifier: Apache-2.0
// The text helpers: blanks trimmed, ASCII case ignored, UTF-8 read, JSON strings escaped.
#include "sluice/core/text.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <string_view>

namespace sluice {
namespace {

TEST(TrimBlanks, TakesSpacesAndTabsFromBothEnds) {
    EXPECT_EQ(trim_blanks(" \tchunked \t"), "chunked");
    EXPECT_EQ(trim_blanks("a b"), "a b");
    EXPECT_EQ(trim_blanks(" \t "), "");
    EXPECT_EQ(trim_blanks(""), "");
    EXPECT_EQ(trim_blanks("\nx\r"), "\nx\r") << "only OWS: a line's end is no blank";
}

TEST(Iequals, IgnoresTheCaseOfAsciiLettersOnly) {
    EXPECT_TRUE(iequals("Transfer-Encoding", "transfer-encoding"));
    EXPECT_TRUE(iequals("", ""));
    EXPECT_FALSE(iequals("chunked", "chunke"));
    EXPECT_FALSE(iequals("chunked", "chunkex"));
    EXPECT_FALSE(iequals("@", "`")) << "0x40 and 0x60 differ by the case bit but are no letters";
    EXPECT_FALSE(iequals("[", "{"));
    EXPECT_FALSE(iequals("\xc9", "\xe9")) << "ASCII only";
}

// Beast 1.81's iequals read a byte past both ends when they differed only in the case of their
// last byte. Each value here ends its heap block, so under AddressSanitizer (the suite's build)
// a read past it is a report, and a failed test.
TEST(Iequals, ReadsNothingPastTheEnds) {
    for (const std::string_view text : {"chunkeD", "Chunked", "CHUNKED", "chunkex"}) {
        const auto copy = std::make_unique<char[]>(text.size());
        std::memcpy(copy.get(), text.data(), text.size());
        const std::string_view value(copy.get(), text.size());
        EXPECT_EQ(iequals(value, "chunked"), text != "chunkex") << text;
        EXPECT_EQ(iequals("chunked", value), text != "chunkex") << text;
    }
}

TEST(IstartsWith, ComparesThePrefixButForTheCaseOfAsciiLetters) {
    EXPECT_TRUE(istarts_with("HTTP://host/", "http://"));
    EXPECT_TRUE(istarts_with("https://", "https://"));
    EXPECT_FALSE(istarts_with("http:/", "http://")) << "shorter than the prefix";
    EXPECT_FALSE(istarts_with("ftp://host/", "http://"));
    EXPECT_TRUE(istarts_with("anything", ""));
}

TEST(HexDigitValue, BothCasesAndNothingElse) {
    EXPECT_EQ(hex_digit_value('0'), 0);
    EXPECT_EQ(hex_digit_value('9'), 9);
    EXPECT_EQ(hex_digit_value('a'), 10);
    EXPECT_EQ(hex_digit_value('F'), 15);
    for (const char c : {'g', 'G', '/', ':', '@', '`', ' ', '\0', '\xff'}) {
        EXPECT_EQ(hex_digit_value(c), -1) << static_cast<int>(c);
    }
}

TEST(Utf8, WellFormedSequencesOnly) {
    EXPECT_TRUE(is_utf8("plain"));
    EXPECT_TRUE(is_utf8("Jos\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf"));
    for (const std::string bad :
         {"\xff", "\xc3", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80"}) {
        EXPECT_FALSE(is_utf8(bad)) << bad.size();
    }
    EXPECT_EQ(next_code_point("\xe2\x82\xacx", 0), 3u);
    EXPECT_EQ(next_code_point("a\xe2\x82", 1), std::string_view::npos) << "cut short";
}

TEST(AppendJsonEscaped, EscapesQuotesBackslashesAndControls) {
    std::string out;
    append_json_escaped(out, "a\"b\\c\nd\x01");
    EXPECT_EQ(out, R"(a\"b\\c\nd\u0001)");
}

// A key part holds whatever bytes a header value may (obs-text): the access log's JSON line
// stays valid JSON, its well-formed UTF-8 kept, every other byte U+FFFD (as Go's encoding/json).
TEST(AppendJsonEscaped, KeepsUtf8AndReplacesWhatIsNoUtf8) {
    std::string out;
    append_json_escaped(out, "Jos\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \x7f");
    EXPECT_EQ(out, "Jos\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \\u007f");
    for (const std::string bad : {"\xff", "\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
        out.clear();
        append_json_escaped(out, "a" + bad + "b");
        // A lone lead byte, an overlong '/', a surrogate, a code point past U+10FFFF: each
        // byte that starts no sequence is one U+FFFD.
        EXPECT_EQ(out.substr(0, 7), "a\\ufffd") << out;
        EXPECT_EQ(out.back(), 'b') << out;
        EXPECT_EQ(out.find_first_of("\x80\x81\x90\xa0\xa9\xaf\xc0\xc3\xed\xf4\xff"),
                  std::string::npos)
            << out;
    }
}

} // namespace
} // namespace sluice
