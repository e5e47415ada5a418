// SPDX-License-Identifier: Apache-2.0
// A request body read ahead from what the client's buffer holds, without I/O: client_body.cpp's
// reads go on from here. No coroutine in this file, so that the request_body fuzzer can build it
// with every sanitizer (clang 14 cannot build a coroutine with UBSan).
#include "http/client_body.hpp"
#include "http/message_reader.hpp"
#include "sluice/http/worker_context.hpp"

#include <boost/beast/http/error.hpp>

#include <algorithm>

namespace sluice::http::detail {

namespace {

// The room to add for the next pieces: no more than the body has left when its length is known
// (no zero-filled block for a small body), otherwise doubling, from 4 KiB to a relay buffer a
// step; never past `most`.
std::size_t room_step(request_parser& parser, const buffered_body& body, std::uint64_t most) {
    std::uint64_t step = std::min<std::uint64_t>(most, relay_buffer_size);
    if (const auto left = parser.content_length_remaining()) {
        step = std::min<std::uint64_t>(step, std::max<std::uint64_t>(*left, 1));
    } else {
        step = std::min<std::uint64_t>(step, std::max<std::size_t>(body.size(), 4096));
    }
    return static_cast<std::size_t>(step);
}

} // namespace

// The room is added only once what was made before is filled, so that what is zero-filled, in
// all, is the body and one step at most, however small its pieces: a chunk of one byte takes
// two parses (its size line, its data), and a room made for each parse was 64 KiB of memset
// per byte of body.
std::size_t make_body_room(request_parser& parser, buffered_body& body, std::uint64_t max) {
    const std::uint64_t most = max - body.size();
    if (body.room() == 0) {
        body.add_room(room_step(parser, body, most));
    }
    auto& b = parser.get().body();
    b.data = body.room_data();
    b.size = static_cast<std::size_t>(std::min<std::uint64_t>(body.room(), most));
    return b.size;
}

void keep_body_piece(request_parser& parser, buffered_body& body, std::size_t given) {
    body.fill(given - parser.get().body().size);
}

body_read end_body_ahead(request_parser& parser) {
    auto& b = parser.get().body();
    b.data = nullptr;
    b.size = 0;
    return body_read::done;
}

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

std::optional<body_read> take_body_ahead(body_source src, buffered_body& body, std::uint64_t max) {
    if (src.expect_continue) {
        return std::nullopt; // the client sends nothing before its 100 Continue
    }
    const auto limits = chunk_limits_of(src.config);
    while (!src.parser.is_done() && body.size() < max) {
        const auto given = make_body_room(src.parser, body, max);
        const auto ec = parse_buffered(src.client_buffer, src.parser, false, limits);
        keep_body_piece(src.parser, body, given);
        if (!ec) {
            return std::nullopt; // more to read: read_body_ahead goes on from here
        }
        if (*ec && *ec != bhttp::error::need_buffer) {
            return body_read_of(*ec);
        }
    }
    return end_body_ahead(src.parser);
}

} // namespace sluice::http::detail
