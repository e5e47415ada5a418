// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/saturate.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace sluice {
namespace {

constexpr auto max64 = std::numeric_limits<std::int64_t>::max();
constexpr auto min64 = std::numeric_limits<std::int64_t>::min();

TEST(SaturatingCast, HugeValuesClampToTheRange) {
    EXPECT_EQ(saturating_cast<std::int64_t>(1e300), max64);
    EXPECT_EQ(saturating_cast<std::int64_t>(-1e300), min64);
    EXPECT_EQ(saturating_cast<std::int64_t>(std::numeric_limits<double>::infinity()), max64);
    EXPECT_EQ(saturating_cast<std::int64_t>(-std::numeric_limits<double>::infinity()), min64);
    // 2^63 is the first double above the range; the largest double below it converts exactly.
    EXPECT_EQ(saturating_cast<std::int64_t>(9223372036854775808.0), max64);
    EXPECT_EQ(saturating_cast<std::int64_t>(std::nextafter(9223372036854775808.0, 0.0)),
              std::int64_t{9223372036854774784});
}

TEST(SaturatingCast, NanIsZero) {
    EXPECT_EQ(saturating_cast<std::int64_t>(std::numeric_limits<double>::quiet_NaN()), 0);
    EXPECT_EQ(saturating_cast<int>(-std::numeric_limits<double>::quiet_NaN()), 0);
}

TEST(SaturatingCast, InRangeValuesTruncateLikeStaticCast) {
    EXPECT_EQ(saturating_cast<std::int64_t>(2.9), 2);
    EXPECT_EQ(saturating_cast<std::int64_t>(-2.9), -2);
    EXPECT_EQ(saturating_cast<int>(3e9), std::numeric_limits<int>::max());
    EXPECT_EQ(saturating_cast<std::uint64_t>(-1.0), 0u);
    EXPECT_EQ(saturating_cast<std::uint16_t>(70000.0), 65535u);
    EXPECT_EQ(saturating_ms(1e30).count(), max64);
}

TEST(SaturatingAdd, ClampsWhereTheSumWouldOverflow) {
    constexpr auto umax = std::numeric_limits<std::uint64_t>::max();
    EXPECT_EQ(saturating_add<std::uint64_t>(umax - 1, 5), umax);
    EXPECT_EQ(saturating_add<std::uint64_t>(2, 3), 5u);
    EXPECT_EQ(saturating_add<std::int64_t>(max64, 1), max64);
    EXPECT_EQ(saturating_add<std::int64_t>(std::numeric_limits<std::int64_t>::min(), -1),
              std::numeric_limits<std::int64_t>::min());
    EXPECT_EQ(saturating_add<std::int64_t>(-7, 3), -4);
}

} // namespace
} // namespace sluice
