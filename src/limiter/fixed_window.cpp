// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/fixed_window.hpp"

#include "sluice/core/saturate.hpp"
#include "sluice/limiter/cost.hpp"

#include <algorithm>
#include <cmath>

namespace sluice::limiter {

namespace {

// Moves `state` to the window current at `now_ms` (a stored window other than it is over and
// counts from zero, as a fresh Redis key would); returns the time until that window ends.
milliseconds current_window(fixed_window_state& state,
                            bool exists,
                            const config::limit& limit,
                            double now_ms) noexcept {
    const auto window_ms = static_cast<double>(limit.window.count());
    double start = std::floor(now_ms / window_ms) * window_ms;
    // A clock that stepped back stays in the newest window seen, with its count: a window that
    // is over never reopens (its count would start from zero again), so the state never goes
    // back.
    if (exists && state.window_start_ms > start) {
        start = state.window_start_ms;
    }
    if (!exists || state.window_start_ms != start) {
        state.count = 0;
        state.window_start_ms = start;
    }
    return saturating_ms(std::ceil(start + window_ms - now_ms));
}

} // namespace

decision fixed_window_acquire(fixed_window_state& state,
                              bool exists,
                              const config::limit& limit,
                              double now_ms,
                              std::int64_t cost) noexcept {
    const std::int64_t c = clamp_cost(cost);
    const auto until_end = current_window(state, exists, limit, now_ms);

    decision d;
    d.limit = limit.limit_count;
    d.window = limit.window;
    if (c > limit.limit_count) {
        d.never_fits = true;                           // not even an empty window holds it
    } else if (state.count <= limit.limit_count - c) { // count + c <= limit, without overflow
        d.allowed = true;
        state.count += c;
    } else {
        d.retry_after = std::max(until_end, milliseconds{1});
    }
    d.remaining = std::max<std::int64_t>(limit.limit_count - state.count, 0);
    d.reset_after = until_end;
    return d;
}

milliseconds fixed_window_settle(fixed_window_state& state,
                                 bool exists,
                                 const config::limit& limit,
                                 double now_ms,
                                 std::int64_t delta) noexcept {
    const auto until_end = current_window(state, exists, limit, now_ms);
    state.count = settle_level(state.count, clamp_delta(delta));
    return until_end;
}

} // namespace sluice::limiter
