// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/core/keyed_hash.hpp"
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
 * A waiter joins with a `ticket` and a wake-up function, and is idle or busy. When a slot of its
 * key frees, the store calls `notify(key)`, which wakes the oldest idle waiter (it becomes busy;
 * the wake-up is posted to the waiter's executor: it never runs on the notifier's thread). A
 * waiter that decides again on its own (its periodic recheck) says so first (`begin_decision`),
 * so that no wake-up goes to a waiter that is deciding already and may be admitted by that
 * decision, while another waits on. Only the oldest waiter of a line rechecks, and not while a
 * slot announced to another is undecided, so that no recheck takes a slot out of turn; one
 * admitted by its recheck wakes the next (`admitted`). A slot that frees while every waiter
 * is busy is kept as a retry for the line: the next busy waiter that finds no slot (`rearm`) takes
 * it and tries once more at once, so no freed slot is lost to a decision made just before it freed;
 * a waiter that joins meanwhile is woken for it at once. A refused waiter `rearm`s and keeps its
 * place; one that ends its wait without the slot (another limit refused it, the store failed) gives
 * up, passing its wake-up on. A request that arrives while others wait joins the line instead of
 * trying (`in_line`), so a slot goes to the oldest waiter of this instance. A ticket leaves the
 * line when destroyed.
 */
class slot_waiters {
    struct node;
    struct line;

public:
    class ticket {
    public:
        ticket() = default;
        ticket(ticket&& other) noexcept;
        ticket& operator=(ticket&&) noexcept;
        ticket(const ticket&) = delete;
        ticket& operator=(const ticket&) = delete;
        ~ticket();

        /// The waiter is about to decide again: no wake-up goes to it meanwhile. False, for a
        /// waiter that was not woken (its own recheck), unless it is the oldest of its line and
        /// no slot announced to another waiter is undecided: a slot a recheck finds is the
        /// oldest waiter's, and a younger one's recheck, which might take it out of turn, is
        /// skipped.
        [[nodiscard]] bool begin_decision();

        /// Leaves the line with the slot. One found by the waiter's own recheck (nothing was
        /// announced: a lapsed lease, a lost announcement) wakes the next waiter, for the
        /// others that may be free, and so does each waiter admitted for such a wake-up, until
        /// one finds none (`rearm`).
        void admitted();

        /// Leaves the line without taking a slot (its client left, its max-delay passed, another
        /// limit refused it). A wake-up it was given goes on to the next waiter: the slot it
        /// announced is free. One that only decided on its own (a recheck) passes nothing on.
        void give_up();

        /// It found no slot: back to idle, keeping its place, so that the next `notify` of its
        /// key may wake it. True instead when a slot freed while every waiter was busy: it
        /// should try again at once (it stays busy).
        bool rearm();

    private:
        friend class slot_waiters;

        /// What a waiter that left had been given.
        struct left {
            bool woken = false;   // a slot announced to it (woken, or a retry taken)
            bool chained = false; // that wake-up was passed on after a recheck's admission
        };

        /// Leaves the line; what it had been given as it left.
        left leave() noexcept;
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

    /// Wakes the oldest idle waiter of `key`; when every one is busy, keeps a retry for the
    /// line (at most one per waiter). False when nobody waits, or every waiter has a retry.
    bool notify(std::string_view key);

    /// Waiters in the line of `key`: someone waits for it, and how many (`max-waiting`).
    std::size_t in_line(std::string_view key) const;

    /// Waiters in every line, for tests and metrics.
    std::size_t size() const;

private:
    /// Runs `n`'s wake-up on its executor, unless its ticket has left by then.
    static void post_wake(const std::shared_ptr<node>& n);

    /// `notify`; `chained` marks the waiter woken as woken by a pass-on (see `admitted`).
    bool wake_oldest(std::string_view key, bool chained);

    mutable std::mutex mutex_;
    // Keyed by text a client chooses: a keyed hash (keyed_hash.hpp).
    std::unordered_map<std::string, std::unique_ptr<line>, keyed_string_hash, std::equal_to<>>
        lines_;
    std::size_t size_ = 0;
};

} // namespace sluice::store
