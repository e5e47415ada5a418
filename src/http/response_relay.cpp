// SPDX-License-Identifier: Apache-2.0
// The forwarder's response side: the response header from the upstream, fitted for the client,
// and the body streamed after it.
#include "http/forwarder_detail.hpp"
#include "http/response_figures.hpp"
#include "sluice/http/forward_headers.hpp"
#include "sluice/http/rate_limit_headers.hpp"

#include <boost/beast/http/error.hpp>

#include <cerrno>
#include <memory>
#include <optional>
#include <sys/socket.h>

namespace sluice::http::detail {
namespace {

/**
 * Watches a client while its response is relayed: when it closes its side (or its connection
 * fails), the upstream exchange is cancelled at once, even while the upstream is silent, so that
 * a backend generating a stream for nobody stops. (Without it sluice noticed only at its next
 * write, which on a slow stream can be minutes later.) A client that sends more bytes (a
 * pipelined request) is there: the watch ends, the bytes stay unread in the socket.
 */
class client_watch {
public:
    client_watch(tcp_socket& client, tcp_socket& upstream)
        : client_(client)
        , state_(std::make_shared<state>(upstream)) {
        arm(client_, state_);
    }

    client_watch(const client_watch&) = delete;
    client_watch& operator=(const client_watch&) = delete;

    ~client_watch() {
        // The handler may still be queued: it sees `over` and touches nothing else.
        state_->over = true;
        error_code ignored;
        client_.cancel(ignored);
    }

    bool client_left() const noexcept { return state_->left; }

private:
    struct state {
        explicit state(tcp_socket& s) noexcept
            : upstream(s) {}

        tcp_socket& upstream;
        bool over = false;
        bool left = false;
    };

