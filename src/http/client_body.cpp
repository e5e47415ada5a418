// SPDX-License-Identifier: Apache-2.0
#include "http/client_body.hpp"

#include "http/message_reader.hpp"

#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>

namespace sluice::http::detail {

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
        const auto given = make_body_room(src.parser, body, max);
        src.client.expires_after(body_read_timeout(src.config, src.body_started));
        const auto ec =
            co_await read_message(src.client, src.client_buffer, src.parser, false, limits);
        keep_body_piece(src.parser, body, given);
        if (ec && ec != bhttp::error::need_buffer) {
            co_return body_read_of(ec);
        }
    }
    co_return end_body_ahead(src.parser);
}

} // namespace sluice::http::detail
