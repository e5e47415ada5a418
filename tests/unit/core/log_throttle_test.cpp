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

} // namespace
} // namespace sluice
