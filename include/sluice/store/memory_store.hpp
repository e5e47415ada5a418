// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/core/clock.hpp"
#include "sluice/metrics/metrics.hpp"
#include "sluice/store/store.hpp"

#include <cstddef>
#include <memory>

namespace sluice::store {

class slot_waiters;

/// The memory store's bound on memory (`rate-limit.memory`).
struct memory_store_limits {
    /// Keys held at most; 0: no cap. Split evenly across the shards.
    std::size_t max_keys = 0;
    /// Counts keys evicted while their state still mattered (may be null).
    metrics::counter* evictions = nullptr;
};

/**
 * The embedded default store: limiter state in process memory, shared by every worker thread.
 *
 * The table is split into shards, each a mutex and a hash map, so that workers rarely contend;
 * a decision holds its shard's lock for O(1) work and never across a suspension. A request with
 * several checks locks their shards in index order (no deadlock), decides all, and commits only
 * when every enforced limit admits.
 *
 * Memory stays bounded: `sweep()` forgets every key whose state has fully reset (a drained
 * queue, a full token bucket, a past window), since forgetting it changes no future decision;
 * the owner (the application's control thread) calls it periodically. (A state equals a fresh
 * one only from the reading it reset at on; so that a clock stepping back behind a sweep cannot
 * find a forgotten key fresh where its state still counted, a shard that has forgotten a key
 * reads its clock as never going back: as the newest reading it has used. The steady clock the
 * application gives the store never goes back, so there this changes nothing.) And a shard never
 * holds more than its part of `max_keys`: a new key in a full shard first sweeps that shard (the
 * only sweep a decision ever does, at most once a second while it frees little), then evicts the
 * least recently used keys, counting them in `evictions` and warning (throttled).
 * Each shard keeps its recency list through its entries: a hit costs a few pointer writes.
 */
class memory_store final : public store {
public:
    /// `clock` must outlive the store.
    explicit memory_store(const sluice::clock& clock,
                          std::size_t shard_count = 64,
                          memory_store_limits limits = {});
    ~memory_store() override;

    awaitable<outcome> acquire(checks request_checks) override;

    /// The same decision, synchronously; never suspends, never fails.
    outcome acquire_now(const checks& request_checks);

    /// `acquire_now`: this store always decides without suspending.
    std::optional<outcome> try_acquire_now(const checks& request_checks) override;

    /// Gives slots back; wakes a waiter of each key (see `set_waiters`).
    void release(std::span<const slot> taken) noexcept override;

    /// Settles each reservation under its shard's lock, with the algorithms' own arithmetic
    /// (limiter::settle), on the store's clock floored to whole ms as `acquire` reads it.
    void settle(std::span<const settlement> adjustments) noexcept override;

    /// Where the requests waiting for a slot of this store are (may be null: nobody waits).
    void set_waiters(slot_waiters* waiters) noexcept;

    /// Forgets keys whose state has fully reset. Returns how many were forgotten. From then on,
    /// a shard that forgot a key never reads the clock as going back (see above).
    std::size_t sweep();

    /// Keys currently held.
    std::size_t size() const;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

} // namespace sluice::store
