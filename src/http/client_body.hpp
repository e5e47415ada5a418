// SPDX-License-Identifier: Apache-2.0
#pragma once

// Reading a request's body from the client (client_body.cpp): the deadline of each read, the
// 100 Continue a client may wait for, what a failed read means, and the body read ahead into a
// buffered_body, which the limiter searches (`json:` fields) and the forwarder sends from
// (server.request-buffer-size); what of that needs no I/O is body_ahead.cpp's. The forwarder's
// streaming of the rest reads with the same deadline and meaning.

#include "http/buffered_body.hpp"
#include "http/message_types.hpp"
#include "sluice/config/config.hpp"
#include "sluice/io/timed_stream.hpp"

#include <boost/beast/core/flat_buffer.hpp>

#include <chrono>
#include <cstdint>
#include <optional>

namespace sluice::http::detail {

/// What reading a request body came to.
enum class body_read {
    done,        // read: all of it, or the first `max` bytes (the parser is not done)
    broken,      // its framing is broken: 400
    too_large,   // past server.max-body-size: 413
    too_slow,    // past server.idle-timeout or body-timeout: 408
    client_gone, // closed or failed: close
};

/// What a failed read of the body (`ec`, not need_buffer) means.
body_read body_read_of(const error_code& ec) noexcept;

/// The deadline of the client's next body read: server.idle-timeout, but never past the whole
/// body's server.body-timeout, counted from its first read (`started`, set by the first call).
/// A deadline per read alone would let a client that sends a byte now and then keep an
/// upstream connection forever.
std::chrono::milliseconds
body_read_timeout(const config::config& cfg,
                  std::optional<std::chrono::steady_clock::time_point>& started);

/// Answers Expect: 100-continue, since the client sends no body before it; false when the
/// write failed.
awaitable<bool> send_continue(timed_stream& client, const config::config& cfg);

/// The client side of a request whose body is read ahead.
struct body_source {
    timed_stream& client;
    beast::flat_buffer& client_buffer;
    request_parser& parser;
    const config::config& config;
    /// Answered (100 Continue) and cleared before the body is read.
    bool& expect_continue;
    /// Set at the first read; server.body-timeout counts from there, forwarding included.
    std::optional<std::chrono::steady_clock::time_point>& body_started;
};

/**
 * Reads the body of the request in `src.parser` (header read) into `body`, up to `max` bytes,
 * so that the limiter can look into it (`json:` fields) before anything goes upstream; the
 * forwarder then sends it from there. Bounded as forwarding is: server.max-body-size, the chunk
 * limits, idle-timeout per read and body-timeout for the whole body.
 */
awaitable<body_read> read_body_ahead(body_source src, buffered_body& body, std::uint64_t max);

// The steps of a body read ahead, shared by the read that waits (`read_body_ahead`) and the one
// that takes what is there (`take_body_ahead`).

/// Points the parser's buffer at the room after `body` for the next piece, never past `max`,
/// making room only when none is left; returns the size of the buffer given.
std::size_t make_body_room(request_parser& parser, buffered_body& body, std::uint64_t max);

/// Keeps what the parse put into the buffer `make_body_room` gave it (`given` bytes).
void keep_body_piece(request_parser& parser, buffered_body& body, std::size_t given);

/// Points the parser's buffer nowhere again (the forwarder points it at its own): done.
body_read end_body_ahead(request_parser& parser);

/// `read_body_ahead` for what the client buffer already holds, without reading (the usual case:
/// a small body came with its header); nullopt: more is to come (or a 100 Continue to send),
/// co_await `read_body_ahead`, which goes on from where this stopped. Spares a coroutine frame.
std::optional<body_read> take_body_ahead(body_source src, buffered_body& body, std::uint64_t max);

} // namespace sluice::http::detail
