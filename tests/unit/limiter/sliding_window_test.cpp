// SPDX-License-Identifier: Apache-2.0
// SLIDING_WINDOW (src/limiter/sliding_window.cpp).
#include "limiter_test_util.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace sluice::limiter::test {
namespace {

TEST(SlidingWindow, NeverAdmitsMoreThanLimitInAnyWindow) {
    const auto window = milliseconds(1000);
    const std::int64_t limit = 7;
    key_state k(windowed(config::algorithm::sliding_window, limit, window));
    std::mt19937 random(42);
    std::uniform_int_distribution<int> gap(0, 60);
    std::vector<double> admitted;
    double t = 0;
    for (int i = 0; i < 5000; ++i) {
        t += gap(random);
        if (k.request(t).allowed) {
            admitted.push_back(t);
        }
    }
    ASSERT_GT(admitted.size(), 100u);
    // Sweep: every window [a_i, a_i + window) starting at an admission holds at most `limit`.
    for (std::size_t i = 0, j = 0; i < admitted.size(); ++i) {
        while (j < admitted.size() && admitted[j] < admitted[i] + 1000) {
            ++j;
        }
        ASSERT_LE(static_cast<std::int64_t>(j - i), limit) << "window starting at " << admitted[i];
    }
}

TEST(SlidingWindow, RetryAfterIsWhenTheOldestLeaves) {
    key_state k(windowed(config::algorithm::sliding_window, 2, milliseconds(1000)));
    EXPECT_TRUE(k.request(100).allowed);
    EXPECT_TRUE(k.request(300).allowed);
    auto d = k.request(400);
    ASSERT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after, milliseconds(700));
    EXPECT_FALSE(k.request(1099).allowed);
    EXPECT_TRUE(k.request(1100).allowed);
}

// The log keeps a clock that never goes back: a clock that went forward (where the first three
// admissions left the window) and came back does not find their slots free again.
TEST(SlidingWindow, AClockThatWentForwardAndCameBackFindsNoFreedSlots) {
    key_state k(windowed(config::algorithm::sliding_window, 3, milliseconds(1000)));
    for (int i = 0; i < 3; ++i) {
        EXPECT_TRUE(k.request(0).allowed);
    }
    EXPECT_TRUE(k.request(1000).allowed); // logged at 1000
    EXPECT_TRUE(k.request(1).allowed);    // logged at 1000 too
    EXPECT_TRUE(k.request(1).allowed);
    const auto refused = k.request(1);
    EXPECT_FALSE(refused.allowed);
    // From the clock's own reading: the oldest (1000) leaves at 2000.
    EXPECT_EQ(refused.retry_after, milliseconds(1999));
    EXPECT_FALSE(k.request(1001).allowed); // logged at 1, two would have left at 1001
    EXPECT_TRUE(k.request(2000).allowed);
}

} // namespace
} // namespace sluice::limiter::test
