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
 */
decision fixed_window_acquire(fixed_window_state& state,
                              bool exists,
                              const config::limit& limit,
                              double now_ms) noexcept;

} // namespace sluice::limiter
