// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/core/clock.hpp"
#include "sluice/store/store.hpp"

#include <cstddef>
#include <memory>

namespace sluice::store {

/**
 * The embedded default store: limiter state in process memory, shared by every worker thread.
 *
 * The table is split into shards, each a mutex and a hash map, so that workers rarely contend;
 * a decision holds its shard's lock for O(1) work and never across a suspension. A request with
 * several checks locks their shards in index order (no deadlock), decides all, and commits only
 * when every enforced limit admits.
 *
 * Memory stays bounded: `sweep()` forgets every key whose state has fully reset (a drained
 * queue, a full token bucket, a past window), since forgetting it changes no future decision.
 * The owner (the application's control thread) calls it periodically; `acquire_now` never
 * sweeps, so a decision's cost does not depend on the table's size.
 */
class memory_store final : public store {
public:
    /// `clock` must outlive the store.
    explicit memory_store(const sluice::clock& clock, std::size_t shard_count = 64);
    ~memory_store() override;

    awaitable<outcome> acquire(checks request_checks) override;

    /// The same decision, synchronously; never suspends, never fails.
    outcome acquire_now(const checks& request_checks);

    /// `acquire_now`: this store always decides without suspending.
    std::optional<outcome> try_acquire_now(const checks& request_checks) override;

    /// Forgets keys whose state has fully reset. Returns how many were forgotten.
    std::size_t sweep();

    /// Keys currently held.
    std::size_t size() const;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

} // namespace sluice::store
