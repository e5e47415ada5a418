// SPDX-License-Identifier: Apache-2.0
#include "sluice/io/coarse_clock.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace sluice {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

// The same clock as steady_clock, read at its last tick: never ahead of it. (A clock with
// another epoch, CLOCK_REALTIME's or CLOCK_BOOTTIME's after a suspend, would fail here.)
TEST(CoarseClock, IsNeverAheadOfSteadyClock) {
    for (int i = 0; i < 10'000; ++i) {
        const auto coarse = coarse_clock::now();
        const auto precise = steady::now();
        ASSERT_LE(coarse, precise) << "at reading " << i;
    }
}

// Ticks of 1 to 10 ms: Linux's CONFIG_HZ is 1000, 300, 250 or 100.
TEST(CoarseClock, ResolutionIsOneKernelTick) {
    EXPECT_GT(coarse_clock::resolution(), 0ns);
    EXPECT_LE(coarse_clock::resolution(), 10ms);
}

// A deadline of latest_now() + d lies at least d after steady_clock's now before it: the
// coarse reading lags by less than two ticks. (A pause between the two readings only widens
// the gap the wrong way for a failure.)
TEST(CoarseClock, LatestNowIsAtOrAfterSteadyClock) {
    for (int i = 0; i < 100'000; ++i) {
        const auto before = steady::now();
        const auto latest = coarse_clock::latest_now();
        ASSERT_GE(latest, before) << "at reading " << i << ", short by "
                                  << (before - latest).count() << " ns";
    }
}

} // namespace
} // namespace sluice
