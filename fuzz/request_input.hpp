// SPDX-License-Identifier: Apache-2.0
#pragma once

// What the request fuzz targets share: a request parser bounded as theirs are, and the input's
// bytes arriving in pieces (pieces.hpp).

#include "http/message_types.hpp"
#include "pieces.hpp"

#include <cstdint>
#include <optional>

namespace sluice::fuzz {

/// The requests' header limit (server.max-header-size); their bodies may have 64 KiB
/// (server.max-body-size).
inline constexpr std::uint64_t header_limit = 1024;

/// A request parser as handle_request makes one, with the limits above.
inline void make_request_parser(std::optional<http::detail::request_parser>& parser,
                                http::detail::header_arena& arena) {
    http::detail::make_parser(parser, arena.allocator());
    parser->header_limit(static_cast<std::uint32_t>(header_limit));
    parser->body_limit(64 * 1024);
}

} // namespace sluice::fuzz
