// SPDX-License-Identifier: Apache-2.0
// The forwarder: one request to the upstream and its response back, in the shape of Beast's
// `relay` (example/doc/http_examples.hpp). A parser reads each message into a `buffer_body`
// pointing at a fixed buffer, so bodies of any size stream through a constant amount of memory;
// a `message_writer` sends the header with the first block of the body in one write and
// re-chunks chunked bodies. With a Content-Length, that first block is the body read ahead,
// whole if it fits server.request-buffer-size (buffer_body), before the upstream is contacted.
//
// Retry: a pooled connection can be closed by the upstream between our liveness check (if any:
// see upstream::pool::try_take) and our write, or as our request arrives (its keep-alive timeout
// ending then). On a reused connection the request goes once more, on a new connection, when the
// first write fails (the request never left whole, so the upstream cannot have acted on it;
// its body, if any, not read past what that write carried), or when the response header read finds
// the connection closed before a single byte and the request is safe to repeat: no body, and an
// idempotent method (RFC 9110 9.2.2; see safe_to_repeat). Nothing else is retried: once a body
// has been streamed it cannot be sent again.
//
// WebSocket: a bodyless upgrade request (is_websocket_upgrade) goes upstream with its Upgrade and
// Connection fields; an upstream that answers 101 gets the connection as a tunnel (tunnel.cpp)
// until it ends, and any other answer is relayed as usual.
#include "http/client_body.hpp"
#include "http/forwarder_detail.hpp"
#include "http/response_figures.hpp"
#include "http/tunnel.hpp"
#include "sluice/core/errc.hpp"
#include "sluice/http/forward_headers.hpp"

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <memory>
#include <optional>

