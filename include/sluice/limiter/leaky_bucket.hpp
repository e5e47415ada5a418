// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/limiter/decision.hpp"

#include <cstdint>
#include <optional>

namespace sluice::limiter {

/**
 * A time in ms kept as its whole ms and, apart, the fraction of a ms, in [0, 1). The buckets'
 * last leak (or refill) moves on by whole slots of T = 1000 / rate ms, rarely a whole number of
 * ms. At unix-ms magnitudes a single double steps by 2^-12 ms, so each slot added to it would
 * round, always the same way for a given T: a queue that stayed busy drifted (about 42 ms a day
 * at flowRate 6), and a request exactly on a slot's end was refused after a few slots (a
 * capacity 2, flowRate 0.7 key: six slots, and a request at L + T found L 0.0006 ms late). Kept
 * apart, the fraction rounds at its own magnitude, about 1e-13 ms a slot.
 */
struct split_ms {
    double whole = 0;
    double fraction = 0;

    /// The time as one double (rounded): for reading, never for the arithmetic.
    double approx() const noexcept { return whole + fraction; }

    friend bool operator==(const split_ms&, const split_ms&) = default;
};

/// The page's Redis hash, as numbers: `queue_size` and `last_leak_time` (ms, whole and fraction).
struct leaky_bucket_state {
    std::int64_t queue_size = 0;
    split_ms last_leak;

    friend bool operator==(const leaky_bucket_state&, const leaky_bucket_state&) = default;
};

/**
 * One request of cost `cost` against a leaky bucket at time `now_ms`, following
 * shared/LEAKY-BUCKET.md.
 *
 * Leak first: one slot drains every T = 1000 / flowRate ms, and `last_leak` advances by whole
 * slots only, so the fractional progress toward the next slot is kept (setting it to `now` would
 * starve a client sending steadily just above flowRate). A clock reading earlier than
 * `last_leak` leaks nothing and never moves it back; a request it admits is held as if the clock
 * stood at `last_leak` (L - now taken as 0 in delay_ms below: nginx's limit_req likewise takes a
 * negative elapsed time for none), so that a clock's step back does not lengthen a hold. Retries
 * and the reset count on the store's clock, where nothing leaks until it passes `last_leak`. Then
 * admit when the request's c slots fit, `queue_size + c <= capacity` (and, when shaping with
 * `max_delay`, when the wait fits it).
 *
 * Cost (see cost.hpp; 1 unless the limit is cost-weighted): a request of cost c is c requests of
 * cost 1 arriving together, and it is forwarded with the last of them. With q the level after
 * the leak and L the last leak, its slots stand at positions q + 1 .. q + c; position p leaves
 * the head at L + (p - 1) x T, so
 *
 *   delay_ms       = max(0, L + (q + c - 1) x T - now)     (shape; c = 1: the page's formula)
 *   retry_after_ms = L + (q + c - capacity) x T - now       (full: until q + c - capacity slots
 *                                                            leaked, rounded up, at least 1)
 *   retry_after_ms = delay_ms - max_delay                   (a wait beyond max_delay: it
 *                                                            shrinks one ms per ms; full with
 *                                                            max_delay, the later of the two)
 *   remaining      = max(0, capacity - q),  reset_after = L + q x T - now  (q after the request)
 *
 * and the backend sees cost at flowRate on average. A cost above `capacity` never fits: refused
 * at once, nothing charged, `never_fits`, retry_after 0. A queue above capacity (a debt left by
 * `leaky_bucket_settle`) refuses in police mode, and in shape mode makes the next requests wait
 * until it has drained to capacity - c; the formulas above hold unchanged.
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
                              double now_ms,
                              std::int64_t cost = 1) noexcept;

/**
 * Settles a reservation by `delta` (actual - reserved): leaks to `now_ms` as `acquire` does, then
 * `queue_size += delta`, never below 0 and at most 2^53 (cost.hpp). A refund gives slots back at
 * once; a charge may leave the queue above capacity, a debt that drains at flowRate. No state
 * (`exists == false`) settles an empty queue. Returns how long until the state equals a fresh one
 * (the queue drained), as `reset_after` reports it.
 */
milliseconds leaky_bucket_settle(leaky_bucket_state& state,
                                 bool exists,
                                 const config::limit& limit,
                                 double now_ms,
                                 std::int64_t delta) noexcept;

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
                        double now_ms,
                        std::int64_t cost = 1) noexcept;

/// The settlement shared by both buckets; returns the time until the queue is empty.
milliseconds leak_and_settle(leaky_bucket_state& state,
                             bool exists,
                             double flow_rate,
                             double now_ms,
                             std::int64_t delta) noexcept;

} // namespace sluice::limiter
