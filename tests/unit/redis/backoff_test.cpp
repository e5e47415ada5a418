// SPDX-License-Identifier: Apache-2.0
#include "sluice/redis/backoff.hpp"

#include <gtest/gtest.h>

#include <random>

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;

TEST(ReconnectBackoff, DoublesToTheCeilingWithEqualJitterAndResets) {
    reconnect_backoff backoff(100ms, 500ms);
    std::minstd_rand rng(7);
    const std::chrono::milliseconds ceilings[] = {100ms, 200ms, 400ms, 500ms, 500ms, 500ms};
    for (const auto ceiling : ceilings) {
        ASSERT_EQ(backoff.ceiling(), ceiling);
        EXPECT_EQ(backoff.shortest(), ceiling / 2);
        const auto wait = backoff.next(rng);
        EXPECT_GE(wait, ceiling / 2);
        EXPECT_LE(wait, ceiling);
    }
    backoff.reset();
    EXPECT_EQ(backoff.ceiling(), 100ms);
}

TEST(ReconnectBackoff, ManyFailuresKeepTheCeiling) {
    reconnect_backoff backoff(100ms, 500ms);
    std::minstd_rand rng(1);
    for (int i = 0; i < 1000; ++i) {
        const auto wait = backoff.next(rng);
        ASSERT_GE(wait, 50ms);
        ASSERT_LE(wait, 500ms);
    }
    EXPECT_EQ(backoff.ceiling(), 500ms);
}

TEST(ReconnectBackoff, MostAttemptsWithinAWindow) {
    // The client's defaults: waits of at least 50, 100, 200, then 250 ms.
    EXPECT_EQ(most_attempts_within(0ms, 100ms, 500ms), 1);
    EXPECT_EQ(most_attempts_within(49ms, 100ms, 500ms), 1);
    EXPECT_EQ(most_attempts_within(50ms, 100ms, 500ms), 2);
    EXPECT_EQ(most_attempts_within(350ms, 100ms, 500ms), 4);
    // 350 ms, then 10 waits of 250 ms: 14 in any 3 s (the defect reconnected 13 times a second
    // per worker).
    EXPECT_EQ(most_attempts_within(3000ms, 100ms, 500ms), 14);
}

} // namespace
} // namespace sluice::redis
