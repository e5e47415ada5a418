// SPDX-License-Identifier: Apache-2.0
#pragma once

// What the request fuzz targets share: a request parser bounded as theirs are, and the input's
// bytes arriving in pieces, as a socket would deliver them.

#include "http/message_types.hpp"

#include <boost/beast/core/flat_buffer.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

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

/// Moves up to `step` more bytes of `input` into `buffer`; false when the input is used up.
inline bool deliver(boost::beast::flat_buffer& buffer, std::string_view& input, std::size_t step) {
    if (input.empty()) {
        return false;
    }
    const auto n = std::min(input.size(), step);
    std::memcpy(buffer.prepare(n).data(), input.data(), n);
    buffer.commit(n);
    input.remove_prefix(n);
    return true;
}

} // namespace sluice::fuzz
