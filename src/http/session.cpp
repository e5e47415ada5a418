// SPDX-License-Identifier: Apache-2.0
// A client connection's life: accepted (`start_session`), served request after request (`serve`;
// each request is request_handler.cpp's), parked while idle (`park`), closed.
#include "sluice/http/session.hpp"

#include "http/header_block_detail.hpp"
#include "http/local_reply.hpp"
#include "http/request_handler.hpp"
#include "http/session_state_detail.hpp"
#include "sluice/core/escaped_exception.hpp"
#include "sluice/core/log_throttle.hpp"
#include "sluice/http/connection_balancer.hpp"
#include "sluice/io/coarse_clock.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/beast/core/error.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <memory>

namespace sluice::http {
namespace {

using namespace detail;
using std::chrono::steady_clock;

/// How long an idle keep-alive connection keeps its coroutine before it is parked (`park`): a
/// connection whose next request comes within this (a busy one) is not parked and spawned again
/// for it. It keeps no buffer meanwhile: its request's memory is the worker's (`request_pool`),
/// so the grace costs only the suspended coroutine, which the parked connection then frees: with
/// 1 s, bench/memory's 15,000 idle connections (opened at some 4,000 a second) kept 1.3 KiB of
/// RSS each, the coroutines of the last second's leaving holes between live blocks; with 100 ms,
/// 0.8 KiB (see docs/benchmarks.md, Memory).
constexpr std::chrono::milliseconds idle_grace{100};

key::ip_address to_ip(const net::ip::address& address) {
    key::ip_address ip;
    if (address.is_v6() && address.to_v6().is_v4_mapped()) {
        return to_ip(net::ip::make_address_v4(net::ip::v4_mapped, address.to_v6()));
    }
    if (address.is_v4()) {
        const auto bytes = address.to_v4().to_bytes();
        std::copy(bytes.begin(), bytes.end(), ip.bytes.begin());
        ip.v4 = true;
    } else {
        const auto bytes = address.to_v6().to_bytes();
        std::copy(bytes.begin(), bytes.end(), ip.bytes.begin());
        ip.v4 = false;
    }
    return ip;
}

} // namespace

metrics::rule_counters& worker_context::rule_counters(std::string_view rule_name) {
    auto found = rule_counters_.find(rule_name);
    if (found == rule_counters_.end()) {
        auto& counters = metrics->rule(std::string(rule_name));
        found = rule_counters_.emplace(std::string(rule_name), &counters).first;
    }
    return *found->second;
}

void worker_context::begin_drain(steady_clock::time_point deadline) noexcept {
    draining = true;
    drain_deadline = deadline;
    std::size_t woken = 0;
    for (auto& s : sessions) {
        // An idle connection's wait, a wait that would outlast the drain: cancelled, each ends
        // at once (the waits in sluice tell a drain from a client that left: request_wait.hpp).
        const bool outlasts = outlasts_drain(s.waits_until);
        if (s.idle || outlasts) {
            error_code ignored;
            s.stream->socket().cancel(ignored);
        }
        if (outlasts) {
            if (s.wait_timer != nullptr) {
                s.wait_timer->cancel();
            }
            ++woken;
        } else if (s.wait_timer != nullptr && s.waits_until == steady_clock::time_point{}) {
            // A WebSocket tunnel's watch (no wait of a request): it looks again, and ends the
            // tunnel before the deadline (tunnel.hpp `tunnel_drain`).
            s.wait_timer->cancel();
        }
    }
    if (woken > 0) {
        // Once per worker and drain, whatever its clients do.
        spdlog::warn("draining: requests answered 503 because their wait outlasts the drain: {}",
                     woken);
    }
    session_ended();
}

void worker_context::session_ended() noexcept {
    if (draining && sessions.empty() && !drained_) {
        drained_ = true;
        if (on_drained) {
            on_drained();
        }
    }
}

namespace {

/// A client connection: what lasts from its accept to its close. On the heap, so that an idle
/// one can outlive the coroutine that served it (`park`).
struct connection {
    connection(tcp_socket socket, worker_context& worker, key::ip_address peer)
        : stream(std::move(socket))
        , entry(stream)
        , c{worker, stream, buffer, entry, peer, {}, {}} {}

    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    ~connection() {
        // A held request whose wait was destroyed unrun (a stop that did not wait for the
        // drain) ends as a suspended coroutine's would: its slots given back, its costs settled.
        if (c.held) {
            drop_held(c);
        }
    }

