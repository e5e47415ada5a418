// SPDX-License-Identifier: Apache-2.0
#pragma once

// What the fuzz targets that read a message share: the input's bytes arriving in pieces, as a
// socket would deliver them into a read buffer, and the chunk limits one byte of it chooses.

#include "http/message_reader.hpp"

#include <boost/beast/core/flat_buffer.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace sluice::fuzz {

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

/// The chunk limits (server.max-chunk-header-size, server.max-trailer-size) `byte` chooses: small
/// enough for inputs to reach them, a chunk-size line of 1 to 241 bytes and a trailer of 1 to 961.
inline http::detail::chunk_limits chunk_limits_from(std::uint8_t byte) {
    return {std::uint64_t{byte} % 16 * 16 + 1, std::uint64_t{byte} / 16 * 64 + 1};
}

} // namespace sluice::fuzz
