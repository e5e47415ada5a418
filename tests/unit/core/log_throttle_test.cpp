// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/log_throttle.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace sluice {
namespace {

constexpr std::int64_t second_ns = 1'000'000'000;

TEST(LogThrottle, OneLinePerIntervalWithTheCountHeldBack) {
    log_throttle throttle(std::chrono::seconds(1));
    std::uint64_t suppressed = 99;
    ASSERT_TRUE(throttle.allow(10 * second_ns, suppressed));
    EXPECT_EQ(suppressed, 0u);
    for (int i = 0; i < 999; ++i) {
        EXPECT_FALSE(throttle.allow(10 * second_ns + i, suppressed));
    }
    EXPECT_FALSE(throttle.allow(11 * second_ns - 1, suppressed));
    ASSERT_TRUE(throttle.allow(11 * second_ns, suppressed));
    EXPECT_EQ(suppressed, 1000u);
    ASSERT_TRUE(throttle.allow(20 * second_ns, suppressed));
    EXPECT_EQ(suppressed, 0u);
}

TEST(LogThrottle, AThousandTriggersWriteOneLine) {
    log_throttle throttle(std::chrono::hours(1));
    int written = 0;
    std::uint64_t suppressed = 0;
    for (int i = 0; i < 1000; ++i) {
        written += throttle.allow(suppressed) ? 1 : 0;
    }
    EXPECT_EQ(written, 1);
}

// Issue 12: each distinct line once per interval, with the count of its repeats, whatever the
// other lines do.
TEST(KeyedLogThrottle, EachDistinctLineOncePerIntervalWithItsCount) {
    keyed_log_throttle throttle(std::chrono::seconds(10));
    std::uint64_t suppressed = 99;
    ASSERT_TRUE(throttle.allow("auth failed", 0, suppressed));
    EXPECT_EQ(suppressed, 0u);
    ASSERT_TRUE(throttle.allow("script refused", 1, suppressed)) << "another line is not held";
    for (int i = 0; i < 80; ++i) {
        EXPECT_FALSE(throttle.allow("auth failed", 2 + i * second_ns / 10, suppressed));
        EXPECT_FALSE(throttle.allow("script refused", 3 + i * second_ns / 10, suppressed));
    }
    EXPECT_FALSE(throttle.allow("auth failed", 10 * second_ns - 1, suppressed));
    ASSERT_TRUE(throttle.allow("auth failed", 10 * second_ns, suppressed));
    EXPECT_EQ(suppressed, 81u);
    ASSERT_TRUE(throttle.allow("script refused", 10 * second_ns + 1, suppressed));
    EXPECT_EQ(suppressed, 80u);
}

TEST(KeyedLogThrottle, RemembersAtMostMaxLinesForgettingTheLeastRecent) {
    keyed_log_throttle throttle(std::chrono::seconds(10), 2);
    std::uint64_t suppressed = 0;
    ASSERT_TRUE(throttle.allow("a", 0, suppressed));
    ASSERT_TRUE(throttle.allow("b", 1, suppressed));
    EXPECT_FALSE(throttle.allow("a", 2, suppressed)); // "a" is now the more recent
    ASSERT_TRUE(throttle.allow("c", 3, suppressed));  // forgets "b"
    EXPECT_FALSE(throttle.allow("a", 4, suppressed));
    EXPECT_FALSE(throttle.allow("c", 5, suppressed));
    EXPECT_TRUE(throttle.allow("b", 6, suppressed)) << "b was forgotten: new again";
}

} // namespace
} // namespace sluice
