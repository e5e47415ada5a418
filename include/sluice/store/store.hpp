// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/io/net.hpp"
#include "sluice/limiter/decision.hpp"

#include <boost/container/small_vector.hpp>

#include <chrono>
#include <optional>
#include <span>
#include <string>

namespace sluice::store {

/// One limit to decide for a request, under its derived key (`rate-limit:<ip>:<endpoint>`).
struct check {
    std::string key;
    /// Points into the caller's config snapshot, which the caller keeps alive until completion.
    const config::limit* limit = nullptr;
    /**
     * What the request reserves of the limit; 1 unless the limit is cost-weighted (issue 15:
     * e.g. an LLM request's `max_tokens`). TOKEN_BUCKET, LEAKY_BUCKET, FIXED_WINDOW and
     * SLIDING_WINDOW admit it only when the whole cost fits, and charge all of it; CONCURRENCY
     * counts 1 whatever the cost (the configuration refuses `cost` on it). Clamped to [1, 2^53]
     * (limiter/cost.hpp). A cost above the limit's capacity
     * (`limit` for a window) never fits: refused, nothing charged, `decision::never_fits`.
     */
    std::int64_t cost = 1;
};

using checks = boost::container::small_vector<check, 2>;

/// A slot a CONCURRENCY limit gave a request, to give back with `store::release` once.
struct slot {
    std::string key;
    /// Redis: the lease's member in the key's slot set; empty for a slot of the memory store.
    std::string lease_id;
    /// How long the slot stays taken unless renewed (Redis; the limit's `lease`).
    std::chrono::milliseconds lease{0};
    /// Memory store: the key's count the slot was taken in (limiter::concurrency_state::epoch).
    std::uint64_t epoch = 0;
};

using slots = boost::container::small_vector<slot, 1>;

/// A reservation adjusted once the request's real cost is known (see `store::settle`).
struct settlement {
    /// The key the reservation was charged under, as in its `check`.
    std::string key;
    /// The limit the reservation was charged on; need only live during the `settle` call (a
    /// store that sends settlements later copies what it needs).
    const config::limit* limit = nullptr;
    /// actual - reserved: negative gives back, positive charges more (may leave a debt).
    /// Clamped to [-2^53, 2^53].
    std::int64_t delta = 0;
    /// The reservation was decided by the Redis store's local fallback (`outcome::local`): it is
    /// settled there, where it was charged.
    bool local = false;
};

/// One decision per check, in order; `ec` set when the store could not decide at all.
struct outcome {
    error_code ec;
    boost::container::small_vector<limiter::decision, 2> decisions;
    /// The slots taken for the admitted request's CONCURRENCY limits (dry-run ones included);
    /// the caller gives them back with `release` when the request is over.
    store::slots slots;
    /// Decided by the Redis store's local fallback (`failure-mode: local`) rather than by Redis:
    /// its settlements carry `settlement::local`.
    bool local = false;
};

/**
 * Where limiter state lives. Implementations: `memory_store` (in-process, shared by all workers)
 * and `redis_store` (one per worker, Lua scripts, shared by every sluice instance).
 *
 * `acquire` decides all checks of one request atomically: either every limit admits and each is
 * charged, or none is charged (a limit with `dry_run` never blocks the others). It never throws;
 * it completes on the awaiting coroutine's executor and may complete without suspending.
 */
class store {
public:
    virtual ~store() = default;

    virtual awaitable<outcome> acquire(checks request_checks) = 0;

    /**
     * `acquire` in place: reads `request_checks` and writes the outcome into `out` (replacing
     * what it held), both the caller's until completion. The request path decides so: a store
     * that suspends (Redis) then neither moves the checks into its wait nor the outcome out of
     * it, on the way through Asio's handlers (0.7k instructions a request; see the override).
     */
    virtual awaitable<void> acquire_into(const checks& request_checks, outcome& out) {
        out = co_await acquire(request_checks);
    }

    /**
     * The same decision made without suspending, for a store that can (the memory store);
     * nullopt: this store cannot, co_await `acquire` instead. Lets a caller skip a coroutine
     * frame per request.
     */
    virtual std::optional<outcome> try_acquire_now(const checks& request_checks) {
        (void)request_checks;
        return std::nullopt;
    }

    /**
     * Gives back slots `acquire` took, each exactly once, from the thread that acquired them.
     * Never fails the caller: a store that cannot reach its backend lets the slot's lease lapse.
     * The store wakes the key's waiters (see `slot_waiters`) once the slot is free.
     */
    virtual void release(std::span<const slot> taken) noexcept = 0;

    /**
     * Adjusts reservations, each in one atomic step on the store's clock (Redis: TIME); never
     * blocks and never fails the caller (a store that cannot reach its backend drops the
     * adjustment, logged rate-limited). Each settlement brings its key's state up to now (refill,
     * leak, the current window) and then charges `delta` more or gives `-delta` back:
     * - TOKEN_BUCKET: tokens -= delta, never above capacity; below 0 is a debt, paid off at
     *   refillRate, during which every request is refused with the true time until its cost fits.
     * - LEAKY_BUCKET: queue_size += delta, never below 0; above capacity is a debt that drains at
     *   flowRate: refusals (police), or longer waits for the next requests (shape).
     * - FIXED_WINDOW: count += delta in the window current at the settlement, never below 0: a
     *   settlement arriving after its window ended refunds nothing and charges the new window.
     * - SLIDING_WINDOW: the weight logged in the window becomes weight + delta, never below 0: a
     *   charge is logged at the settlement (it leaves the window one window later), a refund
     *   takes from the oldest entries first; a weight above `limit` is a debt that refuses until
     *   enough of the log has left the window.
     * - CONCURRENCY: nothing (its requests cost 1).
     * A key without state (forgotten or expired) settles a fresh state: a refund changes
     * nothing, a charge starts from a full bucket, an empty queue or an empty window. A key
     * holding another algorithm's state (a reload changed the limit) is left alone: that state
     * is another limit's, whose own requests keep it. The settlements of one call
     * are applied in order, independently of each other (not all-or-none: each one is already a
     * fact about a request that ran). Call from the thread that acquired.
     */
    virtual void settle(std::span<const settlement> adjustments) noexcept = 0;
};

} // namespace sluice::store
