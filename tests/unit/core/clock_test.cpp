// SPDX-License-Identifier: Apache-2.0
// The memory store's clock: steady, set to Unix time when made, so that a FIXED_WINDOW starts on
// the same boundaries (a minute's on the minute) as on Redis, whose clock is Unix time.
#include "sluice/core/clock.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace sluice {
namespace {

double unix_ms() {
    return std::chrono::duration<double, std::milli>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

TEST(SteadyClockSource, ReadsUnixTimeWhenMadeAndNeverGoesBack) {
    const steady_clock_source clock;
    const double before = unix_ms();
    const double reading = clock.now_ms();
    const double after = unix_ms();
    // Within what the two readings of each clock around it allow, and a millisecond for the
    // offset's own two readings; a steady clock's epoch (the boot) is days off.
    EXPECT_GE(reading, before - 1.0);
    EXPECT_LE(reading, after + 1.0);
    EXPECT_GE(clock.now_ms(), reading);
}

} // namespace
} // namespace sluice
