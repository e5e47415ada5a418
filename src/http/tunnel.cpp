// SPDX-License-Identifier: Apache-2.0
// The tunnel: two pumps, one per direction, each a loop of read-some then write-all through its
// own fixed buffer, and an idle watch beside them. A pump never reads again before its last
// block is written, so what the tunnel holds is its two buffers, whatever the peers do.
//
// The idle watch is lazy, as timed_stream's watchdog: the pumps only store time points (when a
// byte last moved, when each pending write began), and one timer wakes at the earliest moment
// the tunnel could be idle, checks, and sleeps again until the next such moment. No timer is
// re-armed per read or write.
#include "http/tunnel.hpp"

#include "sluice/io/coarse_clock.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <optional>

namespace sluice::http::detail {
namespace {

using clock_type = std::chrono::steady_clock;

/// What the pumps and the watch share; lives in `run_tunnel`'s frame.
struct tunnel_state {
    tunnel_state(tcp_socket& c, tcp_socket& u, std::chrono::milliseconds idle)
        : client(c)
        , upstream(u)
        , idle_timeout(idle) {}

    tcp_socket& client;
    tcp_socket& upstream;
    std::chrono::milliseconds idle_timeout;
    /// When a byte was last read or written, either way. This and `writing_since` are stamped
    /// with coarse_clock::latest_now(), at or after the real time: a stamp per chunk costs 5 ns
    /// instead of 22, and the tunnel still never counts as idle early.
    clock_type::time_point last_moved = coarse_clock::latest_now();
    /// When each direction's pending write began (to the upstream, to the client); max: none.
    clock_type::time_point writing_since[2] = {clock_type::time_point::max(),
                                               clock_type::time_point::max()};
    /// Whether each direction's source closed its sending side (end of stream read), by
    /// `direction::index`.
    bool source_closed[2] = {false, false};
    /// Why the tunnel stops; set once, by the first reason. The pumps check it after every
    /// operation, because a cancel misses an operation whose completion is already queued.
    std::optional<tunnel_end> end;

    /// Ends both directions: marks the reason and cancels every operation on both sockets.
    void stop(tunnel_end why) noexcept {
        if (!end) {
            end = why;
        }
        error_code ignored;
        client.cancel(ignored);
        upstream.cancel(ignored);
    }

