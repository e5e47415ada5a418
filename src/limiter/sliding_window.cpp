// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/sliding_window.hpp"

#include "sluice/core/saturate.hpp"

#include <algorithm>
#include <cmath>

namespace sluice::limiter {
namespace {

milliseconds ceil_ms(double ms) noexcept {
    return saturating_ms(std::ceil(std::max(0.0, ms)));
}

} // namespace

decision sliding_window_acquire(sliding_window_state& state,
                                bool exists,
                                const config::limit& limit,
                                double now_ms) {
    auto& log = state.admitted_ms;
    if (!exists) {
        log.clear();
    }
    const auto window_ms = static_cast<double>(limit.window.count());
    // The log keeps one clock that never goes back, as the buckets' last leak and the fixed
    // window's start never do: a clock behind the newest admission reads as that admission's
    // time. Otherwise a clock that went forward (forgetting what left the window there) and came
    // back would find the slots it forgot free a second time. The times the caller sees
    // (retry_after, reset_after) still count from its own clock.
    const double log_now_ms = log.empty() ? now_ms : std::max(now_ms, log.back());
    // Forget what has left the window (log_now - window, log_now].
    const auto first_inside = std::upper_bound(log.begin(), log.end(), log_now_ms - window_ms);
    log.erase(log.begin(), first_inside);

    decision d;
    d.limit = limit.limit_count;
    d.window = limit.window;
    d.allowed = static_cast<std::int64_t>(log.size()) < limit.limit_count;
    if (d.allowed) {
        log.push_back(log_now_ms); // the newest, so the log stays in order
    } else if (!log.empty()) {
        // A slot frees when the oldest admission leaves the window.
        d.retry_after = std::max(ceil_ms(log.front() + window_ms - now_ms), milliseconds{1});
    } else {
        d.retry_after = limit.window; // limit 0 (only possible when built in code): never admits
    }
    d.remaining = limit.limit_count - static_cast<std::int64_t>(log.size());
    d.reset_after = log.empty() ? milliseconds{0} : ceil_ms(log.back() + window_ms - now_ms);
    return d;
}

} // namespace sluice::limiter
