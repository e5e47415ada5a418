// SPDX-License-Identifier: Apache-2.0
#include "http/client_body.hpp"

#include "http/message_reader.hpp"
#include "sluice/http/worker_context.hpp"

#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>

namespace sluice::http::detail {
namespace {

// Makes room at the end of `body` for the next piece of a body read ahead and points the
// parser's buffer at it: no more than the body has left when its length is known (no zero-filled
// block for a small body), otherwise doubling, from 4 KiB to a relay buffer a step; never past
// `max`. Returns the size it had.
std::size_t make_room(request_parser& parser, buffered_body& body, std::uint64_t max) {
    std::uint64_t room = std::min<std::uint64_t>(max - body.size(), relay_buffer_size);
    if (const auto left = parser.content_length_remaining()) {
        room = std::min<std::uint64_t>(room, std::max<std::uint64_t>(*left, 1));
    } else {
        room = std::min<std::uint64_t>(room, std::max<std::size_t>(body.size(), 4096));
    }
    const auto had = body.size();
    body.resize(had + static_cast<std::size_t>(room));
    auto& b = parser.get().body();
    b.data = body.data() + had;
    b.size = static_cast<std::size_t>(room);
    return had;
}

// Keeps what the parse put into the room `make_room` made.
void keep_piece(request_parser& parser, buffered_body& body, std::size_t had) {
    body.resize(had + (body.size() - had - parser.get().body().size));
}

// The parser's buffer pointed nowhere again: the forwarder points it at its own.
body_read done_ahead(request_parser& parser) {
    auto& b = parser.get().body();
    b.data = nullptr;
    b.size = 0;
    return body_read::done;
}

} // namespace

body_read body_read_of(const error_code& ec) noexcept {
    if (ec == beast::error::timeout) {
        return body_read::too_slow;
    }
    if (ec == bhttp::error::body_limit) {
        return body_read::too_large;
    }
    // Beast's parse errors, but for the ends of the stream, which say the client went.
    const bool parse_error =
        ec.category() == bhttp::make_error_code(bhttp::error::bad_chunk).category() &&
        ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
    return parse_error ? body_read::broken : body_read::client_gone;
}

std::chrono::milliseconds
body_read_timeout(const config::config& cfg,
                  std::optional<std::chrono::steady_clock::time_point>& started) {
    using std::chrono::milliseconds;
    const auto now = std::chrono::steady_clock::now();
    if (!started) {
        started = now;
    }
    const auto elapsed = std::chrono::duration_cast<milliseconds>(now - *started);
    const auto left = std::max(cfg.server.body_timeout - elapsed, milliseconds{0});
    return std::min(cfg.server.idle_timeout, left);
}

awaitable<bool> send_continue(timed_stream& client, const config::config& cfg) {
    static constexpr std::string_view continue_line = "HTTP/1.1 100 Continue\r\n\r\n";
    client.expires_after(cfg.server.idle_timeout);
    auto [ec, n] = co_await net::async_write(client, net::buffer(continue_line));
    co_return !ec;
}

std::optional<body_read> take_body_ahead(body_source src, buffered_body& body, std::uint64_t max) {
    if (src.expect_continue) {
        return std::nullopt; // the client sends nothing before its 100 Continue
    }
    const auto limits = chunk_limits_of(src.config);
    while (!src.parser.is_done() && body.size() < max) {
        const auto had = make_room(src.parser, body, max);
        const auto ec = parse_buffered(src.client_buffer, src.parser, false, limits);
        keep_piece(src.parser, body, had);
        if (!ec) {
            return std::nullopt; // more to read: read_body_ahead goes on from here
        }
        if (*ec && *ec != bhttp::error::need_buffer) {
            return body_read_of(*ec);
        }
    }
    return done_ahead(src.parser);
}

awaitable<body_read> read_body_ahead(body_source src, buffered_body& body, std::uint64_t max) {
    if (src.expect_continue) {
        src.expect_continue = false; // answered here: the forwarder must not answer it again
        const bool sent = co_await send_continue(src.client, src.config);
        if (!sent) {
            co_return body_read::client_gone;
        }
    }
    const auto limits = chunk_limits_of(src.config);
    while (!src.parser.is_done() && body.size() < max) {
        const auto had = make_room(src.parser, body, max);
        src.client.expires_after(body_read_timeout(src.config, src.body_started));
        const auto ec =
            co_await read_message(src.client, src.client_buffer, src.parser, false, limits);
        keep_piece(src.parser, body, had);
        if (ec && ec != bhttp::error::need_buffer) {
            co_return body_read_of(ec);
        }
    }
    co_return done_ahead(src.parser);
}

} // namespace sluice::http::detail
