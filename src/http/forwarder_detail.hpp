// SPDX-License-Identifier: Apache-2.0
#pragma once

// Pieces of the forwarder shared by forwarder.cpp (the request's side) and response_relay.cpp
// (the response's side).

#include "http/forwarder.hpp"
#include "http/message_reader.hpp"
#include "http/message_writer.hpp"

#include <optional>
#include <span>
#include <string_view>

namespace sluice::http::detail {

using relay_buffer = std::span<char, relay_buffer_size>;

/// Points the parser's body block at the whole of `buf`, for it to fill.
inline void open_block(bhttp::buffer_body::value_type& body, const relay_buffer& buf) noexcept {
    body.data = buf.data();
    body.size = buf.size();
}

/// Makes the body block what the parser filled of `buf` since `open_block`; `done`: the message
/// is (no more blocks follow).
inline void
close_block(bhttp::buffer_body::value_type& body, const relay_buffer& buf, bool done) noexcept {
    body.size = buf.size() - body.size;
    body.data = buf.data();
    body.more = !done;
}

/// Where an exchange failed, which decides the answer.
enum class failure {
    none,
    stale,                    // a reused connection failed before anything happened: retry once
    upstream_connect,         // no connection to the upstream: 502
    upstream,                 // write or read failed, or the answer was not HTTP: 502
    upstream_stopped_reading, // a write of the body failed, not by its timeout: an answer may
                              // have come first (`exchange` reads it)
    upstream_timeout,         // no response header, or no write of the request, in time: 504
    upstream_busy,            // upstream.max-connections in use for upstream.timeout: 503
    tunnels_full,             // a WebSocket upgrade at upstream.max-tunnels: 503
    client_gone,              // the client closed or stalled: close without a reply
    client_bad_body,          // the request body's framing is broken: 400, close
    client_too_large,         // the request body passed max_body_bytes: 413, close
    client_timeout, // the request body took longer than idle-timeout or body-timeout: 408, close
    interim,        // a 1xx response header came: pass it on, read the next one
};

/**
 * Sets up `rp` for the next response header. `first`: the first header of this request; it is
 * allocated from the request's arena. Any after an interim response come from the heap, so that
 * an upstream sending 1xx after 1xx cannot grow the arena, which frees only with the request.
 */
void start_response(forward_args& a, std::optional<response_parser>& rp, bool first);

/**
 * What a response header read came to: none (a final response, or a 101 that accepts WebSocket
 * for the request's `websocket_key`, empty when the request was no upgrade), interim (another
 * 1xx), stale (a reused connection closed before a byte came, and `retryable`),
 * upstream_timeout or upstream (a 101 otherwise too, and a status outside 100-599).
 */
failure judge_response_header(const error_code& ec,
                              response_parser& rp,
                              upstream::connection& conn,
                              bool retryable,
                              std::string_view websocket_key);

/// Passes a 1xx interim response (other than 100, which we answer ourselves) to the client,
/// rewriting `interim` (hop-by-hop and framing fields out). Returns false if the client is gone.
awaitable<bool> relay_interim(forward_args& a, response_head& interim);

/**
 * Rewrites the upstream's response header for the client: hop-by-hop fields out, rate-limit
 * headers in, framing fitted to the client's HTTP version. Returns the client keep-alive.
 */
bool prepare_response(forward_args& a, response_parser& rp);

/**
 * Whether the response's body, as it goes to the client, ends with the connection: a body
 * without a length to an HTTP/1.0 client, which knows no chunking. Such a body cut short looks
 * whole to the client if the connection ends with a FIN.
 */
bool ends_with_close(const forward_args& a, const response_parser& rp);

/**
 * Rewrites the upstream's 101 to WebSocket for the client: hop-by-hop fields out (its own
 * Upgrade and Connection among them), rate-limit headers in, then this hop's `Connection:
 * Upgrade` and `Upgrade: websocket`. The other fields (Sec-WebSocket-Accept, -Protocol,
 * -Extensions) pass as they came.
 */
void prepare_switch(forward_args& a, response_parser& rp);

class response_figures;

/**
 * Sends a prepared response to the client: the header with the body that came in with it in one
 * write, then the rest of the body, block by block, as it arrives. Each block, once written, goes
 * to `scan` too when there is one (the `json:` figures of cost-weighted limits).
 */
class response_relay {
public:
    response_relay(forward_args& a,
                   upstream::connection& conn,
                   response_parser& rp,
                   const relay_buffer& buf,
                   response_figures* scan);

    /**
     * The first write, without waiting: a small response goes out whole here, with no coroutine
     * frame for the relay. nullopt: more to do, co_await `run`.
     */
    std::optional<failure> start();

    /// Finishes the first write and streams the rest of the body.
    awaitable<failure> run();

private:
    // What follows the first write, once it is all out.
    std::optional<failure> after_first_write() const;

    forward_args& a_;
    upstream::connection& conn_;
    response_parser& rp_;
    const relay_buffer& buf_;
    response_figures* scan_;
    message_writer writer_;
    bool has_body_;
    /// The buffered part of the body was broken: the header goes, then the connection closes.
    bool broken_ = false;
    /// The first write did not go out at once.
    bool pending_ = false;
    /// The body block of the first write, for `scan_` once it is out.
    std::string_view first_block_;
};

} // namespace sluice::http::detail
