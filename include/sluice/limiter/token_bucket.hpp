// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/limiter/decision.hpp"
#include "sluice/limiter/leaky_bucket.hpp"

#include <cstdint>

namespace sluice::limiter {

/// Stored as the Redis hash fields `tokens` and `last_refill_time` (ms, whole and fraction).
struct token_bucket_state {
    std::int64_t tokens = 0;
    split_ms last_refill;

    friend bool operator==(const token_bucket_state&, const token_bucket_state&) = default;
};

/**
 * TOKEN_BUCKET: bursts of up to `capacity`, refilled at `refillRate` tokens per second. A request
 * takes `cost` tokens (1 unless the limit is cost-weighted, see cost.hpp) or is rejected; it is
 * never delayed. Refill advances by whole tokens and keeps the fraction in progress (no drift),
 * exactly as the leaky bucket's leak does: the two are the same meter seen from opposite sides
 * (tokens = capacity - queue_size, see leak_and_admit). A new key starts full.
 *
 * With c = cost and t the tokens after the refill: admitted when t >= c (then t -= c);
 * remaining = max(0, t); retry_after = until c tokens are there, (c - t) x T from the last refill
 * (T = 1000 / refillRate ms), rounded up, at least 1; reset_after = until the bucket is full. A
 * cost above `capacity` never fits: refused at once, nothing taken, `never_fits`, retry_after 0.
 */
decision token_bucket_acquire(token_bucket_state& state,
                              bool exists,
                              const config::limit& limit,
                              double now_ms,
                              std::int64_t cost = 1) noexcept;

/**
 * Settles a reservation by `delta` (actual - reserved): refills to `now_ms`, then
 * `tokens -= delta`. A refund never fills the bucket above `capacity`; a charge may take the
 * tokens below 0, a debt paid off at refillRate, during which every request is refused with the
 * true time until its cost fits (at most 2^53 tokens of debt, see cost.hpp). No state
 * (`exists == false`) settles a full bucket. Returns how long until the bucket is full again.
 */
milliseconds token_bucket_settle(token_bucket_state& state,
                                 bool exists,
                                 const config::limit& limit,
                                 double now_ms,
                                 std::int64_t delta) noexcept;

} // namespace sluice::limiter
