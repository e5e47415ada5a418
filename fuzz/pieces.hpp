// SPDX-License-Identifier: Apache-2.0
#pragma once

// A fuzz input's bytes arriving in pieces, as a socket would deliver them into a read buffer.

#include <boost/beast/core/flat_buffer.hpp>

#include <algorithm>
#include <cstddef>
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

} // namespace sluice::fuzz
