// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/limiter/decision.hpp"

#include <vector>

namespace sluice::limiter {

/// The times (ms, ascending) of the requests admitted within the last window: never more than
/// `limit` entries. In Redis: a sorted set scored by time.
struct sliding_window_state {
    std::vector<double> admitted_ms;

    friend bool operator==(const sliding_window_state&, const sliding_window_state&) = default;
};

/**
 * SLIDING_WINDOW: an exact log. A request is admitted when fewer than `limit` requests were
 * admitted in the window (now - window, now]; so no window of that length ever holds more than
 * `limit` admissions. The strictest of the four and the most expensive: O(limit) memory per key
 * and, in Redis, a sorted set per key. Rejected requests are not logged.
 */
decision sliding_window_acquire(sliding_window_state& state,
                                bool exists,
                                const config::limit& limit,
                                double now_ms);

} // namespace sluice::limiter
