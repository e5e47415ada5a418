// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/io/address_cache.hpp"
#include "sluice/io/connect_in_turn.hpp"
#include "sluice/io/net.hpp"
#include "sluice/io/timed_stream.hpp"

#include <boost/beast/core/flat_buffer.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace sluice::upstream {

struct connection;
using connection_ptr = std::unique_ptr<connection>;

namespace detail {

/**
 * The places of one pool's connections (`upstream.max-connections`): how many are open, in use
 * or idle, and the requests waiting for one. Shared by the pool and each connection it made, so
 * that a connection gives its place back when it is destroyed, whoever owns it then and whether
 * or not the pool is still there.
 */
struct connection_slots {
    /// Someone waiting in `pool::connect` for a place. Lives in the waiting coroutine's frame.
    struct waiter {
        steady_timer* timer = nullptr;
        /// The upstream it waits to reach (its caller's settings, which outlive the wait): a
        /// connection to another (a reload changed it) is never handed to it.
        const config::upstream_settings* settings = nullptr;
        /// Still in `waiters`; whoever takes it out clears this.
        bool queued = true;
        /// A place was handed over (counted in `open` already): connect a new connection.
        bool granted = false;
        /// Or a connection was (see `pool::release`).
        connection_ptr handed;
    };

    std::size_t open = 0;
    /// The cap as the latest caller's settings say (a reload may change it).
    std::size_t max = 0;
    /// In arrival order; a waiter removes itself when it stops waiting.
    std::list<waiter*> waiters;

    /// A connection went: its place goes to the first waiter, if the cap still allows it.
    void give_back() noexcept;
    /// Places the cap has room for (a reload raised it) go to the waiters, first come first.
    void grant_room() noexcept;
};

/// A connection's place among `connection_slots::open`, given back on destruction.
class slot_lease {
public:
    slot_lease() = default;

    explicit slot_lease(std::shared_ptr<connection_slots> slots) noexcept
        : slots_(std::move(slots)) {}

    slot_lease(slot_lease&&) noexcept = default;

    slot_lease& operator=(slot_lease&& other) noexcept {
        if (this != &other) {
            reset();
            slots_ = std::move(other.slots_);
        }
        return *this;
    }

    ~slot_lease() { reset(); }

    void reset() noexcept {
        if (slots_) {
            slots_->give_back();
            slots_.reset();
        }
    }

private:
    std::shared_ptr<connection_slots> slots_;
};

} // namespace detail

/// One connection to the upstream and the bytes read from it past the last message.
struct connection {
    explicit connection(const executor& ex)
        : stream(ex) {}

    /// Its place in the pool's cap; declared first so that it is given back after the socket
    /// closed.
    detail::slot_lease lease;
    timed_stream stream;
    beast::flat_buffer buffer;
    /// It came from the idle list: it has carried a request before and may have gone stale.
    bool reused = false;
    /// When it went idle, by coarse_clock::now(): an age is then within two clock ticks of the
    /// real one, either way, which ages of a second and more can afford.
    std::chrono::steady_clock::time_point idle_since{};
};

/**
 * The keep-alive connections of one worker to the upstream (`upstream.url`). Not thread-safe:
 * one pool per worker, used only on that worker's io_context, so no lock is ever taken.
 *
 * Idle connections are reused most-recent first, and are dropped when idle longer than
 * `upstream.idle_timeout` or when the upstream has closed them (checked, without blocking, as
 * they are taken, unless the caller can retry: see `acquire`). Expired ones are evicted lazily
 * on acquire and release: at most `max_idle` sockets ever wait, so a timer per pool would buy
 * little.
 *
 * When a reload changes the upstream's host or port, the idle connections to the old one are
 * closed at the next acquire.
 *
 * At most `upstream.max_connections` connections are open at once, in use or idle (a slow
 * client must not be able to pin an unbounded number of them): beyond it, `connect` waits for
 * one to be released or closed, first come first served, for at most `upstream.timeout`.
 */