    static void arm(tcp_socket& client, const std::shared_ptr<state>& st) {
        client.async_wait(net::socket_base::wait_read, [&client, st](const error_code& ec) {
            if (st->over || ec == net::error::operation_aborted) {
                return;
            }
            char byte = 0;
            const auto n =
                ec ? -1 : ::recv(client.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
            if (n > 0) {
                return; // more from the client: it is there
            }
            if (n < 0 && !ec && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
                arm(client, st);
                return;
            }
            st->left = true;
            error_code ignored;
            st->upstream.cancel(ignored);
        });
    }

    tcp_socket& client_;
    std::shared_ptr<state> state_;
};

// The fields that frame a body.
bool is_framing_field(bhttp::field name) {
    return name == bhttp::field::content_length || name == bhttp::field::transfer_encoding;
}

bool carries_body(const forward_args& a, const response_parser& rp) {
    const auto status = rp.head().status;
    return !a.reply.head && status != 204 && status != 304;
}

body_framing response_framing(const forward_args& a, const response_parser& rp) {
    if (!carries_body(a, rp)) {
        return body_framing::none;
    }
    return rp.head().chunked() ? body_framing::chunked : body_framing::raw;
}

} // namespace

void start_response(forward_args& a, std::optional<response_parser>& rp, bool first) {
    rp.emplace(first ? a.arena.allocator().resource() : std::pmr::new_delete_resource());
    rp->body_limit(boost::none);
    rp->header_limit(header_limit_of(a.config.upstream.max_header_bytes));
    rp->skip(a.reply.head);
}

failure judge_response_header(const error_code& ec,
                              response_parser& rp,
                              upstream::connection& conn,
                              bool retryable,
                              std::string_view websocket_key) {
    if (ec == beast::error::timeout) {
        return failure::upstream_timeout;
    }
    if (ec) {
        const bool nothing_came = !rp.got_some() && conn.buffer.size() == 0;
        return retryable && conn.reused && nothing_came ? failure::stale : failure::upstream;
    }
    const auto status = rp.head().status;
    if (status < 100 || status > 599) {
        // Beast takes any three digits, but RFC 9110 15 makes only 100-599 status codes. Below
        // 100 is neither final nor interim: relayed as either, it would leave the client
        // reading the rest of the exchange out of step.
        return failure::upstream;
    }
    if (status == 101) {
        // Only to the protocol asked for, and only when asked: a client that did not ask would
        // get bytes of a protocol it does not speak.
        return !websocket_key.empty() && accepts_websocket(rp.head(), websocket_key)
                   ? failure::none
                   : failure::upstream;
    }
    return status >= 200 ? failure::none : failure::interim;
}

awaitable<bool> relay_interim(forward_args& a, response_head& interim) {
    if (a.reply.version < 11 || interim.status == 100) {
        co_return true; // HTTP/1.0 knows no 1xx
    }
    // Written from the head as it came, as a final response's is: by number and reason (Beast
    // names no status it does not know, 103 Early Hints say), and each field whatever its
    // length, within upstream.max-header-size (Beast's fields throw std::length_error for a
    // value of 65,534 bytes or more: a 103's long Link field escaped the request's coroutine).
    interim.remove_if([](const head_field& f) {
        return is_framing_field(f.name()); // a 1xx has no body (RFC 9110 8.6, RFC 9112 6.1)
    });
    strip_hop_by_hop(interim);
    interim.version = 11;
    message_writer writer(interim, body_framing::none, a.scratch.header, {});
    a.client.expires_after(a.config.server.idle_timeout);
    error_code ec;
    if (!writer.write_now(a.client, {}, true, ec)) {
        ec = co_await writer.finish(a.client);
    }
    co_return !ec;
}

namespace {

// The first rewriting of every response header: hop-by-hop fields out, the rate-limit lines
// into scratch.lines.
void strip_and_add_limits(forward_args& a, response_head& res) {
    strip_hop_by_hop(res);
    a.scratch.lines.clear();
    if (a.reply.limits.decision != nullptr) {
        append_rate_limit_lines(res,
                                a.scratch.lines,
                                a.reply.limits.name,
                                as_of_now(a.reply.limits),
                                a.reply.limits.x_ratelimit);
    }
}

} // namespace

void prepare_switch(forward_args& a, response_parser& rp) {
    auto& res = rp.head();
    strip_and_add_limits(a, res);
    // No framing: what follows is the new protocol's, as after a 1xx (relay_interim).
    res.remove_if([](const head_field& f) { return is_framing_field(f.name()); });
    res.version = 11; // an upgrade is asked only over HTTP/1.1
    a.scratch.lines += "Connection: Upgrade\r\nUpgrade: websocket\r\n";
}

bool prepare_response(forward_args& a, response_parser& rp) {
    auto& res = rp.head();
    strip_and_add_limits(a, res);
    // A response that came before the request's body was all read (forwarder.cpp `exchange`):
    // the rest of the body would be read as the next request.
    bool keep_alive = a.client_keep_alive && !*a.draining && a.parser.is_done();
    const bool http11 = a.reply.version >= 11;
    res.version = http11 ? 11 : 10;
    if (res.status == 204) {
        // A 204 has no body, and is sent with no Content-Length or Transfer-Encoding (RFC 9110
        // 8.6, RFC 9112 6.1): a client that took one for a body's framing would wait for bytes
        // that never come. nginx takes them out too.
        res.remove_if([](const head_field& f) { return is_framing_field(f.name()); });
    } else if (const auto length = rp.content_length()) {
        // Beast's parser takes a list of equal values ("5, 5", or 5 on two lines) as that one
        // length, and refuses values that differ (a 502). A proxy must then send the one value
        // (RFC 9112 6.3): a client, or a cache beyond it, may refuse the list, or read the two
        // lines otherwise, and frame the body otherwise than sluice did.
        res.set_single_content_length(*length);
    }
    if (ends_with_close(a, rp)) {
        // HTTP/1.0 knows no chunking: the body ends when we close.
        res.set_chunked(false);
        keep_alive = false;
    } else if (carries_body(a, rp) && !rp.content_length()) {
        // Chunked or ended by the upstream's close: chunk it for HTTP/1.1, which keeps the
        // connection.
        res.set_chunked(true);
    }
    // strip_hop_by_hop removed every Connection field: say only what differs from the version's
    // default, as fields::keep_alive would, without it searching and rewriting the fields.
    if (keep_alive != http11) {
        a.scratch.lines += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
    }
    return keep_alive;
}

bool ends_with_close(const forward_args& a, const response_parser& rp) {
    return a.reply.version < 11 && carries_body(a, rp) && !rp.content_length();
}

response_relay::response_relay(forward_args& a,
                               upstream::connection& conn,
                               response_parser& rp,
                               const relay_buffer& buf,
                               response_figures* scan)
    // The rate-limit fields, made by `prepare_response`, are in scratch.lines.
    : a_(a)
    , conn_(conn)
    , rp_(rp)
    , buf_(buf)
    , scan_(scan)
    , writer_(rp.head(), response_framing(a, rp), a.scratch.header, a.scratch.lines)
    , has_body_(carries_body(a, rp)) {}

std::optional<failure> response_relay::start() {
    std::string_view block;
    if (has_body_) {
        // The part of the body that came in with the header, parsed without reading, goes out
        // with it in one write. A body broken in its buffered part still gets the header
        // first, as a later break would.
        open_block(rp_.body(), buf_);
        broken_ =
            static_cast<bool>(parse_buffered_body(conn_.buffer, rp_, chunk_limits_of(a_.config)));
        close_block(rp_.body(), buf_, rp_.is_done());
        block = {buf_.data(), broken_ ? 0 : rp_.body().size};
    }
    first_block_ = block;
    a_.client.expires_after(a_.config.server.idle_timeout);
    error_code ec;
    if (!writer_.write_now(a_.client, block, !has_body_ || (!broken_ && !rp_.body().more), ec)) {
        pending_ = true;
        return std::nullopt;
    }
    if (ec) {
        return failure::client_gone;
    }
    return after_first_write();
}

std::optional<failure> response_relay::after_first_write() const {
    if (scan_ != nullptr) {
        scan_->feed(first_block_);
    }
    if (!has_body_ || (!broken_ && !rp_.body().more)) {
        return failure::none;
    }
    if (broken_) {
        return failure::upstream; // the response has started: close
    }
    return std::nullopt;
}

awaitable<failure> response_relay::run() {
    if (pending_) {
        const auto ec = co_await writer_.finish(a_.client);
        if (ec) {
            co_return failure::client_gone;
        }
        if (const auto done = after_first_write()) {
            co_return *done;
        }
    }
    auto& body = rp_.body();
    // No deadline on the client between writes (each write sets its own): the watchdog of one
    // that passed while the upstream was silent cancelled the watch's wait, which was not armed
    // again, and a client that left then was noticed only at the upstream's next piece
    // (upstream.timeout longer than server.idle-timeout, a stream of rare events).
    a_.client.expires_never();
    // Only once the request is all in: before that, the client's bytes are its body.
    std::optional<client_watch> watch;
    if (a_.parser.is_done()) {
        watch.emplace(a_.client.socket(), conn_.stream.socket());
    }
    const auto limits = chunk_limits_of(a_.config);
    for (;;) {
        do {
            open_block(body, buf_);
            conn_.stream.expires_after(a_.config.upstream.timeout);
            auto rec = co_await read_message(conn_.stream, conn_.buffer, rp_, false, limits);
            if (!rec) {
                // What came with that piece joins it, without I/O: one write for all of it.
                rec = parse_buffered_body(conn_.buffer, rp_, limits);
            }
            close_block(body, buf_, rp_.is_done());
            if (rec && rec != bhttp::error::need_buffer) {
                if (watch && watch->client_left()) {
                    co_return failure::client_gone;
                }
                co_return failure::upstream; // mid-body: the response has started, close
            }
        } while (body.size == 0 && body.more);
        a_.client.expires_after(a_.config.server.idle_timeout);
        error_code ec;
        if (!writer_.write_now(a_.client, {buf_.data(), body.size}, !body.more, ec)) {
            ec = co_await writer_.finish(a_.client);
        }
        if (ec) {
            co_return failure::client_gone;
        }
        a_.client.expires_never();
        if (scan_ != nullptr) {
            scan_->feed({buf_.data(), body.size});
        }
        if (!body.more) {
            co_return failure::none;
        }
    }
}

} // namespace sluice::http::detail
