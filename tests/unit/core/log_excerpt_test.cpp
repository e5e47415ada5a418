// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/log_excerpt.hpp"

#include <gtest/gtest.h>

#include <string>

namespace sluice {
namespace {

TEST(LogExcerpt, ShortPrintableTextIsLeftAsItIs) {
    EXPECT_EQ(log_excerpt("ERR Error running script: @user_script:12"),
              "ERR Error running script: @user_script:12");
    EXPECT_EQ(log_excerpt(""), "");
}

// A line must stay one line, whatever bytes a peer put in it.
TEST(LogExcerpt, BytesOutsidePrintableAsciiAreEscaped) {
    EXPECT_EQ(log_excerpt(std::string("a\r\nb\0c\x7f\xff\\", 9)),
              "a\\x0d\\x0ab\\x00c\\x7f\\xff\\\\");
}

// Issue (review, Redis store log lines): a reply of any length costs a bounded line.
TEST(LogExcerpt, LongTextIsCutAndSaysItsLength) {
    const std::string reply(100'000, 'x');
    const auto excerpt = log_excerpt(reply);
    EXPECT_EQ(excerpt, std::string(128, 'x') + "... (100000 bytes)");
    EXPECT_EQ(log_excerpt(std::string(129, 'y'), 4), "yyyy... (129 bytes)");
    // The limit counts bytes of the text, not of their escapes: at most four times as long.
    const auto escaped = log_excerpt(std::string(1'000, '\x01'));
    EXPECT_EQ(escaped.size(), 128 * 4 + std::string("... (1000 bytes)").size());
    EXPECT_EQ(log_excerpt(std::string(128, 'z')), std::string(128, 'z')) << "exactly the limit";
}

} // namespace
} // namespace sluice
