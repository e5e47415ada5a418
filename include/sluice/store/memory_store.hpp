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
 * Memory stays bounded: the sweep forgets every key whose state has fully reset (a drained
 * queue, a full token bucket, a past window), since forgetting it changes no future decision;
 * the owner (the application's control thread) runs a pass of it periodically, in slices
 * (`sweep_slice`) so that no lock is held and no handler runs for long. (A state equals a fresh
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

    /// What one `sweep_slice` did.
    struct sweep_step {
        /// Keys forgotten (and freed).
        std::size_t forgotten = 0;
        /// Buckets of the shards' tables looked at.
        std::size_t buckets = 0;
        /// The slice ended a pass over every shard: the next begins a new one.
        bool pass_done = false;
    };

    /// Buckets one `sweep_slice` looks at by default: about 0.1 ms of a shard's lock at 2,000,000
    /// keys (see sweep_slice).
    static constexpr std::size_t sweep_slice_buckets = 1024;

    /**
     * A slice of the periodic sweep: goes on with the pass under way (or begins one), forgetting
     * keys whose state has fully reset in at most `max_buckets` buckets, then stops, so that its
     * caller's event loop runs between slices. A shard whose idle floor (no key's state resets
     * before it) is still ahead of the clock is passed by without looking at its table. Under a
     * shard's lock the forgotten keys are only taken out of its table; they are freed after it
     * is let go. A shard whose walk ends with at most `sweep_slice_buckets` keys left has its
     * buckets shrunk (key_table::shrink: it hashes every key left again under the lock). Each slice
     * reads the clock, so a key whose state had reset when a pass began is forgotten by its end.
     * From then on, a shard that forgot a key never reads the clock as going back (see above).
     * One caller at a time (the application's control thread).
     */
    sweep_step sweep_slice(std::size_t max_buckets = sweep_slice_buckets);

    /// A whole pass at once, from the first shard (the tests'): forgets keys whose state has
    /// fully reset. Returns how many were forgotten.
    std::size_t sweep();

    /// Keys currently held.
    std::size_t size() const;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

} // namespace sluice::store
