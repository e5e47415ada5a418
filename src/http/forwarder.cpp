// SPDX-License-Identifier: Apache-2.0
// The forwarder: one request to the upstream and its response back, in the shape of Beast's
// `relay` (example/doc/http_examples.hpp). A parser reads each message into a `buffer_body`
// pointing at a fixed buffer, so bodies of any size stream through a constant amount of memory;
// a `message_writer` sends the header with the first block of the body in one write and
// re-chunks chunked bodies.
//
// Retry: a pooled connection can be closed by the upstream between our liveness check (if any:
// see upstream::pool::acquire) and our write. When the first write fails, or the response header
// read finds the connection closed before a single byte, on a reused connection whose request has
// no body (or whose body has not been read past its first block), the request goes once more on
// a new connection. Nothing else is retried: once a body has been streamed it cannot be sent
// again.
#include "http/session_detail.hpp"
#include "sluice/http/forward_headers.hpp"
#include "sluice/http/rate_limit_headers.hpp"

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include <optional>
#include <span>

namespace sluice::http::detail {
namespace {

using response_parser = bhttp::response_parser<bhttp::buffer_body>;
using relay_buffer = std::span<char, relay_buffer_size>;
using clock_type = std::chrono::steady_clock;

/// An upstream response header may be larger than a request's (cookies): allow this much.
constexpr std::uint32_t response_header_limit = 64 * 1024;

/// Where an exchange failed, which decides the answer.
enum class failure {
    none,
    stale,            // a reused connection failed before anything happened: retry once
    upstream,         // connect, write or read failed: 502
    upstream_timeout, // no response header in time: 504
    client_gone,      // the client closed or stalled: close without a reply
    client_bad_body,  // the request body's framing is broken: 400, close
    client_too_large, // the request body passed max_body_bytes: 413, close
};

bool is_parse_error(const error_code& ec) {
    return ec.category() == bhttp::make_error_code(bhttp::error::bad_chunk).category() &&
           ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
}

failure classify_client_read(const error_code& ec) {
    if (ec == bhttp::error::body_limit) {
        return failure::client_too_large;
    }
    return is_parse_error(ec) ? failure::client_bad_body : failure::client_gone;
}

void close_connection(upstream::connection_ptr& conn) noexcept {
    if (conn) {
        error_code ignored;
        conn->stream.socket().close(ignored);
        conn.reset();
    }
}

// Reads the client's body until one block of it is in `buf` (or the body is all in). Done
// before the upstream is even contacted, so that a body that is broken from its first chunk
// (a bad chunk size, say) is refused with nothing sent upstream. Later damage can only be
// found mid-stream, and then the upstream connection is aborted.
awaitable<failure> read_body_block(forward_args& a, const relay_buffer& buf) {
    auto& body = a.parser.get().body();
    do {
        body.data = buf.data();
        body.size = buf.size();
        a.client.expires_after(a.config.server.idle_timeout);
        auto [ec, n] = co_await bhttp::async_read_some(a.client, a.client_buffer, a.parser);
        if (ec && ec != bhttp::error::need_buffer) {
            co_return classify_client_read(ec);
        }
        body.size = buf.size() - body.size;
        body.data = buf.data();
        body.more = !a.parser.is_done();
    } while (body.size == 0 && body.more); // a chunk header only: nothing to pass on yet
    co_return failure::none;
}

// Takes the first block of the body; first answers Expect: 100-continue, because the client
// sends nothing before it.
awaitable<failure> prefetch_body(forward_args& a, const relay_buffer& buf) {
    if (a.expect_continue) {
        static constexpr std::string_view continue_line = "HTTP/1.1 100 Continue\r\n\r\n";
        a.client.expires_after(a.config.server.idle_timeout);
        auto [ec, n] = co_await net::async_write(a.client, net::buffer(continue_line));
        if (ec) {
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
        const auto ec =
            co_await writer.write(conn.stream, request_block(a, buf), a.parser.is_done());
        if (ec) {
            co_return failure::upstream;
        }
    }
    co_return failure::none;
}

// Takes a connection (pooled on the first attempt, new on the retry) and sends the request:
// the header with the prefetched block of the body in `buf` in one write (which a retry sends
// again, since nothing else has been read yet), then the rest.
awaitable<failure> send_request(forward_args& a,
                                upstream::connection_ptr& conn,
                                const relay_buffer& buf,
                                bool has_body,
                                bool first) {
    const auto& up = a.config.upstream;
    if (first) {
        // A bodyless request is resent when the connection proves stale; one with a body only
        // when its first write fails, so that one gets a checked connection.
        conn = a.pool.try_take(up, !has_body);
    }
    if (!conn) {
        auto [ec, c] = co_await a.pool.connect(up);
        if (ec) {
            co_return failure::upstream;
        }
        conn = std::move(c);
    }

    const auto framing = !has_body            ? body_framing::none
                         : a.parser.chunked() ? body_framing::chunked
                                              : body_framing::raw;
    // The forwarding fields, made once in `forward`, are in scratch.lines.
    message_writer writer(a.parser.get(), framing, a.scratch.header, a.scratch.lines);
    const auto first_block = has_body ? request_block(a, buf) : std::string_view{};
    conn->stream.expires_after(up.timeout);
    const auto ec = co_await writer.write(conn->stream, first_block, a.parser.is_done());
    if (ec) {
        co_return (conn->reused && first) ? failure::stale : failure::upstream;
    }
    auto result = co_await relay_request_body(a, *conn, writer, buf);
    co_return result;
}

// Passes a 1xx interim response (other than 100, which we answer ourselves) to the client.
awaitable<bool> relay_interim(forward_args& a, const bhttp::response_header<>& interim) {
    if (a.reply.version < 11 || interim.result_int() == 100) {
        co_return true; // HTTP/1.0 knows no 1xx
    }
    bhttp::response<bhttp::empty_body> res{interim.result(), 11};
    for (const auto& f : interim) {
        res.insert(f.name_string(), f.value());
    }
    strip_hop_by_hop(res);
    a.client.expires_after(a.config.server.idle_timeout);
    auto [ec, n] = co_await bhttp::async_write(a.client, res);
    co_return !ec;
}

// Reads the final response header, passing interim responses on.
awaitable<failure> read_response_header(forward_args& a,
                                        upstream::connection& conn,
                                        std::optional<response_parser>& rp,
                                        bool retryable) {
    for (;;) {
        rp.emplace();
        rp->body_limit(boost::none);
        rp->header_limit(response_header_limit);
        rp->skip(a.reply.head);
        conn.stream.expires_after(a.config.upstream.timeout);
        auto [ec, n] = co_await bhttp::async_read_header(conn.stream, conn.buffer, *rp);
        if (ec == beast::error::timeout) {
            co_return failure::upstream_timeout;
        }
        if (ec) {
            const bool nothing_came = !rp->got_some() && conn.buffer.size() == 0;
            co_return retryable&& conn.reused&& nothing_came ? failure::stale : failure::upstream;
        }
        const auto status = rp->get().result_int();
        if (status == 101) {
            co_return failure::upstream; // we never ask to switch protocols
        }
        if (status >= 200) {
            co_return failure::none;
        }
        const bool passed = co_await relay_interim(a, rp->get().base());
        if (!passed) {
            co_return failure::client_gone;
        }
    }
}

// Rewrites the upstream's response header for the client: hop-by-hop fields out, rate-limit
// headers in, framing fitted to the client's HTTP version. Returns the client keep-alive.
bool prepare_response(forward_args& a, response_parser& rp) {
    auto& res = rp.get();
    strip_hop_by_hop(res);
    a.scratch.lines.clear();
    if (a.reply.limits.decision != nullptr) {
        append_rate_limit_lines(res,
                                a.scratch.lines,
                                a.reply.limits.name,
                                *a.reply.limits.decision,
                                a.reply.limits.x_ratelimit);
    }
    bool keep_alive = a.client_keep_alive && !*a.draining;
    const auto status = res.result_int();
    const bool has_body = !a.reply.head && status != 204 && status != 304;
    res.version(a.reply.version < 11 ? 10 : 11);
    if (has_body && !rp.content_length()) {
        // Chunked or ended by the upstream's close: chunk it for HTTP/1.1, which keeps the
        // connection; HTTP/1.0 knows no chunking, so the body ends when we close.
        if (a.reply.version >= 11) {
            res.chunked(true);
        } else {
            res.chunked(false);
            keep_alive = false;
        }
    }
    res.keep_alive(keep_alive);
    return keep_alive;
}

// Parses into `buf` the part of the body that came in with the header, without reading, so
// that the header and the first block of the body go out to the client in one write.
error_code
parse_buffered_body(upstream::connection& conn, response_parser& rp, const relay_buffer& buf) {
    auto& body = rp.get().body();
    body.data = buf.data();
    body.size = buf.size();
    error_code ec;
    while (conn.buffer.size() != 0 && !rp.is_done()) {
        // Without the eager option one call parses one piece (a chunk header, say): loop.
        const auto used = rp.put(conn.buffer.data(), ec);
        conn.buffer.consume(used);
        if (ec == bhttp::error::need_buffer || ec == bhttp::error::need_more) {
            ec = {};
            break;
        }
        if (ec || used == 0) {
            break;
        }
    }
    body.size = buf.size() - body.size;
    body.data = buf.data();
    body.more = !rp.is_done();
    return ec;
}

// Reads the next block of the response body into `buf`.
awaitable<error_code> read_response_block(forward_args& a,
                                          upstream::connection& conn,
                                          response_parser& rp,
                                          const relay_buffer& buf) {
    auto& body = rp.get().body();
    body.data = buf.data();
    body.size = buf.size();
    conn.stream.expires_after(a.config.upstream.timeout);
    auto [ec, n] = co_await bhttp::async_read_some(conn.stream, conn.buffer, rp);
    body.size = buf.size() - body.size;
    body.data = buf.data();
    body.more = !rp.is_done();
    co_return ec == bhttp::error::need_buffer ? error_code{} : ec;
}

// Writes the response header to the client, with as much of the body as has arrived, and
// streams the rest of the body after it.
awaitable<failure> relay_response(forward_args& a,
                                  upstream::connection& conn,
                                  response_parser& rp,
                                  const relay_buffer& buf) {
    auto& res = rp.get();
    const bool has_body = !a.reply.head && res.result_int() != 204 && res.result_int() != 304;
    const auto framing = !has_body       ? body_framing::none
                         : res.chunked() ? body_framing::chunked
                                         : body_framing::raw;
    // The rate-limit fields, made by `prepare_response`, are in scratch.lines.
    message_writer writer(res, framing, a.scratch.header, a.scratch.lines);
    if (!has_body) {
        a.client.expires_after(a.config.server.idle_timeout);
        const auto ec = co_await writer.write(a.client, {}, true);
        co_return ec ? failure::client_gone : failure::none;
    }
    // A body broken in its buffered part still gets the header first, as a later break would.
    const bool broken = static_cast<bool>(parse_buffered_body(conn, rp, buf));
    auto& body = res.body();
    std::string_view block{buf.data(), broken ? 0 : body.size};
    for (;;) {
        const bool last = !broken && !body.more;
        a.client.expires_after(a.config.server.idle_timeout);
        const auto ec = co_await writer.write(a.client, block, last);
        if (ec) {
            co_return failure::client_gone;
        }
        if (last) {
            co_return failure::none;
        }
        if (broken) {
            co_return failure::upstream; // the response has started: close
        }
        do {
            const auto rec = co_await read_response_block(a, conn, rp, buf);
            if (rec) {
                co_return failure::upstream; // mid-body: the response has started, close
            }
        } while (body.size == 0 && body.more);
        block = {buf.data(), body.size};
    }
}

// Answers a failure that happened before any response byte went to the client.
awaitable<forward_result> answer_failure(forward_args& a, failure f) {
    forward_result result;
    local_reply reply;
    switch (f) {
    case failure::upstream_timeout:
        reply.status = bhttp::status::gateway_timeout;
        break;
    case failure::client_bad_body:
        reply.status = bhttp::status::bad_request;
        break;
    case failure::client_too_large:
        reply.status = bhttp::status::payload_too_large;
        break;
    case failure::client_gone:
        co_return result;
    default:
        reply.status = bhttp::status::bad_gateway;
        break;
    }
    // The request body may be partly unread: keep the connection only when it is all in.
    const bool keep_alive = a.client_keep_alive && a.parser.is_done() && !*a.draining;
    auto ec = co_await write_local_reply(a.client, reply, a.reply, keep_alive);
    result.status = static_cast<unsigned>(reply.status);
    result.keep_alive = keep_alive && !ec;
    co_return result;
}

} // namespace

awaitable<forward_result> forward(forward_args& a) {
    const auto start = clock_type::now();
    auto& req = a.parser.get();
    strip_hop_by_hop(req);
    a.scratch.lines.clear();
    append_forwarding_lines(req, a.peer, a.scratch.lines);
    req.erase(bhttp::field::expect);
    if (req.find(bhttp::field::host) == req.end()) {
        // HTTP/1.0 allows a request without Host; the HTTP/1.1 request we send does not.
        const auto& up = a.config.upstream;
        req.set(bhttp::field::host,
                up.port == 80 ? up.host : up.host + ":" + std::to_string(up.port));
    }
    req.version(11);
    req.keep_alive(true);

    const auto lease = a.relay_buffers.take();
    const relay_buffer buf(lease.data(), relay_buffer_size);
    upstream::connection_ptr conn;
    std::optional<response_parser> rp;
    failure f = failure::none;
    // A request without a body can be sent again after the upstream read failed; one with a
    // body only while the body is still unread, i.e. when the header write failed.
    const bool bodyless = a.parser.is_done();
    if (!bodyless) {
        f = co_await prefetch_body(a, buf);
    }
    for (int attempt = 0; f == failure::none; ++attempt) {
        f = co_await send_request(a, conn, buf, !bodyless, attempt == 0);
        if (f == failure::none) {
            f = co_await read_response_header(a, *conn, rp, attempt == 0 && bodyless);
        }
        if (f != failure::stale) {
            break;
        }
        // Only the first attempt can be stale; its retry goes on a new connection.
        close_connection(conn);
        f = attempt == 0 ? failure::none : failure::upstream;
    }
    if (f != failure::none) {
        close_connection(conn);
        auto result = co_await answer_failure(a, f);
        result.upstream_time = std::chrono::duration_cast<milliseconds>(clock_type::now() - start);
        co_return result;
    }

    const bool upstream_keep_alive = rp->keep_alive() && !rp->need_eof();
    forward_result result;
    result.status = rp->get().result_int();
    result.keep_alive = prepare_response(a, *rp);
    f = co_await relay_response(a, *conn, *rp, buf);
    result.upstream_time = std::chrono::duration_cast<milliseconds>(clock_type::now() - start);
    if (f != failure::none) {
        // The response has started (or the client left): the only honest end is to close.
        close_connection(conn);
        result.keep_alive = false;
        co_return result;
    }
    if (upstream_keep_alive && rp->is_done() && !*a.draining) {
        a.pool.release(std::move(conn), a.config.upstream);
    } else {
        close_connection(conn);
    }
    co_return result;
}

} // namespace sluice::http::detail
