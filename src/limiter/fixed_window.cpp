// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/fixed_window.hpp"

#include "sluice/core/saturate.hpp"

#include <algorithm>
#include <cmath>

namespace sluice::limiter {

decision fixed_window_acquire(fixed_window_state& state,
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
    // A stored window other than the current one is over: this window's count starts from zero,
    // as a fresh Redis key would.
    if (!exists || state.window_start_ms != start) {
        state.count = 0;
        state.window_start_ms = start;
    }
    const auto until_end = saturating_ms(std::ceil(start + window_ms - now_ms));

    decision d;
    d.limit = limit.limit_count;
    d.window = limit.window;
    d.allowed = state.count + 1 <= limit.limit_count;
    if (d.allowed) {
        ++state.count;
    } else {
        d.retry_after = std::max(until_end, milliseconds{1});
    }
    d.remaining = limit.limit_count - state.count;
    d.reset_after = until_end;
    return d;
}

} // namespace sluice::limiter