class pool {
public:
    /// `lookup` resolves the upstream's host name when it is not an address (tests inject one);
    /// `lookup_failures`, when given, counts its failures (see `address_cache`).
    explicit pool(executor ex,
                  lookup_function lookup = system_lookup,
                  std::atomic<std::uint64_t>* lookup_failures = nullptr);
    ~pool();

    pool(const pool&) = delete;
    pool& operator=(const pool&) = delete;

    /**
     * A live idle connection (`reused` set), or else a new one as `connect` makes it. Completes
     * on the pool's executor; immediately when an idle connection is at hand.
     *
     * `can_retry`: the caller resends the request on a new connection when a reused one turns
     * out closed before answering. Then a connection idle for less than `recheck_after`, on
     * which the event loop has seen nothing come since its response was read
     * (`timed_stream::event_since_emptied`), is handed out unchecked: the upstream rarely closes
     * one that soon, and the check is a syscall on every request. Any other idle connection is
     * checked (one recv with MSG_PEEK): one the upstream closed, or sent bytes on unasked (a
     * stray response, which would be taken for the next request's), is closed.
     */
    awaitable<std::tuple<error_code, connection_ptr>>
    acquire(const config::upstream_settings& settings, bool can_retry = false);

    /// The idle-connection half of `acquire`, without suspending: null when none is at hand.
    connection_ptr try_take(const config::upstream_settings& settings, bool can_retry = false);

    /// How long a connection may sit idle and still be handed out unchecked (`can_retry`).
    static constexpr std::chrono::milliseconds recheck_after{1'000};

    /**
     * A new connection: connects within `connect_timeout` (beast::error::timeout otherwise) and
     * sets TCP_NODELAY. A host name is connected to at the addresses its last lookup found
     * (`address_cache`: refreshed in the background every `resolve_interval`); before its first
     * lookup has answered, it waits for it within the same `connect_timeout`
     * (sluice::errc::upstream_unresolved, or the lookup's error, after that). When
     * `max_connections` are open, closes an idle one to make room, or else waits for one in use
     * to be released (which hands it over: `reused` set) or closed, for at most `timeout`
     * (sluice::errc::upstream_exhausted after that).
     */
    awaitable<std::tuple<error_code, connection_ptr>>
    connect(const config::upstream_settings& settings);

    /// Returns a connection that finished a response cleanly and may carry another request.
    void release(connection_ptr conn, const config::upstream_settings& settings);

    /// Closes every idle connection (on drain).
    void close_idle() noexcept;

    std::size_t idle_count() const noexcept { return idle_.size(); }

    /// Connections open, in use or idle.
    std::size_t open_count() const noexcept { return slots_->open; }

    /// Callers of `connect` waiting for a place.
    std::size_t waiting_count() const noexcept { return slots_->waiters.size(); }

    /// The addresses of the upstream's host name (tests look at its lookups).
    const address_cache& addresses() const noexcept { return addresses_; }

private:
    /// Where a host name (not an address) may be connected to, with `settings.port`; waits
    /// until `deadline` for the first lookup's answer when there is none yet.
    awaitable<std::tuple<error_code, std::vector<tcp::endpoint>>>
    endpoints_of(const config::upstream_settings& settings,
                 std::chrono::steady_clock::time_point deadline);

    void retarget(const config::upstream_settings& settings);
    void evict_expired(const config::upstream_settings& settings,
                       std::chrono::steady_clock::time_point now) noexcept;

    executor ex_;
    std::string host_;
    std::uint16_t port_ = 0;
    /// Oldest at the front, most recently released at the back.
    std::deque<connection_ptr> idle_;
    std::shared_ptr<detail::connection_slots> slots_;
    address_cache addresses_;
    /// The host's addresses that failed a connect lately: tried after the others.
    recent_failures connect_failures_;
};

} // namespace sluice::upstream