    timed_stream stream;
    beast::flat_buffer buffer;
    session_entry entry;
    connection_state c;
};

awaitable<void> serve(std::unique_ptr<connection> conn);

// An exception escaping a session is a bug, not control flow: logged loudly, but a peer that
// triggers it again and again must not flood the log.
log_throttle session_exception_throttle;
const log_escaped log_session_exception{"session", &session_exception_throttle};

// A connection counted by `accept_loop` on `worker` is gone.
void count_closed(worker_context& worker) noexcept {
    if (worker.balancer != nullptr) {
        worker.balancer->closed(worker.index);
    }
}

// Closes the connection for good and counts it gone.
void close_connection(connection& conn) {
    error_code ignored;
    conn.stream.socket().close(ignored);
    conn.entry.unlink();
    conn.c.w.metrics->connections_open.fetch_sub(1, std::memory_order_relaxed);
    count_closed(conn.c.w);
    conn.c.w.session_ended();
}

/// Resumes a parked connection when bytes come: a new coroutine serves it.
struct resume_parked {
    std::unique_ptr<connection> conn;

    void operator()(error_code ec) {
        conn->c.w.metrics->connections_parked.fetch_sub(1, std::memory_order_relaxed);
        // An error: the idle timeout, a drain (which cancels idle connections), or a failure.
        if (ec || conn->c.w.draining) {
            close_connection(*conn);
            return;
        }
        auto ex = conn->stream.get_executor();
        net::co_spawn(ex, serve(std::move(conn)), log_session_exception);
    }
};

// Parks an idle connection: its coroutine ends, and what stays is the connection itself and one
// wait for readability (its request's memory went back to the worker's pool with the request).
// bench/memory, 15,000 idle connections: 0.9 KiB of RSS each, where a suspended coroutine with
// its request state, read buffer and header scratch took 6.9 KiB.
void park(std::unique_ptr<connection> conn) {
    conn->c.w.metrics->connections_parked.fetch_add(1, std::memory_order_relaxed);
    auto& stream = conn->stream;
    stream.async_wait_readable(resume_parked{std::move(conn)});
}

/// Resumes a request held without its coroutine (`wait_held`) when its wait ends: a new
/// coroutine serves the connection on from the hold (`resume_request`).
struct resume_held {
    std::unique_ptr<connection> conn;

    void operator()(error_code ec) {
        // The deadline (beast::error::timeout: the hold is over), or the client sent something
        // or left: resume_request tells them apart. A drain lets the request finish.
        conn->c.held->woken_by = ec;
        auto ex = conn->stream.get_executor();
        net::co_spawn(ex, serve(std::move(conn)), log_session_exception);
    }
};

// Waits out the hold of a request held by shaping (`ending::held`) as a parked connection waits:
// its coroutine and its request's memory are gone, what stays is the connection, the held
// request's record (`connection_state::held`, its header's bytes in the connection's buffer)
// and one wait for readability, which the stream's deadline ends with the hold. bench/memory,
// 15,000 held requests: 1.2 KiB of RSS each, its connection included, where one held in its
// coroutine with its request's memory took 6.5 KiB.
void wait_held(std::unique_ptr<connection> conn) {
    auto& stream = conn->stream;
    stream.async_wait_readable(resume_held{std::move(conn)});
}

// Closes the connection when an exception leaves `serve` (a bug: log_session_exception says
// so), so that the connection gauge, the balancer's count and a drain's tally stay true whatever
// ends a session. A coroutine destroyed unrun at shutdown unwinds no exception: nothing counts.
struct close_on_exception {
    explicit close_on_exception(std::unique_ptr<connection>& owned) noexcept
        : conn(owned) {}

    close_on_exception(const close_on_exception&) = delete;
    close_on_exception& operator=(const close_on_exception&) = delete;

    ~close_on_exception() {
        if (conn && std::uncaught_exceptions() > exceptions) {
            close_connection(*conn);
        }
    }