namespace sluice::http::detail {
namespace {

using clock_type = std::chrono::steady_clock;

// The interim (1xx) responses taken before a final one: a 100 Continue and an Early Hints or
// two are what servers send, and each one relayed costs a write to the client; an upstream that
// sends more is broken or hostile, and gets a 502 rather than an unbounded relay.
constexpr unsigned max_interim_responses = 16;

// Whether a request that left whole may be sent again after its connection closed unanswered:
// RFC 9110 9.2.2's idempotent methods only. The upstream may have read the request and acted on
// it before closing (a crash mid-request, a keep-alive timeout racing it): a second POST could
// place an order twice, whatever its length, Content-Length: 0 included. nginx's default is the
// same (proxy_next_upstream without non_idempotent). An unknown method is not known to be safe.
bool safe_to_repeat(bhttp::verb method) noexcept {
    switch (method) {
    case bhttp::verb::get:
    case bhttp::verb::head:
    case bhttp::verb::options:
    case bhttp::verb::trace:
    case bhttp::verb::put:
    case bhttp::verb::delete_:
        return true;
    default:
        return false;
    }
}

void close_connection(upstream::connection_ptr& conn) noexcept {
    if (conn) {
        error_code ignored;
        conn->stream.socket().close(ignored);
        conn.reset();
    }
}

// What reading the body came to, as the forwarder's failure.
failure failure_of(body_read read) noexcept {
    switch (read) {
    case body_read::done:
        return failure::none;
    case body_read::broken:
        return failure::client_bad_body;
    case body_read::too_large:
        return failure::client_too_large;
    case body_read::too_slow:
        return failure::client_timeout;
    case body_read::client_gone:
        break;
    }
    return failure::client_gone;
}

// Reads the client's body until one block of it is in `buf` (or the body is all in): the piece
// a read brings, and every piece already buffered after it, so that they go upstream in one
// write. Done before the upstream is even contacted, so that a body that is broken from its
// first chunk (a bad chunk size, say) is refused with nothing sent upstream. Later damage can
// only be found mid-stream, and then the upstream connection is aborted.
awaitable<failure> read_body_block(forward_args& a, const relay_buffer& buf) {
    auto& body = a.parser.get().body();
    const auto limits = chunk_limits_of(a.config);
    do {
        open_block(body, buf);
        a.client.expires_after(body_read_timeout(a.config, a.body_started));
        auto ec = co_await read_message(a.client, a.client_buffer, a.parser, false, limits);
        if (!ec) {
            ec = parse_buffered_body(a.client_buffer, a.parser, limits);
        }
        if (ec && ec != bhttp::error::need_buffer) {
            co_return failure_of(body_read_of(ec));
        }
        close_block(body, buf, a.parser.is_done());
    } while (body.size == 0 && body.more); // chunk headers only: nothing to pass on yet
    co_return failure::none;
}

// Takes the first block of the body; first answers Expect: 100-continue, because the client
// sends nothing before it.
awaitable<failure> prefetch_body(forward_args& a, const relay_buffer& buf) {
    if (a.expect_continue) {
        const bool sent = co_await send_continue(a.client, a.config);
        if (!sent) {
            co_return failure::client_gone;
        }
    }
    auto result = co_await read_body_block(a, buf);
    co_return result;
}

// The block of the request body that `read_body_block` left in `buf`.
std::string_view request_block(forward_args& a, const relay_buffer& buf) {
    return {buf.data(), a.parser.get().body().size};
}

// The first block of the body sent with the header: what was read ahead, or prefetched.
std::string_view first_body_block(forward_args& a, const relay_buffer& buf) {
    return a.body_read_ahead ? a.body_ahead.view() : request_block(a, buf);
}

// Streams the rest of the body to the upstream, block by block, after the first.
awaitable<failure> relay_request_body(forward_args& a,
                                      upstream::connection& conn,
                                      message_writer& writer,
                                      const relay_buffer& buf) {
    while (!a.parser.is_done()) {
        const auto f = co_await read_body_block(a, buf);
        if (f != failure::none) {
            co_return f;
        }
        conn.stream.expires_after(a.config.upstream.timeout);
        error_code ec;
        if (!writer.write_now(conn.stream, request_block(a, buf), a.parser.is_done(), ec)) {
            ec = co_await writer.finish(conn.stream);
        }
        if (ec) {
            co_return ec == beast::error::timeout ? failure::upstream_timeout
                                                  : failure::upstream_stopped_reading;
        }
    }
    co_return failure::none;
}

body_framing request_framing(const forward_args& a, bool has_body) {
    if (!has_body) {
        return body_framing::none;
    }
    return a.parser.chunked() ? body_framing::chunked : body_framing::raw;
}

// One attempt: takes a connection (pooled on the first attempt, new on the retry), sends the
// request (the header with the prefetched block of the body in `buf` in one write, which a retry
// sends again, since nothing else has been read yet; then the rest), and reads the final
// response header, passing interim ones on. One coroutine for all of it: a frame per step would
// cost more than the steps.
awaitable<failure> exchange(forward_args& a,
                            upstream::connection_ptr& conn,
                            const relay_buffer& buf,
                            std::optional<response_parser>& rp,
                            bool has_body,
                            bool upgrade,
                            bool first) {
    const auto& up = a.config.upstream;
    // Sent again if the connection proves stale after the request left whole (see
    // safe_to_repeat); any request is sent again when its first write fails.
    const bool repeatable = !has_body && safe_to_repeat(a.parser.get().method());
    if (first) {
        // A request that may not be repeated gets a checked connection.
        conn = a.pool.try_take(up, repeatable);
    }
    if (!conn) {
        auto [ec, c] = co_await a.pool.connect(up);
        if (ec) {
            co_return ec == errc::upstream_exhausted ? failure::upstream_busy
                                                     : failure::upstream_connect;
        }
        conn = std::move(c);
    }
    // The forwarding fields, made once in `forward`, are in scratch.lines.
    message_writer writer(
        a.parser.get(), request_framing(a, has_body), a.scratch.header, a.scratch.lines);
    const auto first_block = has_body ? first_body_block(a, buf) : std::string_view{};
    conn->stream.expires_after(up.timeout);
    error_code ec;
    // Written at once, with nothing to follow: the response's read starts in this same turn of
    // the event loop, and need not try the socket first.
    auto response_read = first_read::untried;
    if (!writer.write_now(conn->stream, first_block, a.parser.is_done(), ec)) {
        ec = co_await writer.finish(conn->stream);
        response_read = first_read::tried;
    }
    // An upstream that answered before it read the whole body, then closed the connection (a
    // 401 or 413 to an upload: Go's servers, among others), reset it with the body unread: a
    // write fails, but its answer came before the reset and waits to be read. It is relayed, as
    // nginx relays it, where a 502 would put a proxy's error in place of the upstream's answer.
    // Neither connection is kept after it (`body_unsent`; the client's body is partly unread:
    // prepare_response). No answer there: a 502, as before, or, for a first write on a reused
    // connection, the retry on a new one (nothing of the request was taken). A write that timed
    // out is neither: the upstream is there but takes nothing (a stale connection fails at once,
    // with a reset), so it gets the 504 of upstream.timeout, as nginx's proxy_send_timeout does;
    // a retry would double the wait.
    if (ec == beast::error::timeout) {
        co_return failure::upstream_timeout;
    }
    const bool first_write_failed = ec && has_body;
    if (ec && !first_write_failed) {
        co_return (conn->reused && first) ? failure::stale : failure::upstream;
    }
    a.body_unsent = first_write_failed;
    if (has_body && !first_write_failed) {
        response_read = first_read::tried;
        const auto f = co_await relay_request_body(a, *conn, writer, buf);
        if (f != failure::none && f != failure::upstream_stopped_reading) {
            co_return f;
        }
        a.body_unsent = f == failure::upstream_stopped_reading;
    }
    // One deadline for the whole response head, the interim responses before it included: were
    // each to renew it, an upstream sending a 1xx now and then would keep the request forever.
    conn->stream.expires_after(up.timeout);
    for (unsigned interim_seen = 0;; ++interim_seen) {
        start_response(a, rp, interim_seen == 0);
        ec = co_await read_message(
            conn->stream, conn->buffer, *rp, true, chunk_limits{}, response_read);
        response_read = first_read::tried; // after an interim response: bytes may be there
        const auto f = judge_response_header(
            ec,
            *rp,
            *conn,
            first && (repeatable || first_write_failed),
            upgrade ? std::string_view(a.parser.get()[bhttp::field::sec_websocket_key])
                    : std::string_view{});
        if (f != failure::interim) {
            co_return f;
        }
        if (interim_seen == max_interim_responses) {
            // Not final, so a 502 may still follow those already relayed.
            co_return failure::upstream;
        }
        const bool passed = co_await relay_interim(a, rp->head());
        if (!passed) {
            co_return failure::client_gone;
        }
    }
}

// Answers a failure that happened before any response byte went to the client.
awaitable<void> answer_failure(forward_args& a, failure f, forward_result& result) {
    local_reply reply;
    switch (f) {
    case failure::upstream_timeout:
        reply.status = bhttp::status::gateway_timeout;
        result.upstream = upstream_outcome::timed_out;
        break;
    case failure::client_bad_body:
        reply.status = bhttp::status::bad_request;
        result.upstream = upstream_outcome::client_failed;
        break;
    case failure::client_too_large:
        reply.status = bhttp::status::payload_too_large;
        result.upstream = upstream_outcome::client_failed;
        break;
    case failure::upstream_busy:
        reply.status = bhttp::status::service_unavailable;
        reply.retry_after = 1;
        result.upstream = upstream_outcome::busy;
        break;
    case failure::tunnels_full:
        reply.status = bhttp::status::service_unavailable;
        reply.retry_after = 1;
        result.upstream = upstream_outcome::tunnels_full;
        break;
    case failure::client_timeout:
        reply.status = bhttp::status::request_timeout;
        result.upstream = upstream_outcome::client_failed;
        break;
    case failure::client_gone:
        result.upstream = upstream_outcome::client_failed;
        co_return;
    case failure::upstream_connect:
        reply.status = bhttp::status::bad_gateway;
        result.upstream = upstream_outcome::connect_failed;
        break;
    default:
        reply.status = bhttp::status::bad_gateway;
        result.upstream = upstream_outcome::failed;
        break;
    }
    // The request body may be partly unread: keep the connection only when it is all in.
    const bool keep_alive = a.client_keep_alive && a.parser.is_done() && !*a.draining;
    auto ec = co_await write_local_reply(a.client, reply, a.reply, keep_alive);
    result.status = static_cast<unsigned>(reply.status);
    result.keep_alive = keep_alive && !ec;
}

// Whether a WebSocket upgrade may go on: its worker has fewer than upstream.max-tunnels upgrades
// being forwarded and tunnels open (0: no cap of their own).
bool admit_tunnel(const forward_args& a) {
    const auto cap = a.config.upstream.max_tunnels;
    return cap == 0 || a.tunnels == nullptr || a.tunnels->open < cap;
}

// An upgrade counted in its worker's tunnels, and in the process's gauge, for as long as it
// lives: from before it is forwarded to the end of its tunnel, or of the response that refused
// it.
class tunnel_ticket {
public:
    explicit tunnel_ticket(tunnel_count* count) noexcept
        : count_(count) {
        if (count_ != nullptr) {
            ++count_->open;
            if (count_->gauge != nullptr) {
                count_->gauge->fetch_add(1, std::memory_order_relaxed);
            }
        }
    }

