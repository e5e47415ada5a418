// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/limiter/decision.hpp"

#include <cstdint>
#include <optional>

namespace sluice::limiter {

/// The page's Redis hash, as numbers: `queue_size` and `last_leak_time` (ms, may be fractional).
struct leaky_bucket_state {
    std::int64_t queue_size = 0;
    double last_leak_ms = 0;

    friend bool operator==(const leaky_bucket_state&, const leaky_bucket_state&) = default;
};

/**
 * One request against a leaky bucket at time `now_ms`, following shared/LEAKY-BUCKET.md.
 *
 * Leak first: one slot drains every T = 1000 / flowRate ms, and `last_leak_ms` advances by whole
 * slots only, so the fractional progress toward the next slot is kept (setting it to `now` would
 * starve a client sending steadily just above flowRate). A clock reading earlier than
 * `last_leak_ms` leaks nothing and never moves it back. Then admit when `queue_size + 1 <=
 * capacity` (and, when shaping with `max_delay`, when the wait fits it).
 *
 * `state` is the stored state on entry (`exists == false`: no key yet); on return it is the state
 * to store *if* the caller commits the request. A rejection leaves it as leaked but uncharged,
 * which the caller may store or drop: both give the same future decisions. The Lua script in
 * src/redis/ performs the identical double arithmetic, so both stores decide alike.
 *
 * Cost: O(1), no allocation.
 */
decision leaky_bucket_acquire(leaky_bucket_state& state,
                              bool exists,
                              const config::limit& limit,
                              double now_ms) noexcept;

/**
 * The arithmetic shared by the leaky and the token bucket (a token bucket is a leaky bucket
 * that never delays: tokens = capacity - queue_size), with the limit's fields spelled out.
 */
decision leak_and_admit(leaky_bucket_state& state,
                        bool exists,
                        std::int64_t capacity,
                        double flow_rate,
                        bool shaping,
                        std::optional<milliseconds> max_delay,
                        double now_ms) noexcept;

} // namespace sluice::limiter
