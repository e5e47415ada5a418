// SPDX-License-Identifier: Apache-2.0
#pragma once

// Pieces of the session shared by session.cpp, forwarder.cpp and local_reply.cpp.

#include "sluice/config/config.hpp"
#include "sluice/core/net.hpp"
#include "sluice/core/timed_stream.hpp"
#include "sluice/http/worker_context.hpp"
#include "sluice/limiter/decision.hpp"
#include "sluice/upstream/pool.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/status.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

namespace sluice::http::detail {

namespace bhttp = beast::http;
using std::chrono::milliseconds;

/// The fields of the messages sluice parses live in a per-request arena (`header_arena`): a
/// dozen fields per request would otherwise be a dozen mallocs and frees.
using header_allocator = std::pmr::polymorphic_allocator<char>;
using header_fields = bhttp::basic_fields<header_allocator>;
using request_parser = bhttp::request_parser<bhttp::buffer_body, header_allocator>;
using response_parser = bhttp::response_parser<bhttp::buffer_body, header_allocator>;

/**
 * The memory one request's headers (its own and its response's) are allocated from: a fixed
 * block that covers ordinary headers, then the heap. Nothing is freed before the arena goes, with
 * the request.
 */
class header_arena {
public:
    header_arena() noexcept
        : resource_(block_.data(), block_.size()) {}

    header_arena(const header_arena&) = delete;
    header_arena& operator=(const header_arena&) = delete;

