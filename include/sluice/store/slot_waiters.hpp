// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/io/net.hpp"

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace sluice::store {

/**
 * The requests waiting for a free CONCURRENCY slot, per key, in arrival order: one registry per
 * process, shared by every worker (its lock is held for a few pointer operations, never across a
 * suspension).
 *
 * A waiter joins with a `ticket` and a wake-up function. When a slot of its key frees, the store
 * calls `notify(key)`, which wakes the oldest waiter not woken yet (the wake-up is posted to the
 * waiter's executor: it never runs on the notifier's thread). The woken waiter then tries again;
 * if another instance took the slot first, it `rearm`s and keeps its place. A slot that frees
 * while every waiter of the key is already woken (deciding with what it saw before that slot
 * freed) is not lost: the oldest of them is told to try once more when it rearms. A request that
 * arrives while others wait joins the line instead of trying (`waiting`), so a slot goes to the
 * oldest waiter of this instance. A ticket leaves the line when destroyed.
 */
class slot_waiters {
    struct node;
    struct line;

public:
    class ticket {
    public:
        ticket() = default;
        ticket(ticket&&) noexcept = default;
        ticket& operator=(ticket&&) noexcept;
        ticket(const ticket&) = delete;
        ticket& operator=(const ticket&) = delete;
        ~ticket();

        /// Back to "not woken", keeping its place: the next `notify` of its key may wake it.
        /// True instead when a slot freed since it was woken: it should try again at once (it
        /// stays woken).
        bool rearm();

    private:
        friend class slot_waiters;
        void leave() noexcept;
        slot_waiters* owner_ = nullptr;
        std::shared_ptr<node> node_;
    };

    slot_waiters();
    ~slot_waiters();
    slot_waiters(const slot_waiters&) = delete;
    slot_waiters& operator=(const slot_waiters&) = delete;

    /// Joins the line of `key`; `wake` runs on `ex` when woken, never after the ticket is gone
    /// (the ticket must be destroyed on `ex`'s thread).
    ticket join(std::string key, const io_executor& ex, std::function<void()> wake);

    /// Wakes the oldest waiter of `key` that is not woken yet; when all are, tells the oldest
    /// that has not been told yet to try again once it rearms. False when nobody was reached.
    bool notify(std::string_view key);

    /// Someone waits for `key`.
    bool waiting(std::string_view key) const;

    /// Waiters in every line, for tests and metrics.
    std::size_t size() const;

private:
    // Transparent, so that a lookup by string_view builds no string.
    struct key_hash {
        using is_transparent = void;

        std::size_t operator()(std::string_view key) const noexcept {
            return std::hash<std::string_view>{}(key);
        }
    };

    mutable std::mutex mutex_;
    std::unordered_map<std::string, std::unique_ptr<line>, key_hash, std::equal_to<>> lines_;
    std::size_t size_ = 0;
};

} // namespace sluice::store
