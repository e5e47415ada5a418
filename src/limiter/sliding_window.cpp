// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/sliding_window.hpp"

#include "sluice/core/saturate.hpp"
#include "sluice/limiter/cost.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace sluice::limiter {
namespace {

milliseconds ceil_ms(double ms) noexcept {
    return saturating_ms(std::ceil(std::max(0.0, ms)));
}

// The running total of the log's newest entry (base when it has none).
std::int64_t top_of(const sliding_window_state& state) noexcept {
    return state.log.empty() ? state.base : state.log.back().total;
}

// Brings the log to `now_ms`; returns the log's clock. The log keeps one clock that never goes
// back, as the buckets' last leak and the fixed window's start never do: a clock behind it reads
// as the log's clock. Otherwise a clock that went forward (forgetting what left the window
// there) and came back would find the weight it forgot free a second time. The times the caller
// sees (retry_after, reset_after) still count from its own clock. What has left the window
// (at - window, at] no longer counts (base rises to its total); a log that weighs nothing starts
// its totals from 0 again.
double
advance(sliding_window_state& state, bool exists, const config::limit& limit, double now_ms) {
    if (!exists) {
        state = {};
        state.clock_ms = now_ms;
    }
    const double at = std::max(now_ms, state.clock_ms);
    state.clock_ms = at;
    auto& log = state.log;
    const double edge = at - static_cast<double>(limit.window.count());
    const auto first_inside =
        std::upper_bound(log.begin(), log.end(), edge, [](double t, const sliding_window_entry& e) {
            return t < e.at_ms;
        });
    if (first_inside != log.begin()) {
        state.base = std::max(state.base, std::prev(first_inside)->total);
        log.erase(log.begin(), first_inside);
    }
    if (top_of(state) <= state.base) {
        log.clear();
        state.base = 0;
    }
    return at;
}

// Logs `amount` (1 .. 2^53, and the weight after it at most 2^53) at the log's clock. Totals stay
// within 2^53, where the script's doubles are exact: when the next one would not, the log is
// renumbered from base (entries that weigh nothing go).
void append(sliding_window_state& state, std::int64_t amount) {
    auto top = top_of(state);
    if (top > max_amount - amount) {
        auto& log = state.log;
        const auto base = state.base;
        std::erase_if(log, [base](const sliding_window_entry& e) { return e.total <= base; });
        for (auto& e : log) {
            e.total -= base;
        }
        top -= base;
        state.base = 0;
    }
    state.log.push_back({state.clock_ms, top + amount});
}

// Until the log equals a fresh one: until its newest entry that weighs leaves the window, or,
// when it weighs nothing, until the clock reaches the log's (ahead of it only after a step back;
// before, an admission would be logged at the log's clock, not at the reading).
milliseconds
until_reset(const sliding_window_state& state, const config::limit& limit, double now_ms) noexcept {
    if (top_of(state) <= state.base) {
        return ceil_ms(state.clock_ms - now_ms);
    }
    return ceil_ms(state.log.back().at_ms + static_cast<double>(limit.window.count()) - now_ms);
}

} // namespace

decision sliding_window_acquire(sliding_window_state& state,
                                bool exists,
                                const config::limit& limit,
                                double now_ms,
                                std::int64_t cost) {
    const std::int64_t c = clamp_cost(cost);
    advance(state, exists, limit, now_ms);
    const auto top = top_of(state);
    std::int64_t weight = top - state.base;

    decision d;
    d.limit = limit.limit_count;
    d.window = limit.window;
    if (c > limit.limit_count) {
        d.never_fits = true;                      // not even an empty window holds it
    } else if (weight <= limit.limit_count - c) { // weight + c <= limit, without overflow
        d.allowed = true;
        append(state, c);
        weight += c;
    } else {
        // c fits once the entries up to the first whose total reaches top + c - limit have left
        // the window (for a cost of 1 without a debt: the oldest that weighs). It exists: the
        // newest's total is top, and c <= limit.
        const auto target = top + c - limit.limit_count;
        const auto freeing = std::lower_bound(
            state.log.begin(),
            state.log.end(),
            target,
            [](const sliding_window_entry& e, std::int64_t t) { return e.total < t; });
        d.retry_after =
            std::max(ceil_ms(freeing->at_ms + static_cast<double>(limit.window.count()) - now_ms),
                     milliseconds{1});
    }
    d.remaining = std::max<std::int64_t>(limit.limit_count - weight, 0);
    d.reset_after = until_reset(state, limit, now_ms);
    return d;
}

milliseconds sliding_window_settle(sliding_window_state& state,
                                   bool exists,
                                   const config::limit& limit,
                                   double now_ms,
                                   std::int64_t delta) {
    advance(state, exists, limit, now_ms);
    const auto top = top_of(state);
    const auto weight = top - state.base;
    const auto settled = settle_level(weight, clamp_delta(delta));
    if (settled > weight) {
        append(state, settled - weight); // a charge: its own entry, at the log's clock
    } else if (settled == 0) {
        state.log.clear();
        state.base = 0;
    } else {
        state.base = top - settled; // a refund: the oldest entries weigh less
    }
    return until_reset(state, limit, now_ms);
}

} // namespace sluice::limiter
