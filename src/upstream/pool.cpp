// SPDX-License-Identifier: Apache-2.0
#include "sluice/upstream/pool.hpp"

#include "sluice/core/errc.hpp"
#include "sluice/core/log_throttle.hpp"
#include "sluice/io/coarse_clock.hpp"

#include <boost/asio/ip/address.hpp>

#include <cerrno>
#include <string_view>
#include <sys/socket.h>
#include <utility>

namespace sluice::upstream {
namespace {

// Whether an idle socket is still usable: the upstream has neither closed it (recv would return
// 0) nor sent anything unasked (a stray response would be taken for the next request's). One
// non-blocking syscall, far cheaper than a failed request and a retry.
bool still_open(connection& conn) noexcept {
    if (conn.buffer.size() != 0) {
        return false;
    }
    char byte = 0;
    const auto n = ::recv(conn.stream.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

void close_quietly(connection& conn) noexcept {
    error_code ignored;
    conn.stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    conn.stream.socket().close(ignored);
}

/// A place in the queue of `connection_slots`, left when the waiting coroutine ends however it
/// ends (its frame may be destroyed mid-wait, at shutdown).
class queued {
public:
    queued(detail::connection_slots& slots, detail::connection_slots::waiter& w)
        : slots_(slots)
        , w_(w)
        , at_(slots.waiters.insert(slots.waiters.end(), &w)) {}

    queued(const queued&) = delete;
    queued& operator=(const queued&) = delete;

    ~queued() {
        if (w_.queued) {
            slots_.waiters.erase(at_);
        } else if (w_.granted) {
            slots_.give_back(); // granted but never used
        }
    }

    /// The granted place now belongs to the caller.
    void take_grant() noexcept { w_.granted = false; }

private:
    detail::connection_slots& slots_;
    detail::connection_slots::waiter& w_;
    std::list<detail::connection_slots::waiter*>::iterator at_;
};

} // namespace

namespace detail {

void connection_slots::give_back() noexcept {
    if (!waiters.empty() && open <= max) {
        auto* w = waiters.front();
        waiters.pop_front();
        w->queued = false;
        w->granted = true; // `open` stays: the place changes hands
        w->timer->cancel();
        return;
    }
    --open;
}

void connection_slots::grant_room() noexcept {
    while (!waiters.empty() && open < max) {
        auto* w = waiters.front();
        waiters.pop_front();
        w->queued = false;
        w->granted = true;
        ++open;
        w->timer->cancel();
    }
}

} // namespace detail

pool::pool(executor ex, lookup_function lookup, std::atomic<std::uint64_t>* lookup_failures)
    : ex_(std::move(ex))
    , slots_(std::make_shared<detail::connection_slots>())
    , addresses_(ex_, std::move(lookup), "upstream", lookup_failures) {}

pool::~pool() {
    close_idle();
}

void pool::retarget(const config::upstream_settings& settings) {
    if (settings.host == host_ && settings.port == port_) {
        return;
    }
    close_idle();
    host_ = settings.host;
    port_ = settings.port;
}

void pool::evict_expired(const config::upstream_settings& settings,
                         std::chrono::steady_clock::time_point now) noexcept {
    while (!idle_.empty() && now - idle_.front()->idle_since >= settings.idle_timeout) {
        close_quietly(*idle_.front());
        idle_.pop_front();
    }
}

connection_ptr pool::try_take(const config::upstream_settings& settings, bool can_retry) {
    retarget(settings);
    const auto now = coarse_clock::now();
    evict_expired(settings, now);
    while (!idle_.empty()) {
        auto conn = std::move(idle_.back());
        idle_.pop_back();
        const bool fresh = can_retry && now - conn->idle_since < recheck_after;
        // Unlooked-at only while the event loop has seen nothing come on it since its response
        // was read: bytes the upstream sent unasked would be taken for the next request's
        // response, another client's (and a close seen is one failed request spared).
        if ((fresh && conn->buffer.size() == 0 && !conn->stream.event_since_emptied()) ||
            still_open(*conn)) {
            conn->reused = true;
            return conn;
        }
        close_quietly(*conn);
    }
    return nullptr;
}

awaitable<std::tuple<error_code, connection_ptr>>
pool::acquire(const config::upstream_settings& settings, bool can_retry) {
    if (auto conn = try_take(settings, can_retry)) {
        co_return std::tuple{error_code{}, std::move(conn)};
    }
    auto result = co_await connect(settings);
    co_return result;
}

awaitable<std::tuple<error_code, connection_ptr>>
pool::connect(const config::upstream_settings& settings) {
    auto& slots = *slots_;
    slots.max = settings.max_connections;
    // A reload that raised the cap: those waiting go first, rather than this caller taking the
    // room ahead of them while they wait for a release.
    slots.grant_room();
    if (slots.open >= slots.max && !idle_.empty()) {
        // An idle connection makes room for the new one (the retry of a stale one, say).
        close_quietly(*idle_.front());
        idle_.pop_front();
    }
    auto conn = std::make_unique<connection>(ex_);
    if (slots.open < slots.max) {
        ++slots.open;
    } else {
        steady_timer timer(ex_, settings.timeout);
        detail::connection_slots::waiter w;
        w.timer = &timer;
        w.settings = &settings;
        queued in_line(slots, w);
        auto [ec] = co_await timer.async_wait(); // cancelled when a place or a connection came
        (void)ec;
        if (w.handed) {
            co_return std::tuple{error_code{}, std::move(w.handed)};
        }
        if (!w.granted) {
            co_return std::tuple{error_code(errc::upstream_exhausted), connection_ptr{}};
        }
        in_line.take_grant();
    }
    conn->lease = detail::slot_lease(slots_);
    // One deadline for the wait for an address, if any, and the connect.
    const auto deadline = coarse_clock::latest_now() + settings.connect_timeout;
    conn->stream.expires_at(deadline);

    // An address needs no lookup (the common case: 127.0.0.1, a pod IP).
    error_code ec;
    const auto address = net::ip::make_address(settings.host, ec);
    if (!ec) {
        auto [connect_ec] =
            co_await conn->stream.async_connect(tcp::endpoint(address, settings.port));
        ec = connect_ec;
    } else {
        auto [lookup_ec, endpoints] = co_await endpoints_of(settings, deadline);
        ec = lookup_ec;
        if (!ec) {
            ec = co_await connect_in_turn(conn->stream, endpoints, deadline, connect_failures_);
        }
    }
    if (ec) {
        co_return std::tuple{ec, connection_ptr{}};
    }
    conn->stream.expires_never();
    conn->stream.socket().set_option(tcp::no_delay(true), ec);
    enable_drained_reads(conn->stream.socket(), ec);
    co_return std::tuple{error_code{}, std::move(conn)};
}

awaitable<std::tuple<error_code, std::vector<tcp::endpoint>>>
pool::endpoints_of(const config::upstream_settings& settings,
                   std::chrono::steady_clock::time_point deadline) {
    const auto interval = settings.resolve_interval;
    if (addresses_.addresses(settings.host, interval, coarse_clock::now()).empty()) {
        // First use of the host (or a reload changed it): its lookup's answer, within the
        // connect's own deadline. A DNS that does not answer costs each connect that, no more.
        co_await addresses_.wait_for_lookup(settings.host, deadline);
    }
    const auto& found = addresses_.addresses(settings.host, interval, coarse_clock::now());
    std::vector<tcp::endpoint> endpoints;
    for (const auto& address : found) {
        endpoints.emplace_back(address, settings.port);
    }
    error_code ec;
    if (endpoints.empty()) {
        ec = addresses_.last_error(settings.host);
        if (!ec) {
            static log_throttle throttle{std::chrono::seconds(10)};
            log_throttled(throttle,
                          spdlog::level::warn,
                          "upstream host {}: no address within connect-timeout ({} ms); its "
                          "lookup goes on",
                          settings.host,
                          settings.connect_timeout.count());
            ec = errc::upstream_unresolved;
        }
    }
    co_return std::tuple{ec, std::move(endpoints)};
}

void pool::release(connection_ptr conn, const config::upstream_settings& settings) {
    const auto now = coarse_clock::now();
    evict_expired(settings, now);
    if (settings.host != host_ || settings.port != port_ || conn->buffer.size() != 0) {
        close_quietly(*conn);
        return;
    }
    auto& slots = *slots_;
    slots.max = settings.max_connections;
    slots.grant_room(); // a reload raised the cap: the waiters get the room first
    if (slots.open > slots.max) {
        // More open than a reload now allows: this one closes (its place then goes back), or,
        // kept idle and reused, the count would never come down to the cap, and a waiter,
        // served only within it, would wait out upstream.timeout while connections sat idle.
        close_quietly(*conn);
        return;
    }
    if (!slots.waiters.empty()) {
        // Someone waits for a place: hand this connection over rather than idle it, once looked
        // at as try_take looks at one (a waiter may not repeat its request): bytes the upstream
        // sent after the response would be taken for the waiter's, another client's. One that
        // fails closes, and its place goes to the same waiter, for a new connection.
        auto* w = slots.waiters.front();
        // One that waits to reach another upstream (the old configuration's requests, or the
        // new's, during a reload) gets the place instead, for a connection of its own.
        const bool same_upstream = w->settings == nullptr || (w->settings->host == settings.host &&
                                                              w->settings->port == settings.port);
        if (!same_upstream || !still_open(*conn)) {
            close_quietly(*conn);
            return;
        }
        slots.waiters.pop_front();
        w->queued = false;
        conn->reused = true;
        conn->stream.expires_never();
        w->handed = std::move(conn);
        w->timer->cancel();
        return;
    }
    if (settings.max_idle == 0) {
        close_quietly(*conn);
        return;
    }
    while (idle_.size() >= settings.max_idle) { // a reload may have lowered it by many
        close_quietly(*idle_.front());
        idle_.pop_front();
    }
    conn->stream.expires_never();
    conn->idle_since = now;
    idle_.push_back(std::move(conn));
}

void pool::close_idle() noexcept {
    for (auto& conn : idle_) {
        close_quietly(*conn);
    }
    idle_.clear();
}

} // namespace sluice::upstream
