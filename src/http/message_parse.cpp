// SPDX-License-Identifier: Apache-2.0
// Parsing what a connection's buffer holds, bounded and throwing nothing: every parse of a
// message sluice reads goes through put_buffered. No coroutine here, so that the request_head
// fuzzer can build this file with every sanitizer (clang 14 cannot build a coroutine with UBSan).
#include "http/message_reader.hpp"
#include "sluice/http/response_parser.hpp"

#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string_view>

namespace sluice::http::detail {
namespace {

// The most bytes of a chunked body one put is given: a chunk-size line, the CRLF before and after
// it, and a trailer section with its blank line. Beast buffers neither the line nor the trailer
// incrementally; it waits for their ends, so what it is given is what it may have to hold.
std::size_t chunk_window(const chunk_limits& limits) {
    return static_cast<std::size_t>(limits.line + limits.trailer + 6);
}

// The bytes of a chunk header that Beast will parse: without the CRLF that ends the previous
// chunk's data, which Beast counts as part of the next header.
std::string_view without_chunk_end(std::string_view data) {
    return data.rfind("\r\n", 0) == 0 ? data.substr(2) : data;
}

// Whether a chunk-size line (the CRLF before it taken off) is the last chunk's: a size of
// zeros ("last-chunk = 1*("0") [ chunk-ext ] CRLF", RFC 9112 7.1).
bool is_last_chunk_line(std::string_view line) {
    const auto digits = line.substr(0, line.find_first_not_of("0123456789abcdefABCDEF"));
    return !digits.empty() && digits.find_first_not_of('0') == std::string_view::npos;
}

// Whether the chunk-size line `data` begins with (after the CRLF that ends the previous chunk's
// data) has ended and is longer than the limit, hex digits and leading zeros included.
bool ended_chunk_line_over_limit(std::string_view data, const chunk_limits& limits) {
    const auto end = without_chunk_end(data).find("\r\n");
    return end != std::string_view::npos && end > limits.line;
}

// What a chunked body that the parser needs more of holds unparsed: a chunk-size line not yet
// ended (bad_chunk_extension once it is longer than the limit), or the last chunk's line and a
// trailer section not yet ended (header_limit once that is longer than the limit). A line ends
// at its CRLF, as for Beast: a bare LF is one more byte of the line (taken for a line's end, it
// made the bytes after it a trailer, so that the same body was refused in pieces by the trailer
// limit, 400, and whole by the chunk's size, 413: the request_body fuzz target found it).
error_code check_unparsed(std::string_view data, const chunk_limits& limits) {
    data = without_chunk_end(data);
    const auto eol = data.find("\r\n");
    if (eol == std::string_view::npos) {
        // The line may yet end within the limit only if what it holds so far, but for a CR
        // that its LF may follow, is within it.
        return data.size() > limits.line + 1 ? error_code(bhttp::error::bad_chunk_extension)
                                             : error_code{};
    }
    if (eol > limits.line) {
        return bhttp::error::bad_chunk_extension;
    }
    // A complete line and still not enough: the last chunk, waiting for its trailer to end.
    // Beast takes any other chunk's line at once when it has its CRLF; it waits past one only
    // for an extension it reads on across the line's end (a quoted string with the CRLF in
    // it), which is broken. (Beast 1.81 also charges the chunk's size to the body limit each
    // time it waits so, and the same bytes would get 413 or 400 depending on how they came:
    // the request_body fuzz target found it.)
    if (!is_last_chunk_line(data.substr(0, eol))) {
        return bhttp::error::bad_chunk_extension;
    }
    return data.size() - eol - 2 > limits.trailer + 2 ? error_code(bhttp::error::header_limit)
                                                      : error_code{};
}

// The same bound on a trailer section that came in whole, in `parsed` (what the put that ended
// the message consumed: the last chunk's line, the trailer, the blank line).
error_code check_trailer(std::string_view parsed, const chunk_limits& limits) {
    parsed = without_chunk_end(parsed);
    const auto eol = parsed.find("\r\n");
    if (eol == std::string_view::npos) {
        return {};
    }
    return parsed.size() - eol - 2 > limits.trailer + 2 ? error_code(bhttp::error::header_limit)
                                                        : error_code{};
}

} // namespace

template <typename Parser>
error_code put_buffered(beast::flat_buffer& buffer, Parser& parser, const chunk_limits& limits) {
    std::string_view data(static_cast<const char*>(buffer.data().data()), buffer.size());
    // In a chunked body, Beast is given no more than one chunk header and trailer may take, so
    // that a trailer of a million tiny fields cannot arrive whole and keep the worker parsing.
    const bool chunks = parser.is_header_done() && parser.chunked();
    if (chunks) {
        data = data.substr(0, chunk_window(limits));
    }
    error_code ec;
    std::size_t used = 0;
    try {
        used = parser.put(net::buffer(data.data(), data.size()), ec);
    } catch (const std::length_error&) {
        // Beast keeps a field's length in 16 bits and throws beyond 65,535 bytes. Nothing a
        // peer sends may escape as an exception: it is a field too large, like any other.
        ec = bhttp::error::header_limit;
        used = 0;
    }
    // Beast parses a chunk-size line of any length once its CRLF is there, and judges the size
    // it gives (against the body limit, say) then: a line over the limit is refused as such, as
    // check_unparsed refuses it when it comes in pieces. A put that parsed a chunk header, or
    // was refused (only a chunk header or the trailer after the last one can be), began with
    // that line: without the eager option, one put parses one piece.
    const bool parsed_chunk_header = parser.take_chunk_header();
    if (chunks && ec != bhttp::error::need_more && ec != bhttp::error::need_buffer &&
        (ec || parsed_chunk_header) && ended_chunk_line_over_limit(data, limits)) {
        ec = bhttp::error::bad_chunk_extension;
    }
    if (chunks && ec == bhttp::error::need_more) {
        if (const auto bad = check_unparsed(data, limits)) {
            ec = bad;
        } else if (data.size() == chunk_window(limits)) {
            // Beast had the whole window and still waits for a line's end: what it waits for
            // lies beyond the limits, however check_unparsed read the lines (a bare LF, which
            // Beast does not take for a line's end, once let such a body grow without bound).
            ec = bhttp::error::header_limit;
        }
    } else if (chunks && !ec && parser.is_done()) {
        ec = check_trailer(data.substr(0, used), limits);
    }
    buffer.consume(used);
    return ec;
}

template <typename Parser>
std::optional<error_code> parse_buffered(beast::flat_buffer& buffer,
                                         Parser& parser,
                                         bool header_only,
                                         const chunk_limits& limits) {
    if (buffer.size() == 0) {
        return std::nullopt;
    }
    // Without the eager option, one put parses the header or one piece of the body.
    const auto ec = put_buffered(buffer, parser, limits);
    const bool more =
        ec == bhttp::error::need_more || (!ec && header_only && !parser.is_header_done());
    return more ? std::nullopt : std::optional(ec);
}

template <typename Parser>
error_code
parse_buffered_body(beast::flat_buffer& buffer, Parser& parser, const chunk_limits& limits) {
    error_code ec;
    // A full block is no stop: a put then still takes a chunk header, or the last chunk, and
    // the block goes out as the body's last rather than a write of the last chunk alone.
    while (buffer.size() != 0 && !parser.is_done()) {
        const auto before = buffer.size();
        ec = put_buffered(buffer, parser, limits);
        if (ec == bhttp::error::need_buffer || ec == bhttp::error::need_more) {
            return {};
        }
        if (ec || buffer.size() == before) {
            break;
        }
    }
    return ec;
}

template <typename Parser>
error_code stream_ended(Parser& parser) {
    if (!parser.got_some()) {
        return bhttp::error::end_of_stream;
    }
    error_code ec;
    parser.put_eof(ec);
    return ec;
}

chunk_limits chunk_limits_of(const config::config& cfg) {
    return {cfg.server.max_chunk_header_bytes, cfg.server.max_trailer_bytes};
}

std::uint32_t header_limit_of(std::uint64_t bytes) {
    return static_cast<std::uint32_t>(
        std::min<std::uint64_t>(bytes, std::numeric_limits<std::uint32_t>::max()));
}

template error_code put_buffered(beast::flat_buffer&, request_parser&, const chunk_limits&);
template error_code put_buffered(beast::flat_buffer&, response_parser&, const chunk_limits&);
template std::optional<error_code>
parse_buffered(beast::flat_buffer&, request_parser&, bool, const chunk_limits&);
template std::optional<error_code>
parse_buffered(beast::flat_buffer&, response_parser&, bool, const chunk_limits&);
template error_code parse_buffered_body(beast::flat_buffer&, request_parser&, const chunk_limits&);
template error_code parse_buffered_body(beast::flat_buffer&, response_parser&, const chunk_limits&);
template error_code stream_ended(request_parser&);
template error_code stream_ended(response_parser&);

} // namespace sluice::http::detail
