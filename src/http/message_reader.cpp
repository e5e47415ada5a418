// SPDX-License-Identifier: Apache-2.0
// The message reader: Beast's read algorithms as one loop over the stream's own reads.
#include "http/session_detail.hpp"

#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/error.hpp>

namespace sluice::http::detail {

template <bool isRequest>
std::optional<error_code> parse_buffered(beast::flat_buffer& buffer,
                                         bhttp::basic_parser<isRequest>& parser,
                                         bool header_only) {
    if (buffer.size() == 0) {
        return std::nullopt;
    }
    // Without the eager option, one put parses the header or one piece of the body.
    error_code ec;
    const auto used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    const bool more =
        ec == bhttp::error::need_more || (!ec && header_only && !parser.is_header_done());
    return more ? std::nullopt : std::optional(ec);
}

template <bool isRequest>
error_code read_failed(const error_code& ec, bhttp::basic_parser<isRequest>& parser) {
    if (ec != net::error::eof) {
        return ec;
    }
    if (!parser.got_some()) {
        return bhttp::error::end_of_stream;
    }
    // The end of a body that lasts until the connection closes, or a truncated message.
    error_code eof_ec;
    parser.put_eof(eof_ec);
    return eof_ec;
}

template <bool isRequest>
awaitable<error_code> read_message(timed_stream& stream,
                                   beast::flat_buffer& buffer,
                                   bhttp::basic_parser<isRequest>& parser,
                                   bool header_only) {
    for (;;) {
        if (auto parsed = parse_buffered(buffer, parser, header_only)) {
            co_return *parsed;
        }
        auto [ec, n] = co_await stream.async_read_some(read_room(buffer));
        buffer.commit(n);
        if (ec) {
            co_return read_failed(ec, parser);
        }
    }
}

net::mutable_buffer read_room(beast::flat_buffer& buffer) {
    return buffer.prepare(beast::read_size(buffer, 65536));
}

template std::optional<error_code>
parse_buffered(beast::flat_buffer&, bhttp::basic_parser<true>&, bool);
template std::optional<error_code>
parse_buffered(beast::flat_buffer&, bhttp::basic_parser<false>&, bool);
template error_code read_failed(const error_code&, bhttp::basic_parser<true>&);
template error_code read_failed(const error_code&, bhttp::basic_parser<false>&);
template awaitable<error_code>
read_message(timed_stream&, beast::flat_buffer&, bhttp::basic_parser<true>&, bool);
template awaitable<error_code>
read_message(timed_stream&, beast::flat_buffer&, bhttp::basic_parser<false>&, bool);

} // namespace sluice::http::detail
