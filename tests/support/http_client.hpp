// SPDX-License-Identifier: Apache-2.0
#pragma once

// A blocking HTTP/1.1 test client: raw bytes out, Beast-parsed responses in, with bodies hashed
// as they stream so that 64 MiB downloads need no 64 MiB buffer. One `http_connection` is one
// TCP connection: call `read_response` several times for keep-alive and pipelining.

#include "support/body_pattern.hpp"
#include "support/fd_stream.hpp"

#include <boost/beast/core/flat_buffer.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::test {

/// Header fields in arrival order; names keep their spelling, lookups ignore case.
using header_list = std::vector<std::pair<std::string, std::string>>;

/// The first value of `name` (case-insensitive), if present.
std::optional<std::string> find_header(const header_list& headers, std::string_view name);

/// How many fields are named `name` (case-insensitive).
std::size_t count_header(const header_list& headers, std::string_view name);

/// One parsed response.
struct http_response {
    unsigned status = 0;
    std::string reason;
    header_list headers;
    /// The body's first `keep_body_limit` bytes (see `read_response`).
    std::string body;
    std::uint64_t body_size = 0;
    std::uint64_t body_hash = fnv1a64::offset_basis;
    bool chunked = false;
    bool keep_alive = false;
    /// When the response header was parsed.
    std::chrono::steady_clock::time_point received;

    std::optional<std::string> header(std::string_view name) const {
        return find_header(headers, name);
    }
};

/**
 * Formats a request: "METHOD TARGET HTTP/1.1", then "Host: 127.0.0.1" unless `headers` has a
 * Host, then `headers` as given, then "Content-Length" when `body` is non-empty and `headers`
 * has neither Content-Length nor Transfer-Encoding, then `body` verbatim.
 */
std::string format_request(std::string_view method,
                           std::string_view target,
                           const header_list& headers = {},
                           std::string_view body = {});

/// Encodes `body` as chunks of at most `chunk_size` bytes plus the last chunk.
std::string chunk_encode(std::string_view body, std::size_t chunk_size = 4096);

/// A client connection to 127.0.0.1:port. Every method throws on I/O errors or timeouts.
class http_connection {
public:
    explicit http_connection(std::uint16_t port,
                             std::chrono::milliseconds timeout = std::chrono::seconds(30));

    /// Sends bytes as they are (one request, several, or a deliberately broken one).
    void send_raw(std::string_view bytes);

    /// Sends `format_request(method, target, headers, body)`.
    void send(std::string_view method,
              std::string_view target,
              const header_list& headers = {},
              std::string_view body = {});

    /**
     * Sends `size` bytes of pattern `seed` as a body, after a header sent by the caller. With
     * `chunked`, the bytes go out as chunks of `chunk_size` and end with the last chunk.
     */
    void send_pattern_body(std::uint64_t seed,
                           std::uint64_t size,
                           bool chunked,
                           std::size_t chunk_size = 16 * 1024);

    /**
     * Reads one response. Bytes that follow it stay buffered for the next call. `head_request`
     * tells the parser that no body follows. The body is hashed in full; only its first
     * `keep_body_limit` bytes are kept in `http_response::body`.
     */
    http_response read_response(bool head_request = false,
                                std::size_t keep_body_limit = 4 * 1024 * 1024);

    /// As `read_response`, but an error or timeout gives nullopt and sets `ec`.
    std::optional<http_response> try_read_response(error_code& ec,
                                                   bool head_request = false,
                                                   std::size_t keep_body_limit = 4 * 1024 * 1024);

    /// True if the server closes the connection within `timeout` (buffered bytes are dropped).
    bool wait_closed(std::chrono::milliseconds timeout);

    fd_stream& stream() { return stream_; }

private:
    fd_stream stream_;
    boost::beast::flat_buffer buffer_;
};

/// One request on a fresh connection: `send(method, ...)` then `read_response()`.
http_response request(std::uint16_t port,
                      std::string_view method,
                      std::string_view target,
                      const header_list& headers = {},
                      std::string_view body = {});

/// `request(port, "GET", target, headers)`.
http_response get(std::uint16_t port, std::string_view target, const header_list& headers = {});

} // namespace sluice::test
