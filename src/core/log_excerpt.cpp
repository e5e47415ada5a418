// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/log_excerpt.hpp"

#include <algorithm>

namespace sluice {

std::string log_excerpt(std::string_view text, std::size_t limit) {
    constexpr std::string_view hex = "0123456789abcdef";
    const auto shown = text.substr(0, std::min(text.size(), limit));
    std::string out;
    out.reserve(shown.size() + 32);
    for (const char ch : shown) {
        const auto c = static_cast<unsigned char>(ch);
        if (c == '\\') {
            out += "\\\\";
        } else if (c >= 0x20 && c < 0x7f) {
            out += ch;
        } else {
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 0xf];
        }
    }
    if (shown.size() < text.size()) {
        out += "... (" + std::to_string(text.size()) + " bytes)";
    }
    return out;
}

} // namespace sluice
