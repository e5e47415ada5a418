// SPDX-License-Identifier: Apache-2.0
// FIXED_WINDOW (src/limiter/fixed_window.cpp).
#include "limiter_test_util.hpp"

#include <gtest/gtest.h>

namespace sluice::limiter::test {
namespace {

TEST(FixedWindow, CountsPerAlignedWindow) {
    key_state k(windowed(config::algorithm::fixed_window, 3, milliseconds(1000)));
    EXPECT_TRUE(k.request(1000).allowed);
    EXPECT_TRUE(k.request(1500).allowed);
    auto third = k.request(1999);
    EXPECT_TRUE(third.allowed);
    EXPECT_EQ(third.remaining, 0);
    EXPECT_EQ(third.reset_after, milliseconds(1));
    auto fourth = k.request(1999);
    EXPECT_FALSE(fourth.allowed);
    EXPECT_EQ(fourth.retry_after, milliseconds(1));
    EXPECT_TRUE(k.request(2000).allowed); // a new window
}

TEST(FixedWindow, RejectionsAreNotCounted) {
    key_state k(windowed(config::algorithm::fixed_window, 1, milliseconds(1000)));
    EXPECT_TRUE(k.request(0).allowed);
    for (int i = 0; i < 5; ++i) {
        EXPECT_FALSE(k.request(10).allowed);
    }
    auto next = k.request(1000);
    EXPECT_TRUE(next.allowed);
    EXPECT_EQ(next.remaining, 0);
}

} // namespace
} // namespace sluice::limiter::test