    ~tunnel_ticket() {
        if (count_ != nullptr) {
            --count_->open;
            if (count_->gauge != nullptr) {
                count_->gauge->fetch_sub(1, std::memory_order_relaxed);
            }
        }
    }

    tunnel_ticket(const tunnel_ticket&) = delete;
    tunnel_ticket& operator=(const tunnel_ticket&) = delete;

private:
    tunnel_count* count_;
};

// The word for the access log's `end` of a tunnel that did not end by both sides closing.
std::string_view end_word(tunnel_end end) {
    switch (end) {
    case tunnel_end::idle:
        return "idle_timeout";
    case tunnel_end::client_failed:
        return "client_left";
    case tunnel_end::upstream_failed:
        return "upstream_broke";
    case tunnel_end::drained:
        return "drained";
    case tunnel_end::closed:
        break;
    }
    return {};
}

// The upstream switched to WebSocket: its 101 goes to the client, then the two connections are
// a tunnel until it ends. The upstream connection speaks WebSocket from now on, so the caller
// never pools it again; the client's closes after the tunnel too. `upstream_time` is the time
// to the 101: a tunnel's whole life would say nothing of the upstream's latency.
awaitable<void> tunnel_through(forward_args& a,
                               upstream::connection& conn,
                               response_parser& rp,
                               const relay_buffer& buf,
                               clock_type::time_point start,
                               forward_result& result) {
    result.status = 101;
    result.upstream = upstream_outcome::response;
    prepare_switch(a, rp);
    message_writer writer(rp.head(), body_framing::none, a.scratch.header, a.scratch.lines);
    // The upstream's time: to its 101, not the client's read of it.
    result.upstream_time = std::chrono::duration_cast<milliseconds>(clock_type::now() - start);
    a.client.expires_after(a.config.server.idle_timeout);
    error_code ec;
    if (!writer.write_now(a.client, {}, true, ec)) {
        ec = co_await writer.finish(a.client);
    }
    if (ec) {
        result.cut_short = "client_left";
        co_return;
    }
    // The tunnel keeps its own idle watch over both directions; the streams' deadlines, one per
    // stream for reads and writes alike, would cut a direction that is merely quiet.
    a.client.expires_never();
    conn.stream.expires_never();
    // One buffer per direction: the request's own for the client's bytes, a second one for the
    // upstream's.
    const auto lease = a.relay_buffers.take();
    const auto end = co_await run_tunnel(
        tunnel_side{a.client.socket(), a.client_buffer, buf},
        tunnel_side{conn.stream.socket(), conn.buffer, {lease.data(), relay_buffer_size}},
        a.config.server.idle_timeout,
        tunnel_drain{a.entry, a.drain_deadline});
    result.cut_short = end_word(end);
}

// After the body, the figures the caller asked for: a field's value (a chunked response's
// trailer fields are among the fields by now), or what the scan found in the body.
void collect_figures(const forward_args& a,
                     const response_head& res,
                     response_figures* scan,
                     boost::container::small_vector<std::optional<std::string>, 1>& out) {
    for (std::size_t i = 0; i < a.settle_sources.size(); ++i) {
        const auto& source = *a.settle_sources[i];
        if (source.what == config::cost_source::kind::json) {
            out.push_back(scan ? scan->figure(i) : std::nullopt);
            continue;
        }
        const auto* field = res.find(source.header);
        out.push_back(field == nullptr ? std::nullopt
                                       : std::optional<std::string>(std::string(field->value())));
    }
}

// server.request-buffer-size: a body with a Content-Length, up to `max` bytes, read before the
// upstream is contacted. A slow client then never holds an upstream connection (nor the
// backend's worker behind it) while it sends a body that fits, and one that stops short never
// reaches the upstream at all; a larger one streams on from there. (nginx reads every body
// first, proxy_request_buffering on; a chunked body is left to stream, being how a client
// streams an upload piece by piece.)
awaitable<failure> buffer_body(forward_args& a, std::uint64_t max) {
    a.body_read_ahead = true;
    const body_source src{
        a.client, a.client_buffer, a.parser, a.config, a.expect_continue, a.body_started};
    auto read = take_body_ahead(src, a.body_ahead, max);
    if (!read) {
        read = co_await read_body_ahead(src, a.body_ahead, max);
    }
    co_return failure_of(*read);
}

// The request's header as it goes upstream: hop-by-hop fields out, Expect too (we answered
// it, or it was HTTP/1.0's); the forwarding fields (and an upgrade's own) in a.scratch.lines,
// written after the header's; a Host where HTTP/1.0 sent none; HTTP/1.1.
void prepare_upstream_head(forward_args& a, bool upgrade) {
    auto& req = a.parser.get();
    strip_hop_by_hop(req);
    a.scratch.lines.clear();
    append_forwarding_lines(req, a.peer, a.scratch.lines);
    if (upgrade) {
        // strip_hop_by_hop took the client's: these are the hop's own, to the upstream.
        a.scratch.lines += "Connection: Upgrade\r\nUpgrade: websocket\r\n";
    }
    // One pass: Expect out, is there a Host, and is the framing spelled as it is sent? sluice
    // frames the body itself: a field that says so otherwise than the plain way (`CHUNKED`,
    // `Content-Length: 005`, which request_checks let through as HTTP allows) is written plainly,
    // so that an upstream that reads it strictly frames the body as sluice does.
    bool has_host = false;
    bool respell_framing = false;
    for (auto it = req.begin(); it != req.end();) {
        const auto name = it->name();
        if (name == bhttp::field::expect) {
            it = req.erase(it);
            continue;
        }
        // An empty Host (HTTP/1.0 allows it) is none: the upstream's goes in its place.
        has_host = has_host || (name == bhttp::field::host && !it->value().empty());
        respell_framing = respell_framing ||
                          (name == bhttp::field::transfer_encoding && it->value() != "chunked") ||
                          (name == bhttp::field::content_length &&
                           (it->value().size() > 1 && it->value().front() == '0'));
        ++it;
    }
    if (!has_host) {
        // HTTP/1.0 allows a request without Host; the HTTP/1.1 request we send does not.
        req.set(bhttp::field::host,
                upstream_host_field(a.config.upstream.host, a.config.upstream.port));
    }
    if (respell_framing) {
        if (a.parser.chunked()) {
            req.set(bhttp::field::transfer_encoding, "chunked");
        } else if (const auto length = a.parser.content_length()) {
            req.set(bhttp::field::content_length, std::to_string(*length));
        }
    }
    // HTTP/1.1 keeps the connection by default, and strip_hop_by_hop left no Connection field.
    req.version(11);
}

// The search of the response for its `json:` settlement figures, or null when no limit reads
// one. On the heap: in the frame its 288 bytes would be in every request's frame.
std::unique_ptr<response_figures> response_scan(const forward_args& a, const response_parser& rp) {
    if (a.response_json_bytes == 0) {
        return nullptr;
    }
    return std::make_unique<response_figures>(a.settle_sources,
                                              rp.head().value_of(bhttp::field::content_type),
                                              rp.head().value_of(bhttp::field::content_encoding),
                                              a.response_json_bytes);
}

// After the response's relay ended with `f`: the upstream connection back to the pool when
// `reusable` (the upstream keeps it and its response was read whole) and sluice is not
// draining, closed otherwise; a relay that failed mid-response ends the client's connection too,
// with a reset when the body ends with the connection.
void end_exchange(forward_args& a,
                  upstream::connection_ptr& conn,
                  bool reusable,
                  bool body_ends_with_close,
                  failure f,
                  forward_result& result) {
    if (f != failure::none) {
        // The response has started (or the client left): the only honest end is to close.
        close_connection(conn);
        result.keep_alive = false;
        result.cut_short = f == failure::client_gone ? "client_left" : "upstream_broke";
        // A body that ends with the connection has no other way to say it is cut short: a FIN
        // would end it as if whole (a client, a cache, would keep the half of it).
        result.reset = f != failure::client_gone && body_ends_with_close;
        return;
    }
    // A body the upstream answered before it was all sent (see exchange) left the connection
    // broken.
    if (reusable && !a.body_unsent && !*a.draining) {
        a.pool.release(std::move(conn), a.config.upstream);
    } else {
        close_connection(conn);
    }
}

} // namespace

awaitable<void> forward(forward_args& a, forward_result& result) {
    auto& req = a.parser.get();
    // A request without a body (and a safe method) can be sent again after the upstream read
    // failed; one with a body only while the body is still unread, when the header write failed.
    const bool bodyless = a.parser.is_done() && !a.body_read_ahead;
    failure f = failure::none;
    if (const auto max = a.config.server.request_buffer_bytes;
        !a.parser.is_done() && !a.parser.chunked() && a.body_ahead.size() < max) {
        // Before the relay buffer is taken: a slow body holds no more than its own bytes.
        f = co_await buffer_body(a, max);
    }
    // The upstream's time: not the client's while it sent a buffered body.
    const auto start = clock_type::now();
    // An upgrade with a body is none: the body's end could not be told from the new protocol's
    // first bytes.
    const bool upgrade = bodyless && is_websocket_upgrade(req);
    if (upgrade && !admit_tunnel(a)) {
        f = failure::tunnels_full;
    }
    // Counts the admitted upgrade from here to the end of its tunnel, or of its response.
    const tunnel_ticket ticket(upgrade && f == failure::none ? a.tunnels : nullptr);
    prepare_upstream_head(a, upgrade);

    const auto lease = a.relay_buffers.take();
    const relay_buffer buf(lease.data(), relay_buffer_size);
    upstream::connection_ptr conn;
    std::optional<response_parser> rp;
    if (f == failure::none && !a.parser.is_done() && !a.body_read_ahead) {
        f = co_await prefetch_body(a, buf);
    }
    for (int attempt = 0; f == failure::none; ++attempt) {
        f = co_await exchange(a, conn, buf, rp, !bodyless, upgrade, attempt == 0);
        if (f != failure::stale) {
            break;
        }
        // Only the first attempt can be stale; its retry goes on a new connection.
        close_connection(conn);
        f = attempt == 0 ? failure::none : failure::upstream;
    }
    if (f != failure::none) {
        close_connection(conn);
        co_await answer_failure(a, f, result);
        result.upstream_time = std::chrono::duration_cast<milliseconds>(clock_type::now() - start);
        co_return;
    }
    // The request is sent and no retry will need it again: a response that streams for minutes
    // (a token stream after a 60 KiB prompt) does not keep the body's memory meanwhile.
    a.body_ahead.release();

    if (rp->head().status == 101) {
        // judge_response_header let a 101 through only for a WebSocket upgrade.
        co_await tunnel_through(a, *conn, *rp, buf, start, result);
        close_connection(conn);
        co_return;
    }
    const bool upstream_keep_alive = rp->keep_alive() && !rp->need_eof();
    result.status = rp->head().status;
    result.upstream = upstream_outcome::response;
    result.keep_alive = prepare_response(a, *rp);
    const bool body_ends_with_close = ends_with_close(a, *rp);
    const auto scan = response_scan(a, *rp);
    response_relay relay(a, *conn, *rp, buf, scan && scan->active() ? scan.get() : nullptr);
    if (const auto done = relay.start()) {
        f = *done;
    } else {
        f = co_await relay.run();
    }
    result.upstream_time = std::chrono::duration_cast<milliseconds>(clock_type::now() - start);
    collect_figures(a, rp->head(), scan.get(), result.figures);
    end_exchange(a, conn, upstream_keep_alive && rp->is_done(), body_ends_with_close, f, result);
}

} // namespace sluice::http::detail
