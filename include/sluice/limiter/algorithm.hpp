// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/limiter/concurrency.hpp"
#include "sluice/limiter/fixed_window.hpp"
#include "sluice/limiter/leaky_bucket.hpp"
#include "sluice/limiter/sliding_window.hpp"
#include "sluice/limiter/token_bucket.hpp"

#include <optional>
#include <variant>

namespace sluice::limiter {

/// The state of one key under any algorithm; the alternative matches `config::limit::algo`.
using state = std::variant<leaky_bucket_state,
                           token_bucket_state,
                           fixed_window_state,
                           sliding_window_state,
                           concurrency_state>;

/**
 * One request of cost `cost` against `limit` at `now_ms`, dispatching on the limit's algorithm.
 * A stored state of another algorithm (the limit changed on reload) counts as no state. On return
 * `current` holds the state to store if the caller commits. Allocates only for SLIDING_WINDOW.
 * CONCURRENCY counts every request as 1, whatever its cost (see cost.hpp).
 */
decision acquire(
    state& current, bool exists, const config::limit& limit, double now_ms, std::int64_t cost = 1);

/// Whether `algo` weighs requests by cost and settles reservations (see cost.hpp).
constexpr bool settles(config::algorithm algo) noexcept {
    return algo != config::algorithm::concurrency;
}

/**
 * Whether a refund (a negative settlement, or a charge given back) changes `limit`'s state: for
 * all but a LEAKY_BUCKET in shape mode, whose queue is a timeline of slots promised to held
 * requests (each held until L + k x T, perhaps by another instance): taking from it would move
 * the next request onto a slot already promised, and the upstream would see two at once. There a
 * refund gives nothing back and its slots pass unused, as the slot of a client that left while
 * held does; a charge above the reservation still delays the requests after it.
 */
constexpr bool takes_refunds(const config::limit& limit) noexcept {
    return limit.algo != config::algorithm::leaky_bucket ||
           limit.mode != config::shaping_mode::shape;
}

/**
 * Settles a reservation of `limit` by `delta` (actual - reserved) at `now_ms`, dispatching to the
 * algorithm's `*_settle`. No state, or a state of another algorithm (counted as none, as by
 * `acquire`), settles a fresh one: a refund then changes nothing and a charge starts from fresh.
 * Returns the time until the settled state equals a fresh one (the key may then be forgotten),
 * with the state to store in `current`; nullopt when there is nothing to store: an algorithm that
 * does not settle, a zero delta, a refund on no state, or a refund the limit does not take
 * (`takes_refunds`; `current` is then left as it was).
 */
std::optional<milliseconds> settle(state& current,
                                   bool exists,
                                   const config::limit& limit,
                                   double now_ms,
                                   std::int64_t delta) noexcept;

/// CONCURRENCY: gives back a slot `acquire` took in the count `epoch` (concurrency_state). A
/// state of another algorithm (the limit changed on reload), or another count, is left as it is.
/// True when the key then holds no slot (nothing to remember).
bool release(state& current, std::uint64_t epoch) noexcept;

} // namespace sluice::limiter
