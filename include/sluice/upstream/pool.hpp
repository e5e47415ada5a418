// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/core/net.hpp"
#include "sluice/core/timed_stream.hpp"

#include <boost/beast/core/flat_buffer.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <tuple>

namespace sluice::upstream {

/// One connection to the upstream and the bytes read from it past the last message.
struct connection {
    explicit connection(const executor& ex)
        : stream(ex) {}

    timed_stream stream;
    beast::flat_buffer buffer;
    /// It came from the idle list: it has carried a request before and may have gone stale.
    bool reused = false;
    std::chrono::steady_clock::time_point idle_since{};
};

using connection_ptr = std::unique_ptr<connection>;

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
 */
class pool {
public:
    explicit pool(executor ex);
    ~pool();

    pool(const pool&) = delete;
    pool& operator=(const pool&) = delete;

    /**
     * A live idle connection (`reused` set), or else a new one as `connect` makes it. Completes
     * on the pool's executor; immediately when an idle connection is at hand.
     *
     * `can_retry`: the caller resends the request on a new connection when a reused one turns
     * out closed before answering. Then a connection idle for less than `recheck_after` is
     * handed out unchecked: the upstream rarely closes one that soon, and the check is a
     * syscall on every request. Without it, every idle connection is checked.
     */
    awaitable<std::tuple<error_code, connection_ptr>>
    acquire(const config::upstream_settings& settings, bool can_retry = false);

    /// The idle-connection half of `acquire`, without suspending: null when none is at hand.
    connection_ptr try_take(const config::upstream_settings& settings, bool can_retry = false);

    /// How long a connection may sit idle and still be handed out unchecked (`can_retry`).
    static constexpr std::chrono::milliseconds recheck_after{1'000};

    /**
     * A new connection: resolves the host (unless it is an address), connects within
     * `connect_timeout` (beast::error::timeout otherwise) and sets TCP_NODELAY.
     */
    awaitable<std::tuple<error_code, connection_ptr>>
    connect(const config::upstream_settings& settings);

    /// Returns a connection that finished a response cleanly and may carry another request.
    void release(connection_ptr conn, const config::upstream_settings& settings);

    /// Closes every idle connection (on drain).
    void close_idle() noexcept;

    std::size_t idle_count() const noexcept { return idle_.size(); }

private:
    void retarget(const config::upstream_settings& settings);
    void evict_expired(const config::upstream_settings& settings,
                       std::chrono::steady_clock::time_point now) noexcept;

    executor ex_;
    std::string host_;
    std::uint16_t port_ = 0;
    /// Oldest at the front, most recently released at the back.
    std::deque<connection_ptr> idle_;
};

} // namespace sluice::upstream