    header_allocator allocator() noexcept { return &resource_; }

private:
    alignas(std::max_align_t) std::array<std::byte, 2048> block_;
    std::pmr::monotonic_buffer_resource resource_;
};

/// A parser whose fields come from `allocator`.
template <typename Parser>
void make_parser(std::optional<Parser>& parser, header_allocator allocator) {
    parser.emplace(std::piecewise_construct, std::make_tuple(), std::make_tuple(allocator));
}

/// A rejected request's unread body is read and dropped (keeping the connection) up to this
/// size; a larger or unknown one closes the connection instead.
inline constexpr std::uint64_t max_discard_bytes = 64 * 1024;

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

/**
 * One `put` of what `buffer` holds, consuming what it parsed; returns Beast's error (need_more,
 * need_buffer...). Unlike a bare put it throws nothing (Beast's std::length_error for a field
 * value over 65,535 bytes becomes header_limit), and in a chunked body it holds to `limits`:
 * bad_chunk_extension for a longer chunk-size line, header_limit for a larger trailer section.
 */
template <bool isRequest>
error_code put_buffered(beast::flat_buffer& buffer,
                        bhttp::basic_parser<isRequest>& parser,
                        const chunk_limits& limits);

/**
 * Reads until `buffer` holds a complete request header (its blank line), within `limit` bytes
 * (bhttp::error::header_limit otherwise), refuses obsolete line folding
 * (bhttp::error::bad_value), then parses the header into `parser` and consumes it from the
 * buffer. The caller sets the stream's deadline.
 */
awaitable<error_code> read_header(timed_stream& stream,
                                  beast::flat_buffer& buffer,
                                  request_parser& parser,
                                  std::uint64_t limit);

/**
 * `read_header` for a header already in `buffer` (the usual case: it came in one read), without
 * reading: nullopt when it is not all there, and `read_header` must read on. Spares a coroutine
 * frame per request.
 */
std::optional<error_code>
take_header(beast::flat_buffer& buffer, request_parser& parser, std::uint64_t limit);

/**
 * Beast's http::async_read_some (`header_only` false) and http::async_read_header (true) on a
 * timed_stream, without their composed operations: parses what `buffer` holds first, and reads
 * only when the parser needs more; a parse of buffered bytes completes here, with no read and
 * no trip through the scheduler. Errors as Beast's (need_buffer when a buffer_body is full;
 * end_of_stream when the stream ends before a message starts) and `put_buffered`'s: the buffer
 * never holds more than a header, a chunk header or a trailer within its limit, plus one read.
 * The caller sets the deadline.
 */
template <bool isRequest>
awaitable<error_code> read_message(timed_stream& stream,
                                   beast::flat_buffer& buffer,
                                   bhttp::basic_parser<isRequest>& parser,
                                   bool header_only,
                                   const chunk_limits& limits);

/// One parse of what `buffer` holds (read_message's step without I/O, message_parse.cpp);
/// nullopt: the parser needs more bytes.
template <bool isRequest>
std::optional<error_code> parse_buffered(beast::flat_buffer& buffer,
                                         bhttp::basic_parser<isRequest>& parser,
                                         bool header_only,
                                         const chunk_limits& limits);

/// The answer to a request whose header could not be read or parsed; nullopt: close without
/// one (the client left, or was idle). `got_some`: part of a header had arrived.
std::optional<bhttp::status> header_error_status(const error_code& ec, bool got_some);

/**
 * The checks Beast's parser leaves to us, on a parsed header: target length (414), exactly one
 * Host in HTTP/1.1 (400), a single plain Content-Length (400), Transfer-Encoding only as
 * HTTP/1.1 chunked (400), Expect only 100-continue (417). nullopt: the request is acceptable.
 */
std::optional<bhttp::status> check_request(const request_parser& parser, const config::config& cfg);

/// An absolute-form request target (RFC 9112 3.2.2) taken apart.
struct absolute_target {
    /// host[:port]; points into the target.
    std::string_view authority;
    /// The path and query, "/" when the path is empty.
    std::string origin_form;
};

/**
 * Splits an absolute-form `target` ("http://host[:port]/path?query", or https) into its authority
 * and origin-form. nullopt when it is not one, or an invalid one: another scheme, no host, user
 * info, characters no Host field may carry.
 */
std::optional<absolute_target> split_absolute_form(std::string_view target);

/**
 * Rewrites an absolute-form target to origin-form, its authority replacing every Host field, as
 * nginx does (RFC 9112 3.2.2: the authority wins); an upstream that is no proxy expects
 * origin-form. Other targets are left alone. False: an invalid absolute-form (a 400).
 */
bool rewrite_absolute_form(bhttp::request_header<header_fields>& req);

/// The rate-limit headers a response carries; `decision` null: none.
struct rate_limit_context {
    std::string_view name;
    const limiter::decision* decision = nullptr;
    bool x_ratelimit = false;
};

/// A response sluice makes itself (429, 4xx for bad requests, 502/503/504).
struct local_reply {
    bhttp::status status = bhttp::status::ok;
    /// JSON text; a default one names the status when empty.
    std::string body;
    /// Retry-After seconds, 0 for none.
    std::int64_t retry_after = 0;
};

/// The request-level facts a reply depends on.
struct reply_context {
    unsigned version = 11;
    bool head = false;
    rate_limit_context limits;
    milliseconds write_timeout{30'000};
};

/**
 * Writes `reply`, with `Connection: close` unless `keep_alive`. Returns the write's error.
 */
awaitable<error_code> write_local_reply(timed_stream& stream,
                                        const local_reply& reply,
                                        const reply_context& context,
                                        bool keep_alive);

/**
 * Reads and drops the rest of a request body, if it is small enough (`max_discard_bytes`, known
 * length) to be cheaper than a new connection. Returns true when the connection can carry
 * another request.
 */
awaitable<bool> discard_body(timed_stream& stream,
                             beast::flat_buffer& buffer,
                             request_parser& parser,
                             milliseconds timeout);

/**
 * Closes a connection after a final response without losing it: shut down the sending side,
 * then read and drop whatever the client still sends (a body we did not want) until it closes or
 * a short deadline passes. Closing with unread bytes would make the kernel send a RST, which can
 * destroy the response before the client reads it.
 */
awaitable<void> lingering_close(timed_stream& stream);

/// How a message's body is framed on the wire.
enum class body_framing {
    none,    // no body (HEAD, 204, 304, a bodyless request): the header only
    raw,     // the bytes as they are: Content-Length, or until the connection closes
    chunked, // each block as one chunk, then the last chunk
};

/**
 * Writes one HTTP message, header then body blocks, without Beast's serializer: the header is
 * flattened into one contiguous string, and each write is a single gather write of at most five
 * buffers (header, chunk size, block, CRLF, last chunk). A small response thus goes out in one
 * syscall, and no nested buffer sequence is walked on the way.
 */
class message_writer {
public:
    /**
     * Flattens `header` into `scratch`, whose capacity is reused from request to request, with
     * `extra_lines` (complete "Name: value\r\n" lines, e.g. forwarding or rate-limit fields)
     * after its own fields.
     */
    message_writer(const bhttp::header<true, header_fields>& header,
                   body_framing framing,
                   std::string& scratch,
                   std::string_view extra_lines);
    message_writer(const bhttp::header<false, header_fields>& header,
                   body_framing framing,
                   std::string& scratch,
                   std::string_view extra_lines);

