// SPDX-License-Identifier: Apache-2.0
// A reply's rendering for messages and logs: whole by default, cut to a bound without rendering
// the rest when asked (a reply may be as large as Redis allows).
#include "reply_builders.hpp"
#include "sluice/redis/reply.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sluice::redis {
namespace {

using test::array_reply;
using test::string_reply;

TEST(ReplyDescribe, RendersEveryKindWholeByDefault) {
    reply number;
    number.type = reply::kind::integer;
    number.integer = -7;
    reply error;
    error.type = reply::kind::error;
    error.str = "ERR no";
    reply status;
    status.type = reply::kind::status;
    status.str = "OK";
    const auto all =
        array_reply({number, string_reply("a"), reply{}, error, status, array_reply({})});
    EXPECT_EQ(all.describe(), R"([-7, "a", nil, (error) ERR no, OK, []])");
    EXPECT_EQ(all.describe(1000), all.describe());
    EXPECT_EQ(string_reply(std::string(100'000, 'x')).describe().size(), 100'002u);
}

// Cut to the bound, "..." included, however long the string or wide and deep the array.
TEST(ReplyDescribe, ABoundedRenderingIsCutToTheBound) {
    EXPECT_EQ(string_reply(std::string(100'000, 'x')).describe(10), "\"xxxxxx...");
    std::vector<reply> wide(50'000, string_reply("abc"));
    const auto rendered = array_reply(wide).describe(20);
    EXPECT_EQ(rendered, R"(["abc", "abc", "a...)");
    EXPECT_EQ(rendered.size(), 20u);
    auto deep = string_reply(std::string(1000, 'y'));
    for (int i = 0; i < 8; ++i) {
        deep = array_reply({deep, deep});
    }
    EXPECT_EQ(deep.describe(16), "[[[[[[[[\"yyyy...");
    // Exactly at the bound: nothing cut.
    EXPECT_EQ(string_reply("abcd").describe(6), "\"abcd\"");
}

} // namespace
} // namespace sluice::redis