    std::unique_ptr<connection>& conn;
    int exceptions = std::uncaught_exceptions();
};

// Serves a connection's requests until it closes, or parks it once it idles; a connection whose
// request is held by shaping waits (`wait_held`) and is served on by a new call.
// One loop over the connection's life, as Beast's do_session is: each end of a request
// (keep-alive, close, held, parked) is a branch of it rather than a coroutine of its own.
awaitable<void> serve(std::unique_ptr<connection> conn) {
    const close_on_exception guard{conn};
    auto& c = conn->c;
    auto& worker = c.w;
    auto& stream = conn->stream;
    auto& buffer = conn->buffer;
    if (!worker.requests) {
        worker.requests = std::make_shared<request_pool>();
    }
    auto& pool = *worker.requests;
    auto e = ending::keep;
    while (e == ending::keep && (!worker.draining || c.held)) {
        worker.mark_idle(c.entry);
        const auto& server = worker.config->server;
        const auto idle_timeout = c.entry.served
                                      ? server.idle_timeout
                                      : std::min(server.idle_timeout, server.header_timeout);
        // What a client sent after its last request and before its next one may be empty lines
        // alone (a CRLF after a POST body it did not count): the connection is idle all the
        // same, with its idle timeout and parked, not waiting under the header timeout.
        if (!c.held && buffer.size() != 0) {
            (void)detail::take_empty_lines(buffer);
        }
        if (buffer.size() == 0) {
            // Wait for the first bytes of the next request, for at most server.idle_timeout:
            // for `idle_grace` with the coroutine, then parked without it (nginx frees an idle
            // keep-alive connection's buffers likewise); either way without a buffer, which
            // comes with the bytes. The wait also completes for bytes already there (see
            // async_wait_event), so no look first: a MSG_PEEK before it cost a system call
            // per request, 7.0 where the read before the wait made 6.0 (bench/run); after a
            // read that emptied the socket it starts with no system call at all (bench/run:
            // 4.22 and 4.42 per request at one and two workers, where the build before it made
            // 4.82 and 5.44). (Here rather than in a function of its own: a coroutine frame
            // per request.)
            const auto waiting_since = coarse_clock::latest_now();
            const auto idle_until = waiting_since + idle_timeout;
            stream.expires_at(waiting_since +
                              std::min<steady_clock::duration>(idle_timeout, idle_grace));
            auto [wait_ec] = co_await stream.async_wait_event();
            if (wait_ec == beast::error::timeout && !worker.draining &&
                steady_clock::now() < idle_until) {
                stream.expires_at(idle_until);
                if (!stream.readable_now()) {
                    park(std::move(conn));
                    co_return;
                }
            } else if (wait_ec) {
                e = ending::close;
                break;
            }
        }
        auto memory = pool.take();
        lend_buffer(buffer, *memory);
        if (buffer.size() == 0) {
            // Readable: bytes, or the end of the stream.
            stream.expires_after(idle_timeout);
            auto [read_ec, n] = co_await stream.async_read_some(buffer.prepare(1024));
            buffer.commit(n);
            if (read_ec) {
                return_buffer(buffer, *memory);
                pool.give_back(std::move(memory));
                e = ending::close;
                break;
            }
        }
        memory->state.emplace(worker.config, worker.metrics->request_body_buffer_bytes);
        if (c.held) {
            e = co_await resume_request(c, *memory);
        } else {
            e = co_await handle_request(c, *memory);
        }
        if (e != ending::held) {
            finish_request(c, *memory->state);
            c.entry.served = true;
        }
        memory->state.reset();
        return_buffer(buffer, *memory);
        pool.give_back(std::move(memory));
        if (e == ending::held) {
            wait_held(std::move(conn));
            co_return;
        }
    }
    // A connection the drain ends after a response that promised it would stay open (the drain
    // began while the response went out) may hold its client's next request unread: a close
    // would then send a reset, and the kernel would drop what of the response it still held.
    if (e == ending::linger || (e == ending::keep && worker.draining)) {
        co_await lingering_close(stream);
    } else if (e == ending::reset) {
        // SO_LINGER {1, 0}: the close sends a reset, which the client reads as an error.
        error_code ignored;
        stream.socket().set_option(net::socket_base::linger(true, 0), ignored);
    }
    close_connection(*conn);
}

// At server.max-connections: closes this worker's longest idle connection, one that has not sent a
// request yet first (what a flood of silent connections is made of), else any waiting for its
// next request; false when none is idle. Its wait ends at once (cancelled) and it closes.
bool close_an_idle_connection(worker_context& worker) noexcept {
    for (auto& idle : worker.idle_sessions) {
        for (auto& s : idle) {
            if (s.waits_until == steady_clock::time_point{}) {
                error_code ignored;
                s.stream->socket().cancel(ignored);
                worker_context::mark_busy(s); // not chosen again before it closes
                return true;
            }
        }
    }
    return false;
}

} // namespace

void start_session(tcp_socket socket, worker_context& worker) {
    if (static_cast<std::uint64_t>(worker.metrics->connections_open.load(
            std::memory_order_relaxed)) >= worker.max_connections) {
        metrics::bump(worker.metrics->connections_over_cap_total);
        const bool room = close_an_idle_connection(worker);
        // A peer can make this happen at will: one line per second at most.
        static log_throttle throttle;
        log_throttled(throttle,
                      spdlog::level::warn,
                      "server.max-connections ({}) reached: {}",
                      worker.max_connections,
                      room ? "closing the longest idle connection for a new one"
                           : "no connection is idle: closing the new one");
        if (!room) {
            count_closed(worker);
            return; // the socket closes with it
        }
    }
    error_code ec;
    socket.set_option(tcp::no_delay(true), ec);
    enable_drained_reads(socket, ec);
    const auto remote = socket.remote_endpoint(ec);
    if (ec) {
        count_closed(worker);
        return;
    }
    auto conn = std::make_unique<connection>(std::move(socket), worker, to_ip(remote.address()));
    conn->c.peer_text = conn->c.peer.to_string();
    worker.sessions.push_back(conn->entry);
    metrics::bump(worker.metrics->connections_total);
    worker.metrics->connections_open.fetch_add(1, std::memory_order_relaxed);
    auto ex = conn->stream.get_executor();
    net::co_spawn(ex, serve(std::move(conn)), log_session_exception);
}

} // namespace sluice::http