    /**
     * Writes the header (on the first call only) and `block`, as much as the socket takes at
     * once; `last`: the body ends with this block (a chunked body then gets its last chunk).
     * Returns true when done, with the write's error in `ec`; false when the socket was full and
     * the rest needs `finish`. Two steps rather than one coroutine because the first almost
     * always does it all, and a coroutine would cost a frame even then.
     *
     * The caller keeps `block` alive until done, and sets the stream's deadline for `finish`.
     */
    bool write_now(timed_stream& stream, std::string_view block, bool last, error_code& ec);

    /// Writes what `write_now` left; returns the write's error.
    awaitable<error_code> finish(timed_stream& stream);

private:
    std::string& header_;
    body_framing framing_;
    bool header_sent_ = false;
    /// The current chunk's size line: hexadecimal digits and CRLF.
    std::array<char, 24> chunk_size_{};
    /// What the current write still has to send: pending_[first_, count_).
    std::array<net::const_buffer, 5> pending_;
    std::size_t first_ = 0;
    std::size_t count_ = 0;
};

/// Strings a connection builds message headers in, kept so that their capacity is reused.
struct header_scratch {
    /// The flattened header (`message_writer`).
    std::string header;
    /// Fields added to a forwarded message, as header lines.
    std::string lines;
};

/// What the forwarder saw of the upstream: what the upstream metrics count.
enum class upstream_outcome {
    response,       // the upstream answered: its status went to the client (maybe cut short)
    connect_failed, // no connection could be made: 502
    failed,         // the connection broke, or the answer was not HTTP: 502
    timed_out,      // no response header within upstream.timeout: 504
    busy,           // upstream.max-connections in use for upstream.timeout: 503, nothing sent
    client_failed,  // the client failed first (a broken or too large body: 400/413, or it left):
                    // nothing to say about the upstream
};

/// What forwarding a request came to.
struct forward_result {
    /// The status the client got; 0 when it got none.
    unsigned status = 0;
    /// The client connection may carry another request.
    bool keep_alive = false;
    upstream_outcome upstream = upstream_outcome::client_failed;
    /// From the start of forwarding to the end of the response.
    milliseconds upstream_time{-1};
};

/// Everything `forward` needs; references point into the session's frame.
struct forward_args {
    timed_stream& client;
    beast::flat_buffer& client_buffer;
    request_parser& parser;
    /// The request's header arena, for the response's fields.
    header_arena& arena;
    upstream::pool& pool;
    const config::config& config;
    std::string_view peer;
    reply_context reply;
    bool client_keep_alive = true;
    /// The client sent `Expect: 100-continue` and waits for our word before sending the body.
    bool expect_continue = false;
    /// The worker is draining: close the client connection after this response.
    const bool* draining = nullptr;
    /// The connection's header strings.
    header_scratch& scratch;
    /// The worker's body buffers: a forward borrows one for as long as it runs.
    buffer_pool& relay_buffers;
    /// When the request body's first read began (server.body-timeout counts from there).
    std::optional<std::chrono::steady_clock::time_point> body_started{};
};

/**
 * Sends the request in `args.parser` (header read, body not) to the upstream and its response
 * back, streaming both bodies through one fixed buffer, and answers 502/504 itself when the
 * upstream fails before a response started. See forwarder.cpp for the retry and framing rules.
 */
awaitable<forward_result> forward(forward_args& args);

} // namespace sluice::http::detail