    /// The first moment the tunnel can count as idle, as the time points stand.
    clock_type::time_point idle_at() const noexcept {
        const auto since = std::min({last_moved, writing_since[0], writing_since[1]});
        return since + idle_timeout;
    }
};

/// One direction of the tunnel.
struct direction {
    tunnel_side& from;
    tcp_socket& to;
    /// Its index in `tunnel_state::writing_since`.
    int index;
    /// What a failure on either end means.
    tunnel_end from_failed;
    tunnel_end to_failed;
};

// Writes `bytes` whole to the direction's peer; false (with the tunnel stopped) if that failed.
awaitable<bool> pass_on(tunnel_state& t, const direction& d, net::const_buffer bytes) {
    t.writing_since[d.index] = coarse_clock::latest_now();
    auto [ec, n] = co_await net::async_write(d.to, bytes);
    t.writing_since[d.index] = clock_type::time_point::max();
    t.last_moved = coarse_clock::latest_now();
    if (t.end) {
        co_return false;
    }
    if (ec) {
        // A peer that closed its sending side first and then the whole connection (a
        // WebSocket endpoint after its close frame) did not fail: the other side wrote after
        // the close, and what it wrote had nowhere to go.
        t.stop(t.source_closed[1 - d.index] ? tunnel_end::closed : d.to_failed);
        co_return false;
    }
    co_return true;
}

// Relays one direction until its source closes (then the close is passed on) or the tunnel
// stops.
awaitable<void> pump(tunnel_state& t, direction d) {
    // What was read before the tunnel began goes first, before anything newer.
    if (d.from.buffered.size() != 0) {
        const bool passed = co_await pass_on(t, d, d.from.buffered.data());
        if (!passed) {
            co_return;
        }
        d.from.buffered.consume(d.from.buffered.size());
    }
    for (;;) {
        auto [ec, n] = co_await d.from.socket.async_read_some(
            net::buffer(d.from.buffer.data(), d.from.buffer.size()));
        if (t.end) {
            co_return;
        }
        if (ec == net::error::eof) {
            // Half-close: the other side learns that no more comes, and may still answer.
            t.source_closed[d.index] = true;
            error_code ignored;
            d.to.shutdown(net::socket_base::shutdown_send, ignored);
            co_return;
        }
        if (ec) {
            t.stop(d.from_failed);
            co_return;
        }
        t.last_moved = coarse_clock::latest_now();
        const bool passed = co_await pass_on(t, d, net::buffer(d.from.buffer.data(), n));
        if (!passed) {
            co_return;
        }
    }
}

awaitable<void> both_pumps(tunnel_state& t, direction up, direction down) {
    using namespace net::experimental::awaitable_operators;
    co_await (pump(t, up) && pump(t, down));
}

// When a drain ends the tunnel: `tunnel_drain_margin` before its deadline; max without one.
clock_type::time_point drain_stop(const tunnel_drain& drain) noexcept {
    if (drain.deadline == nullptr || *drain.deadline == clock_type::time_point::max()) {
        return clock_type::time_point::max();
    }
    return *drain.deadline - tunnel_drain_margin;
}

// Keeps the watch's timer in the connection's entry, for a drain to wake, while it lives.
class drain_mark {
public:
    drain_mark(const tunnel_drain& drain, steady_timer& timer) noexcept
        : entry_(drain.entry) {
        if (entry_ != nullptr) {
            entry_->wait_timer = &timer;
        }
    }

    drain_mark(const drain_mark&) = delete;
    drain_mark& operator=(const drain_mark&) = delete;

    ~drain_mark() {
        if (entry_ != nullptr) {
            entry_->wait_timer = nullptr;
        }
    }

private:
    session_entry* entry_;
};

// Sleeps until the tunnel could be idle, or a drain's stop, and stops it if it is there.
// Returns when it stopped the tunnel, or when the coroutine is cancelled (both pumps are done).
// A drain that begins cancels the timer (`worker_context::begin_drain`): the watch then looks
// again, at the drain's stop.
awaitable<void> watch_idle(tunnel_state& t, steady_timer& timer, tunnel_drain drain) {
    const drain_mark mark(drain, timer);
    for (;;) {
        timer.expires_at(std::min(t.idle_at(), drain_stop(drain)));
        auto [ec] = co_await timer.async_wait();
        const auto cancelled = (co_await net::this_coro::cancellation_state).cancelled();
        if (t.end || cancelled != net::cancellation_type::none) {
            co_return;
        }
        const auto now = clock_type::now();
        if (now >= drain_stop(drain)) {
            t.stop(tunnel_end::drained);
            co_return;
        }
        if (!ec && now >= t.idle_at()) {
            t.stop(tunnel_end::idle);
            co_return;
        }
    }
}

} // namespace

awaitable<tunnel_end> run_tunnel(tunnel_side client,
                                 tunnel_side upstream,
                                 std::chrono::milliseconds idle_timeout,
                                 tunnel_drain drain) {
    using namespace net::experimental::awaitable_operators;
    tunnel_state t(client.socket, upstream.socket, idle_timeout);
    const direction up{
        client, upstream.socket, 0, tunnel_end::client_failed, tunnel_end::upstream_failed};
    const direction down{
        upstream, client.socket, 1, tunnel_end::upstream_failed, tunnel_end::client_failed};
    steady_timer timer(client.socket.get_executor());
    // Whichever finishes first cancels the other: the watch when both directions are done, the
    // pumps (already cancelled by `stop`) when the watch finds the tunnel idle.
    co_await (both_pumps(t, up, down) || watch_idle(t, timer, drain));
    co_return t.end.value_or(tunnel_end::closed);
}

} // namespace sluice::http::detail
