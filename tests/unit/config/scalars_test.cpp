// SPDX-License-Identifier: Apache-2.0
// The text parsers behind durations, sizes, addresses and suggestions.
#include "config/scalars_detail.hpp"

#include <gtest/gtest.h>

namespace sluice::config::detail {
namespace {

using namespace std::chrono_literals;

TEST(ConfigScalars, Durations) {
    EXPECT_EQ(parse_duration("500ms"), 500ms);
    EXPECT_EQ(parse_duration("30s"), 30s);
    EXPECT_EQ(parse_duration("5m"), 5min);
    EXPECT_EQ(parse_duration("1h"), 1h);
    EXPECT_EQ(parse_duration("1.5"), 1500ms);
    EXPECT_EQ(parse_duration("60"), 60s);
    EXPECT_EQ(parse_duration("0.25s"), 250ms);
    EXPECT_EQ(parse_duration("2 m"), 2min);
    EXPECT_EQ(parse_duration("-1s"), -1s); // parses; the caller's range check rejects it
    EXPECT_EQ(parse_duration("5 parsecs"), std::nullopt);
    EXPECT_EQ(parse_duration("5sec"), std::nullopt);
    EXPECT_EQ(parse_duration("s"), std::nullopt);
    EXPECT_EQ(parse_duration(""), std::nullopt);
    EXPECT_EQ(parse_duration("1..5s"), std::nullopt);
    EXPECT_EQ(parse_duration("1e400"), std::nullopt);
    EXPECT_EQ(parse_duration("99999999999h"), std::nullopt);
}

TEST(ConfigScalars, CompoundDurations) {
    EXPECT_EQ(parse_duration("2m30s"), 150s);
    EXPECT_EQ(parse_duration("1h30m"), 90min);
    EXPECT_EQ(parse_duration("1d"), 24h);
    EXPECT_EQ(parse_duration("1d12h"), 36h);
    EXPECT_EQ(parse_duration("1h 30m"), 90min);
    EXPECT_EQ(parse_duration("1m0.5s"), 60500ms);
    EXPECT_EQ(parse_duration("1s500ms"), 1500ms);
    EXPECT_EQ(parse_duration("-2m30s"), -150s); // parses; the caller's range check rejects it
    EXPECT_EQ(parse_duration("0d"), 0ms);
    // Largest unit first, each once; no sign inside; no number without a unit after a part.
    EXPECT_EQ(parse_duration("30s2m"), std::nullopt);
    EXPECT_EQ(parse_duration("1m1m"), std::nullopt);
    EXPECT_EQ(parse_duration("1m-30s"), std::nullopt);
    EXPECT_EQ(parse_duration("1m30"), std::nullopt);
    EXPECT_EQ(parse_duration("-"), std::nullopt);
    EXPECT_EQ(parse_duration("1w"), std::nullopt);
    // Overflow is an error, never a wrapped value: at most about a century (3.2e12 ms).
    EXPECT_EQ(parse_duration("37000d"), 37000 * 24h);
    EXPECT_EQ(parse_duration("38000d"), std::nullopt);
    EXPECT_EQ(parse_duration("36000d99999h"), std::nullopt);
    EXPECT_EQ(parse_duration("99999999999999999999999999999999999999d"), std::nullopt);
}

TEST(ConfigScalars, Rates) {
    EXPECT_EQ(parse_rate("5"), 5.0);
    EXPECT_EQ(parse_rate("0.5"), 0.5);
    EXPECT_EQ(parse_rate("10r/s"), 10.0);
    EXPECT_EQ(parse_rate("600r/m"), 10.0);
    EXPECT_EQ(parse_rate("7200r/h"), 2.0);
    EXPECT_EQ(parse_rate("30 r/m"), 0.5);
    EXPECT_EQ(parse_rate("0r/s"), 0.0); // parses; the caller's "> 0" rejects it
    EXPECT_EQ(parse_rate("10/s"), std::nullopt);
    EXPECT_EQ(parse_rate("10r/d"), std::nullopt);
    EXPECT_EQ(parse_rate("10rps"), std::nullopt);
    EXPECT_EQ(parse_rate("r/s"), std::nullopt);
    EXPECT_EQ(parse_rate("1e3r/s"), std::nullopt);
}

TEST(ConfigScalars, Sizes) {
    EXPECT_EQ(parse_size("0"), 0u);
    EXPECT_EQ(parse_size("123"), 123u);
    EXPECT_EQ(parse_size("123B"), 123u);
    EXPECT_EQ(parse_size("16KiB"), 16u * 1024);
    EXPECT_EQ(parse_size("16Ki"), 16u * 1024);
    EXPECT_EQ(parse_size("2MiB"), 2u << 20);
    EXPECT_EQ(parse_size("2Mi"), 2u << 20);
    EXPECT_EQ(parse_size("3GiB"), 3ull << 30);
    EXPECT_EQ(parse_size("3 GiB"), 3ull << 30);
    EXPECT_EQ(parse_size("-1"), std::nullopt);
    EXPECT_EQ(parse_size("99999999999999GiB"), std::nullopt);
}

TEST(ConfigScalars, ShorthandSizesAre1024Based) {
    // k, M, G and kB, MB, GB are 1024-based, as nginx's k and m: a size written for nginx means
    // the same here, and configs written before these spellings keep their meaning.
    EXPECT_EQ(parse_size("16k"), 16u * 1024);
    EXPECT_EQ(parse_size("16K"), 16u * 1024);
    EXPECT_EQ(parse_size("16KB"), 16u * 1024);
    EXPECT_EQ(parse_size("16kB"), 16u * 1024);
    EXPECT_EQ(parse_size("10MB"), 10u << 20);
    EXPECT_EQ(parse_size("2M"), 2u << 20);
    EXPECT_EQ(parse_size("3 G"), 3ull << 30);
    EXPECT_EQ(parse_size("3GB"), 3ull << 30);
    // Fractions, when they come to whole bytes.
    EXPECT_EQ(parse_size("1.5M"), 3u << 19);
    EXPECT_EQ(parse_size("1.5MiB"), 3u << 19);
    EXPECT_EQ(parse_size("0.5k"), 512u);
    EXPECT_EQ(parse_size("2.25k"), 2'304u);
    EXPECT_EQ(parse_size("1.0"), 1u);
    EXPECT_EQ(parse_size("1.5"), std::nullopt);
    EXPECT_EQ(parse_size("0.001k"), std::nullopt); // 1.024 bytes
    EXPECT_EQ(parse_size("1.5KiB1"), std::nullopt);
    EXPECT_EQ(parse_size(".5M"), std::nullopt);
    EXPECT_EQ(parse_size("5.M"), std::nullopt);
    EXPECT_EQ(parse_size("1..5M"), std::nullopt);
    EXPECT_EQ(parse_size("16mb"), std::nullopt);
    EXPECT_EQ(parse_size("16TB"), std::nullopt);
    // Overflow is an error, never a wrapped value.
    EXPECT_EQ(parse_size("18446744073709551615"), 18446744073709551615u);
    EXPECT_EQ(parse_size("18446744073709551616"), std::nullopt);
    EXPECT_EQ(parse_size("17179869183G"), ((1ull << 34) - 1) << 30);
    EXPECT_EQ(parse_size("17179869183.5G"), (((1ull << 34) - 1) << 30) + (1ull << 29));
    EXPECT_EQ(parse_size("17179869184G"), std::nullopt);             // 2^64
    EXPECT_EQ(parse_size("17179869183.99999999999G"), std::nullopt); // not whole bytes
    EXPECT_EQ(parse_size("1.0000000000000000000000001k"), std::nullopt);
}

TEST(ConfigScalars, Numbers) {
    EXPECT_EQ(parse_number("0.5"), 0.5);
    EXPECT_EQ(parse_number("5"), 5.0);
    EXPECT_EQ(parse_number("-2"), -2.0);
    EXPECT_EQ(parse_number("inf"), std::nullopt);
    EXPECT_EQ(parse_number("nan"), std::nullopt);
    EXPECT_EQ(parse_number("1e3"), std::nullopt);
    EXPECT_EQ(parse_int("50"), 50);
    EXPECT_EQ(parse_int("+50"), std::nullopt);
    EXPECT_EQ(parse_int("50.0"), std::nullopt);
    EXPECT_EQ(parse_int("99999999999999999999"), std::nullopt);
    EXPECT_EQ(parse_bool("yes"), true);
    EXPECT_EQ(parse_bool("False"), false);
    EXPECT_EQ(parse_bool("1"), std::nullopt);
}

TEST(ConfigScalars, ListenAddresses) {
    const auto v4 = parse_listen("0.0.0.0:8080", echo::shown);
    ASSERT_TRUE(v4.value) << v4.error;
    EXPECT_EQ(v4.value->host, "0.0.0.0");
    EXPECT_EQ(v4.value->port, 8080);
    const auto v6 = parse_listen("[::]:443", echo::shown);
    ASSERT_TRUE(v6.value) << v6.error;
    EXPECT_EQ(v6.value->host, "::");
    EXPECT_EQ(v6.value->port, 443);
    const auto name = parse_listen("localhost:0", echo::shown);
    ASSERT_TRUE(name.value) << name.error;
    EXPECT_EQ(name.value->port, 0);
    const auto any = parse_listen(":8080", echo::shown);
    ASSERT_TRUE(any.value) << any.error;
    EXPECT_EQ(any.value->host, "0.0.0.0");
    EXPECT_EQ(any.value->port, 8080);
    EXPECT_FALSE(parse_listen(":", echo::shown).value);
    EXPECT_FALSE(parse_listen(":99999", echo::shown).value);
    EXPECT_FALSE(parse_listen("::8080", echo::shown).value);
    EXPECT_FALSE(parse_listen("localhost", echo::shown).value);
    EXPECT_FALSE(parse_listen("[::1]", echo::shown).value);
    EXPECT_FALSE(parse_listen("[::1]8080", echo::shown).value);
    EXPECT_FALSE(parse_listen("host:-1", echo::shown).value);
    EXPECT_FALSE(parse_listen("bad..name:1", echo::shown).value);
}

TEST(ConfigScalars, UpstreamUrls) {
    const auto plain = parse_upstream_url("http://127.0.0.1:9000", echo::shown);
    ASSERT_TRUE(plain.value) << plain.error;
    EXPECT_EQ(plain.value->host, "127.0.0.1");
    EXPECT_EQ(plain.value->port, 9000);
    const auto slash = parse_upstream_url("HTTP://api.internal/", echo::shown);
    ASSERT_TRUE(slash.value) << slash.error;
    EXPECT_EQ(slash.value->host, "api.internal");
    EXPECT_EQ(slash.value->port, 80);
    EXPECT_NE(parse_upstream_url("https://x", echo::shown).error.find("https is not supported"),
              std::string::npos);
    EXPECT_NE(parse_upstream_url("http://x/v1", echo::shown).error.find("must not have a path"),
              std::string::npos);
}

// The path a URL must not have is quoted as any value is (a control byte written \xNN, one
// problem to a line); a hidden value's host or path is not quoted at all.
TEST(ConfigScalars, AddressErrorsQuoteTheirTextOnlyWhenShown) {
    EXPECT_NE(parse_upstream_url("http://x/a\nb", echo::shown).error.find("(got '/a\\x0ab')"),
              std::string::npos);
    for (const auto& error : {parse_upstream_url("http://x/hunter2", echo::hidden).error,
                              parse_upstream_url("http://hunter2_", echo::hidden).error,
                              parse_listen("hunter2_:80", echo::hidden).error,
                              parse_listen("[hunter2]:80", echo::hidden).error,
                              parse_node_address("hunter2_", 6379, echo::hidden).error}) {
        EXPECT_FALSE(error.empty());
        EXPECT_EQ(error.find("hunter2"), std::string::npos) << error;
    }
    EXPECT_NE(parse_listen("hunter2_:80", echo::shown).error.find("'hunter2_' is not a host"),
              std::string::npos);
}

TEST(ConfigScalars, Formatting) {
    EXPECT_EQ(format_duration(25s), "25s");
    EXPECT_EQ(format_duration(1500ms), "1.5s");
    EXPECT_EQ(format_duration(500ms), "500ms");
    EXPECT_EQ(format_duration(5min), "5m");
    EXPECT_EQ(format_duration(2h), "2h");
    EXPECT_EQ(format_duration(0ms), "0s");
    EXPECT_EQ(format_number(2), "2");
    EXPECT_EQ(format_number(0.5), "0.5");
}

TEST(ConfigScalars, Suggestions) {
    EXPECT_EQ(edit_distance("flowRate", "flowRate"), 0u);
    EXPECT_EQ(edit_distance("flowrate", "flowRate"), 1u);
    EXPECT_EQ(edit_distance("flwoRate", "flowRate"), 1u); // a transposition counts once
    EXPECT_EQ(edit_distance("", "abc"), 3u);
    const std::vector<std::string> keys{"capacity", "flowRate", "algorithm"};
    EXPECT_EQ(closest("capacty", keys), "capacity");
    EXPECT_EQ(closest("FLOWRATE", keys), "flowRate");
    EXPECT_EQ(closest("burst", keys), "");
}

} // namespace
} // namespace sluice::config::detail
