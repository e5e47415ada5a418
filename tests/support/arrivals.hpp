// SPDX-License-Identifier: Apache-2.0
// Reading the outcome of a limiting or shaping test: what the clients saw (exchanges), what the
// upstream saw (arrivals), and how far sluice got deciding (from /metrics).
#pragma once

#include "support/limited_sluice.hpp"
#include "support/recording_upstream.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sluice::test {

/**
 * The stores' clocks are whole milliseconds (memory: floored steady time; Redis: TIME), so a
 * slot computed from them may open up to a millisecond before the exact instant; 2 ms covers
 * both ends of a comparison.
 */
inline constexpr std::chrono::milliseconds store_clock_slack{2};

/**
 * Requests the limiter has decided so far under `rule`: held (or refused for max-held),
 * forwarded at once, or rejected. Read from /metrics, so that a test knows when a burst is
 * fully decided (held requests count when their hold begins, the others when answered).
 */
double decided_requests(std::uint16_t admin, const std::string& rule = "fallback");

/// Whole slots of `slot` in `span`: at most this many leak from a bucket meanwhile.
long long slots_in(std::chrono::steady_clock::duration span, std::chrono::milliseconds slot);

/// How many of `exchanges` got `status`.
long long count_status(const std::vector<exchange>& exchanges, unsigned status);

/**
 * The earliest response among `exchanges`. Every response leaves after its own decision, so
 * this is an upper bound for the first decision of the run (the head's leak time).
 */
steady_time first_received(const std::vector<exchange>& exchanges);

/// Arrival time at the upstream per target (for tests whose targets are unique).
std::map<std::string, steady_time> arrivals_by_target(const recording_upstream& upstream);

/// Every arrival time at the upstream, ascending.
std::vector<steady_time> sorted_arrivals(const recording_upstream& upstream);

/**
 * Expects sorted arrival i at leaky-bucket slot i: within
 * [lower + i x slot - store_clock_slack, upper + i x slot + late], where [lower, upper] brackets
 * the head's release time (its request sent, its response back). The lower bound is exact:
 * a bucket never releases before a slot opens and timers never fire early. `late` allows for
 * scheduling. Valid while the queue never empties (consecutive slots).
 */
void expect_on_slots(const std::vector<steady_time>& arrivals,
                     std::chrono::milliseconds slot,
                     steady_time lower,
                     steady_time upper,
                     std::chrono::milliseconds late);

/**
 * Expects the release schedule on time as a rule: the median of arrival i's lateness against
 * arrivals[0] + i x slot (i >= 1) under one slot. arrivals[0] comes after the head's release L,
 * so this understates each lateness (never overstates it): scheduling cannot fail it. A host
 * stall delays only the releases due during it (those after it go at their own slot times
 * again), so it cannot fail it either while it covers fewer than half the arrivals. A schedule
 * slower than one slot per `slot` is late by a growing amount, about i x (its slot - slot) for
 * arrival i: the median, about n/2 of them, exceeds one slot once the slot is more than about
 * 1 + 2/n times too long (4% for 50 arrivals). Valid while the queue never empties.
 */
void expect_on_time_as_a_rule(const std::vector<steady_time>& arrivals,
                              std::chrono::milliseconds slot);

} // namespace sluice::test
