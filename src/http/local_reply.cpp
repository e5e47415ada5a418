// SPDX-License-Identifier: Apache-2.0
#include "http/local_reply.hpp"

#include "http/message_reader.hpp"
#include "sluice/http/rate_limit_headers.hpp"

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <algorithm>
#include <array>
#include <chrono>

namespace sluice::http::detail {
namespace {

std::string_view error_word(bhttp::status status) {
    switch (status) {
    case bhttp::status::bad_request:
        return "bad_request";
    case bhttp::status::request_timeout:
        return "request_timeout";
    case bhttp::status::payload_too_large:
        return "payload_too_large";
    case bhttp::status::uri_too_long:
        return "uri_too_long";
    case bhttp::status::expectation_failed:
        return "expectation_failed";
    case bhttp::status::request_header_fields_too_large:
        return "header_too_large";
    case bhttp::status::too_many_requests:
        return "rate_limited";
    case bhttp::status::bad_gateway:
        return "bad_gateway";
    case bhttp::status::service_unavailable:
        return "unavailable";
    case bhttp::status::gateway_timeout:
        return "gateway_timeout";
    default:
        return "error";
    }
}

// How long a lingering close waits for the client to finish sending and close.
constexpr milliseconds linger_timeout{2'000};

} // namespace

bhttp::response<bhttp::string_body>
make_local_response(const local_reply& reply, const reply_context& context, bool keep_alive) {
    bhttp::response<bhttp::string_body> res{reply.status, context.version < 11 ? 10u : 11u};
    res.set(bhttp::field::content_type, "application/json");
    res.set(bhttp::field::cache_control, "no-store");
    if (reply.body.empty()) {
        res.body() = R"({"error":")";
        res.body() += error_word(reply.status);
        res.body() += R"("})";
    } else {
        res.body() = reply.body;
    }
    if (reply.retry_after > 0) {
        res.set(bhttp::field::retry_after, std::to_string(reply.retry_after));
    }
    if (context.limits.decision != nullptr) {
        set_rate_limit_headers(
            res, context.limits.name, as_of_now(context.limits), context.limits.x_ratelimit);
    }
    res.keep_alive(keep_alive);
    res.prepare_payload();
    return res;
}

limiter::decision as_of_now(const rate_limit_context& limits) noexcept {
    auto d = *limits.decision;
    if (limits.decided_at != coarse_clock::time_point{}) {
        // Less a tick: each reading lags the true time by up to a tick or two, so their
        // difference may exceed the time passed by one, and a reset stated early is a lie.
        const auto since =
            std::max(std::chrono::duration_cast<milliseconds>(
                         coarse_clock::now() - limits.decided_at - coarse_clock::resolution()),
                     milliseconds{0});
        d.reset_after = std::max(d.reset_after - since, milliseconds{0});
    }
    return d;
}

awaitable<error_code> write_local_reply(timed_stream& stream,
                                        const local_reply& reply,
                                        const reply_context& context,
                                        bool keep_alive) {
    auto res = make_local_response(reply, context, keep_alive);
    stream.expires_after(context.write_timeout);
    if (context.head) {
        // A response to HEAD has the headers of the full one and no body.
        bhttp::response_serializer<bhttp::string_body> sr{res};
        auto [ec, n] = co_await bhttp::async_write_header(stream, sr);
        co_return ec;
    }
    auto [ec, n] = co_await bhttp::async_write(stream, res);
    co_return ec;
}

awaitable<bool> discard_body(timed_stream& stream,
                             beast::flat_buffer& buffer,
                             request_parser& parser,
                             std::chrono::steady_clock::time_point deadline) {
    const auto length = parser.content_length();
    if (!length || *length > max_discard_bytes) {
        co_return parser.is_done();
    }
    std::array<char, 4096> scratch;
    stream.expires_at(deadline);
    while (!parser.is_done()) {
        parser.get().body().data = scratch.data();
        parser.get().body().size = scratch.size();
        // A known length (above): no chunk limits to hold to.
        const auto ec = co_await read_message(stream, buffer, parser, false, chunk_limits{});
        if (ec && ec != bhttp::error::need_buffer) {
            co_return false;
        }
    }
    co_return true;
}

awaitable<void> lingering_close(timed_stream& stream) {
    error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (!ec) {
        std::array<char, 4096> scratch;
        stream.expires_after(linger_timeout);
        for (;;) {
            auto [read_ec, n] = co_await stream.async_read_some(net::buffer(scratch));
            if (read_ec) {
                break;
            }
        }
    }
    stream.socket().close(ec);
}

} // namespace sluice::http::detail
