// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/text.hpp"

namespace sluice {

std::size_t next_code_point(std::string_view text, std::size_t i) noexcept {
    const auto byte = [&](std::size_t at) {
        return static_cast<unsigned char>(text[at]);
    };
    const unsigned char lead = byte(i);
    if (lead < 0x80) {
        return i + 1;
    }
    std::size_t length = 0;
    unsigned char low = 0x80;
    unsigned char high = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) {
        length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
        length = 3;
        low = lead == 0xe0 ? 0xa0 : 0x80;  // overlong
        high = lead == 0xed ? 0x9f : 0xbf; // surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
        length = 4;
        low = lead == 0xf0 ? 0x90 : 0x80;  // overlong
        high = lead == 0xf4 ? 0x8f : 0xbf; // above U+10FFFF
    } else {
        return std::string_view::npos;
    }
    if (i + length > text.size() || byte(i + 1) < low || byte(i + 1) > high) {
        return std::string_view::npos;
    }
    for (std::size_t k = 2; k < length; ++k) {
        if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) {
            return std::string_view::npos;
        }
    }
    return i + length;
}

bool is_utf8(std::string_view text) noexcept {
    for (std::size_t i = 0; i < text.size();) {
        i = next_code_point(text, i);
        if (i == std::string_view::npos) {
            return false;
        }
    }
    return true;
}

void append_json_escaped(std::string& out, std::string_view text) {
    constexpr char hex[] = "0123456789abcdef";
    for (std::size_t i = 0; i < text.size();) {
        const char c = text[i];
        const auto byte = static_cast<unsigned char>(c);
        if (byte >= 0x80) {
            // A key part may hold any byte a header value can (obs-text): a line with a byte
            // that is no UTF-8 would be refused whole by a strict JSON reader (a log pipeline
            // dropping the request's record), so such a byte is written as U+FFFD, as Go's
            // encoding/json does; well-formed sequences go as they are.
            const auto next = next_code_point(text, i);
            if (next == std::string_view::npos) {
                out += "\\ufffd";
                ++i;
            } else {
                out.append(text.substr(i, next - i));
                i = next;
            }
            continue;
        }
        ++i;
        switch (c) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\r':
            out += "\\r";
            break;
        case '\t':
            out += "\\t";
            break;
        default:
            if (byte < 0x20 || byte == 0x7f) {
                out += "\\u00";
                out += hex[byte >> 4];
                out += hex[byte & 0xf];
            } else {
                out += c;
            }
        }
    }
}

} // namespace sluice
