// SPDX-License-Identifier: Apache-2.0
// The message reader: Beast's read algorithms as one loop over the stream's own reads, and the
// request header's. The coroutines live here, apart from the parsing they call
// (message_parse.cpp, request_checks.cpp), which a fuzzer builds on its own.
#include "http/message_reader.hpp"

#include "http/header_block_detail.hpp"
#include "sluice/http/response_parser.hpp"

#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>

namespace sluice::http::detail {
namespace {

/// What a failed read means for the message: stream_ended's answer to the end of the stream.
template <typename Parser>
error_code read_failed(const error_code& ec, Parser& parser) {
    return ec == net::error::eof ? stream_ended(parser) : ec;
}

/// Where the next read goes.
net::mutable_buffer read_room(beast::flat_buffer& buffer) {
    return buffer.prepare(beast::read_size(buffer, 65536));
}

} // namespace

template <typename Parser>
awaitable<error_code> read_message(timed_stream& stream,
                                   beast::flat_buffer& buffer,
                                   Parser& parser,
                                   bool header_only,
                                   const chunk_limits& limits,
                                   first_read first) {
    for (bool untried = first == first_read::untried && buffer.size() == 0;; untried = false) {
        if (auto parsed = parse_buffered(buffer, parser, header_only, limits)) {
            co_return *parsed;
        }
        const auto room = read_room(buffer);
        auto [ec, n] = untried ? co_await stream.async_read_reply(room)
                               : co_await stream.async_read_some(room);
        buffer.commit(n);
        if (ec) {
            co_return read_failed(ec, parser);
        }
    }
}

awaitable<error_code> read_header(timed_stream& stream,
                                  beast::flat_buffer& buffer,
                                  request_parser& parser,
                                  std::uint64_t limit,
                                  std::string* copy) {
    header_progress progress;
    std::optional<error_code> ec;
    // Empty lines are taken out only before the request's first byte (nothing scanned yet).
    while ((progress.scanned == 0 && take_empty_lines(buffer)) ||
           !(ec = check_header_block(buffer, limit, progress))) {
        const auto room = std::clamp<std::uint64_t>(limit + 4 - buffer.size(), 512, 16 * 1024);
        auto [read_ec, n] = co_await stream.async_read_some(buffer.prepare(room));
        buffer.commit(n);
        if (read_ec == net::error::eof) {
            co_return bhttp::error::partial_message;
        }
        if (read_ec) {
            co_return read_ec;
        }
    }
    if (*ec) {
        co_return *ec;
    }
    auto parse_ec = parse_header(buffer, parser, progress.scanned, copy);
    if (parse_ec == bhttp::error::need_more) {
        // Only if our blank-line scan and Beast disagree; let Beast read and decide.
        parse_ec = co_await read_message(stream, buffer, parser, true, chunk_limits{});
    }
    co_return parse_ec;
}

template awaitable<error_code> read_message(
    timed_stream&, beast::flat_buffer&, request_parser&, bool, const chunk_limits&, first_read);
template awaitable<error_code> read_message(
    timed_stream&, beast::flat_buffer&, response_parser&, bool, const chunk_limits&, first_read);

} // namespace sluice::http::detail
