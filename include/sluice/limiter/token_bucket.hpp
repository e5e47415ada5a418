// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/limiter/decision.hpp"

#include <cstdint>

namespace sluice::limiter {

/// Stored as the Redis hash fields `tokens` and `last_refill_time` (ms, may be fractional).
struct token_bucket_state {
    std::int64_t tokens = 0;
    double last_refill_ms = 0;

    friend bool operator==(const token_bucket_state&, const token_bucket_state&) = default;
};

/**
 * TOKEN_BUCKET: bursts of up to `capacity`, refilled at `refillRate` tokens per second. A request
 * takes one token or is rejected; it is never delayed. Refill advances by whole tokens and keeps
 * the fraction in progress (no drift), exactly as the leaky bucket's leak does: the two are the
 * same meter seen from opposite sides (tokens = capacity - queue_size). A new key starts full.
 */
decision token_bucket_acquire(token_bucket_state& state,
                              bool exists,
                              const config::limit& limit,
                              double now_ms) noexcept;

} // namespace sluice::limiter
