// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/limiter/decision.hpp"

#include <cstdint>

namespace sluice::limiter {

/// A counter and the start of the window it counts (ms, a multiple of the window length).
struct fixed_window_state {
    std::int64_t count = 0;
    double window_start_ms = 0;

    friend bool operator==(const fixed_window_state&, const fixed_window_state&) = default;
};

/**
 * FIXED_WINDOW (the page's "fixed counter"): at most `limit` requests per window; windows are
 * aligned to multiples of `window` since the clock's epoch, so every instance agrees on them.
 * Cheapest in time and memory; its weakness is the boundary: up to 2 x limit can pass within one
 * window length that straddles a boundary. Rejected requests are not counted. A clock reading
 * earlier than the stored window counts in the stored window: a window never reopens.
 *
 * A request of cost c (1 unless the limit is cost-weighted, see cost.hpp) is admitted when
 * count + c <= limit, and then counts c; remaining = max(0, limit - count); a refusal retries
 * when the window ends (the next window starts from zero, where any c <= limit fits). A cost
 * above `limit` never fits: refused at once, nothing counted, `never_fits`, retry_after 0.
 */
decision fixed_window_acquire(fixed_window_state& state,
                              bool exists,
                              const config::limit& limit,
                              double now_ms,
                              std::int64_t cost = 1) noexcept;

/**
 * Settles a reservation by `delta` (actual - reserved): `count += delta` in the window current at
 * `now_ms` (the window `acquire` would count in), never below 0 and at most 2^53. A settlement
 * arriving after its request's window ended applies to the current window, the only one whose
 * count still matters: a refund then gives back nothing (the new window's count never goes
 * below 0), a charge counts against the new window. A count above `limit` (a debt) refuses every
 * request until the window ends. No state (`exists == false`) settles an empty window. Returns
 * how long until the window ends (its state then equals a fresh one).
 */
milliseconds fixed_window_settle(fixed_window_state& state,
                                 bool exists,
                                 const config::limit& limit,
                                 double now_ms,
                                 std::int64_t delta) noexcept;

} // namespace sluice::limiter
