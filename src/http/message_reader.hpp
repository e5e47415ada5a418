// SPDX-License-Identifier: Apache-2.0
#pragma once

// Reading HTTP messages: the request header, and whole messages through one loop over the
// stream's own reads (message_reader.cpp), over parsing that does no I/O (message_parse.cpp).

#include "http/message_types.hpp"
#include "sluice/config/config.hpp"
#include "sluice/io/timed_stream.hpp"

#include <boost/beast/core/flat_buffer.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace sluice::http {
class response_parser;
} // namespace sluice::http

namespace sluice::http::detail {

// The functions below that take a `Parser` are built for the two sluice reads with:
// request_parser (message_types.hpp) and response_parser (sluice/http/response_parser.hpp).

/**
 * Bounds on what a chunked body makes sluice hold before Beast can parse it: Beast 1.81 waits
 * for a chunk-size line's end, and for the end of the trailer section, with no limit of its own.
 */
struct chunk_limits {
    /// A chunk-size line with its extensions, CRLF excluded.
    std::uint64_t line = 4 * 1024;
    /// The trailer section after the last chunk, its blank line excluded. It also bounds the
    /// number of trailer fields (at least three bytes each), so parsing them takes no time.
    std::uint64_t trailer = 16 * 1024;
};

/// The chunk limits of `cfg` (server.max-chunk-header-size, server.max-trailer-size), for
/// requests and upstream responses alike.
chunk_limits chunk_limits_of(const config::config& cfg);

/// A header limit from the configuration (server.max-header-size, upstream.max-header-size) as
/// Beast's parser takes it, in 32 bits: one beyond them saturates, the most it can be told.
std::uint32_t header_limit_of(std::uint64_t bytes);

/**
 * One `put` of what `buffer` holds, consuming what it parsed; returns Beast's error (need_more,
 * need_buffer...). Unlike a bare put it throws nothing (Beast's std::length_error for a field
 * value over 65,535 bytes becomes header_limit), and in a chunked body it holds to `limits`:
 * bad_chunk_extension for a longer chunk-size line, header_limit for a larger trailer section.
 */
template <typename Parser>
error_code put_buffered(beast::flat_buffer& buffer, Parser& parser, const chunk_limits& limits);

/**
 * Reads until `buffer` holds a complete request header (its blank line), within `limit` bytes
 * (bhttp::error::header_limit otherwise), refuses obsolete line folding
 * (bhttp::error::bad_value), then parses the header into `parser` and consumes it from the
 * buffer. Unless `copy` is null, the header's bytes as they came are copied there (empty when
 * it was not parsed from exactly them): what a request held without its memory is parsed
 * again from (request_handler.cpp). The caller sets the stream's deadline.
 */
awaitable<error_code> read_header(timed_stream& stream,
                                  beast::flat_buffer& buffer,
                                  request_parser& parser,
                                  std::uint64_t limit,
                                  std::string* copy = nullptr);

/**
 * `read_header` for a header already in `buffer` (the usual case: it came in one read), without
 * reading: nullopt when it is not all there, and `read_header` must read on. Spares a coroutine
 * frame per request.
 */
std::optional<error_code> take_header(beast::flat_buffer& buffer,
                                      request_parser& parser,
                                      std::uint64_t limit,
                                      std::string* copy = nullptr);

/// How `read_message` starts its first read.
enum class first_read {
    tried,   // as any read: Asio tries the socket before it waits
    untried, // the reply to a request written in this turn of the event loop: it waits at once
             // (timed_stream::async_read_reply)
};

/**
 * Beast's http::async_read_some (`header_only` false) and http::async_read_header (true) on a
 * timed_stream, without their composed operations: parses what `buffer` holds first, and reads
 * only when the parser needs more; a parse of buffered bytes completes here, with no read and
 * no trip through the scheduler. Errors as Beast's (need_buffer when a buffer_body is full;
 * end_of_stream when the stream ends before a message starts) and `put_buffered`'s: the buffer
 * never holds more than a header, a chunk header or a trailer within its limit, plus one read.
 * The caller sets the deadline.
 */
template <typename Parser>
awaitable<error_code> read_message(timed_stream& stream,
                                   beast::flat_buffer& buffer,
                                   Parser& parser,
                                   bool header_only,
                                   const chunk_limits& limits,
                                   first_read first = first_read::tried);

/// What the end of the stream means for the message `parser` reads: end_of_stream when it
/// ended before a message began, else the parser's put_eof (the end of a body read to it, or a
/// truncated message: partial_message).
template <typename Parser>
error_code stream_ended(Parser& parser);

/// One parse of what `buffer` holds (read_message's step without I/O, message_parse.cpp);
/// nullopt: the parser needs more bytes.
template <typename Parser>
std::optional<error_code> parse_buffered(beast::flat_buffer& buffer,
                                         Parser& parser,
                                         bool header_only,
                                         const chunk_limits& limits);

/**
 * Parses the rest of what `buffer` holds into the parser's body block (its buffer_body, from
 * where it points, up to its size), piece after piece, without reading: until the buffer is
 * empty, the message is done or the block is full. One put parses one piece, and a body of
 * one-byte chunks made a block, and a write (a TCP segment, with TCP_NODELAY), per byte: 2,000
 * such chunks sent in one write went on in 2,001 writes, now 12, one per read. Returns
 * put_buffered's error; need_more and need_buffer (more to read, a full block) are none.
 */
template <typename Parser>
error_code
parse_buffered_body(beast::flat_buffer& buffer, Parser& parser, const chunk_limits& limits);

} // namespace sluice::http::detail
