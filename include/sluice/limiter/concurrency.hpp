// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/limiter/decision.hpp"

#include <cstdint>

namespace sluice::limiter {

/// The slots of one key taken and not yet given back.
struct concurrency_state {
    std::int64_t in_flight = 0;
    /// Which count this is (the memory store's: a fresh count gets a new one; 0 until then), so
    /// that a slot taken in an earlier count of the key gives nothing back to this one: the key
    /// held another algorithm's state meanwhile (two reloads), or was dropped from a full store.
    std::uint64_t epoch = 0;

    friend bool operator==(const concurrency_state&, const concurrency_state&) = default;
};

/**
 * CONCURRENCY: at most `limit` requests of a key in flight at once. A request takes a slot when
 * admitted and gives it back (`concurrency_release`) when its response is over, so nothing here
 * depends on the clock: the decision reports the free slots as `remaining`, the limit as the
 * quota, no window and no reset (`in_flight`), and never a `retry_after` (when a slot frees
 * depends on the upstream, not on a rate). A refusal takes nothing.
 */
decision concurrency_acquire(concurrency_state& state, const config::limit& limit) noexcept;

/// Gives one slot back, taken in count `epoch`; never below zero (a slot already given back
/// stays given back), and none to another count.
void concurrency_release(concurrency_state& state, std::uint64_t epoch) noexcept;

} // namespace sluice::limiter
