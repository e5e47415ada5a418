// SPDX-License-Identifier: Apache-2.0
#pragma once

// Writing a message header and its body's framing (message_writer.cpp).

#include "http/message_types.hpp"
#include "sluice/io/timed_stream.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace sluice::http::detail {

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
    message_writer(const response_head& header,
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

} // namespace sluice::http::detail
