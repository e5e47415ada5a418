// SPDX-License-Identifier: Apache-2.0
#pragma once

// The request header checks that read_header (message_reader.cpp) shares with take_header
// (request_checks.cpp).

#include "http/message_types.hpp"

#include <boost/beast/core/flat_buffer.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace sluice::http::detail {

/// How far check_header_block has looked at a header that comes in pieces, so that each read's
/// check looks at that read's bytes only: a long request line or header trickled a byte per
/// read would otherwise be scanned again from its start every time.
struct header_progress {
    /// Bytes searched for the header's end, none found; once the header is complete, its
    /// length, blank line included.
    std::size_t scanned = 0;
    /// Where the method's space is, once seen (each byte before it was checked once).
    std::optional<std::size_t> method_end;
    /// Whether the request line came whole and passed.
    bool line_judged = false;
};

/**
 * Takes the empty lines (CRLF, or a bare LF) before a request line out of the front of `buffer`,
 * as RFC 9112 2.2 asks a server to (a client may end a POST body with a CRLF it does not count,
 * and an answer of 400 to it would be read as the answer to its next request); a peer sending
 * nothing else meets the header timeout. True when what is left is a lone CR, which may start
 * one more: read on before judging it. Only before a request's first byte.
 */
bool take_empty_lines(beast::flat_buffer& buffer);

/**
 * What the buffer says about the request header, looking on from `progress` (updated):
 * complete (and free of obsolete line folding: else bad_value), over `limit` bytes with its
 * blank line, however it came (header_limit), not a request at all (bad_method, bad_version:
 * see request_checks.cpp), or nullopt, not all there yet.
 */
std::optional<error_code> check_header_block(const beast::flat_buffer& buffer,
                                             std::uint64_t limit,
                                             header_progress& progress);

/// Parses a complete header of `size` bytes (check_header_block's) from the buffer, consuming
/// it, and copies those bytes into `copy` unless null (cleared unless Beast parsed exactly
/// them); need_more only if our blank-line scan and Beast disagree about where it ends.
error_code parse_header(beast::flat_buffer& buffer,
                        request_parser& parser,
                        std::size_t size,
                        std::string* copy);

} // namespace sluice::http::detail
