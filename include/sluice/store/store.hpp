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
};

using checks = boost::container::small_vector<check, 2>;

/// A slot a CONCURRENCY limit gave a request, to give back with `store::release` once.
struct slot {
    std::string key;
    /// Redis: the lease's member in the key's slot set; empty for a slot of the memory store.
    std::string lease_id;
    /// How long the slot stays taken unless renewed (Redis; the limit's `lease`).
    std::chrono::milliseconds lease{0};
};

using slots = boost::container::small_vector<slot, 1>;

/// One decision per check, in order; `ec` set when the store could not decide at all.
struct outcome {
    error_code ec;
    boost::container::small_vector<limiter::decision, 2> decisions;
    /// The slots taken for the admitted request's CONCURRENCY limits (dry-run ones included);
    /// the caller gives them back with `release` when the request is over.
    store::slots slots;
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
};

} // namespace sluice::store
