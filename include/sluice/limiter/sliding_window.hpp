// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/limiter/decision.hpp"

#include <cstdint>
#include <vector>

namespace sluice::limiter {

/// One admission (or charge) of the log: when it was logged (ms) and the log's running total
/// of weight after it (so the weight in any suffix of the log is a difference of two totals).
struct sliding_window_entry {
    double at_ms = 0;
    std::int64_t total = 0;

    friend bool operator==(const sliding_window_entry&, const sliding_window_entry&) = default;
};

/**
 * The log of the window (clock - window, clock], ascending in time and total. `base` is the
 * running total that no longer counts: left the window, or given back by a refund (which takes
 * from the oldest entries first, so entries whose total is <= base weigh nothing). The window's
 * weighted count is `log.back().total - base` (0 for an empty log). `clock_ms` is the newest
 * reading the log was brought to: it never goes back. In Redis: a sorted set scored by time,
 * members the zero-padded totals, plus one member at -inf holding base and clock.
 */
struct sliding_window_state {
    std::vector<sliding_window_entry> log;
    std::int64_t base = 0;
    double clock_ms = 0;

    friend bool operator==(const sliding_window_state&, const sliding_window_state&) = default;
};

/**
 * SLIDING_WINDOW: an exact log. A request of cost c (1 unless the limit is cost-weighted, see
 * cost.hpp) is admitted when the weight logged in the window (clock - window, clock] plus c is
 * at most `limit`, and is then logged with weight c; so no window of that length ever holds more
 * than `limit` of admitted cost (refunds aside). The strictest of the four and the most
 * expensive: O(limit) memory per key and, in Redis, a sorted set per key. Rejected requests are
 * not logged. remaining = max(0, limit - weight); a refusal retries when enough of the oldest
 * entries have left the window for c to fit (a cost of 1: when the oldest leaves); a cost above
 * `limit` never fits: refused at once, nothing logged, `never_fits`, retry_after 0.
 */
decision sliding_window_acquire(sliding_window_state& state,
                                bool exists,
                                const config::limit& limit,
                                double now_ms,
                                std::int64_t cost = 1);

/**
 * Settles a reservation by `delta` (actual - reserved) at `now_ms`, on the log brought to now:
 * the window's weight becomes settle_level(weight, delta) (cost.hpp: never below 0, at most
 * 2^53). A charge is logged as an entry of its own at the log's clock, so it leaves the window
 * one window length after the settlement; a weight above `limit` is a debt that refuses every
 * request until enough of the log has left the window. A refund gives back from the oldest
 * entries first: it never makes later windows lighter than the request's own entry would (a
 * refund arriving after its request's entry left the window still lightens the current one).
 * No state (`exists == false`) settles an empty log. Returns how long until the settled log
 * equals a fresh one (its newest weighing entry has left the window; when it weighs nothing, the
 * clock has reached the log's clock, which is ahead of it only after a step back): reset_after.
 */
milliseconds sliding_window_settle(sliding_window_state& state,
                                   bool exists,
                                   const config::limit& limit,
                                   double now_ms,
                                   std::int64_t delta);

} // namespace sluice::limiter
