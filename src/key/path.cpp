// SPDX-License-Identifier: Apache-2.0
#include "sluice/key/path.hpp"

#include "sluice/core/text.hpp"

#include <cstddef>

namespace sluice::key {

namespace {

constexpr char upper_hex[] = "0123456789ABCDEF";

bool is_control(unsigned char c) noexcept {
    return c <= 0x20 || c == 0x7f;
}

bool is_unreserved(unsigned char c) noexcept {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

// RFC 3986 pchar minus unreserved and pct-encoded: sub-delims, ':' and '@'. These are kept
// as they are; decoding their "%XX" spelling could change the meaning, so that stays encoded.
bool is_path_delim(unsigned char c) noexcept {
    switch (c) {
    case '!':
    case '$':
    case '&':
    case '\'':
    case '(':
    case ')':
    case '*':
    case '+':
    case ',':
    case ';':
    case '=':
    case ':':
    case '@':
        return true;
    default:
        return false;
    }
}

void append_encoded(std::string& out, unsigned char c) {
    out.push_back('%');
    out.push_back(upper_hex[c >> 4]);
    out.push_back(upper_hex[c & 0xf]);
}

// Appends the canonical spelling of one raw segment (no '/' inside); false if it is invalid.
bool append_segment(std::string& out, std::string_view segment) {
    for (std::size_t i = 0; i < segment.size(); ++i) {
        const auto c = static_cast<unsigned char>(segment[i]);
        if (c == '%') {
            // Both hex digits must be there: "%4" at the end and "%G1" are invalid.
            if (i + 2 >= segment.size()) {
                return false;
            }
            const int hi = hex_digit_value(segment[i + 1]);
            const int lo = hex_digit_value(segment[i + 2]);
            if (hi < 0 || lo < 0) {
                return false;
            }
            const auto decoded = static_cast<unsigned char>(hi << 4 | lo);
            if (is_unreserved(decoded)) {
                out.push_back(static_cast<char>(decoded));
            } else {
                append_encoded(out, decoded);
            }
            i += 2;
        } else if (is_unreserved(c) || is_path_delim(c)) {
            out.push_back(static_cast<char>(c));
        } else if (is_control(c)) {
            return false;
        } else {
            append_encoded(out, c);
        }
    }
    return true;
}

// Removes "." and ".." (RFC 3986 5.2.4) and empty segments while copying, segment by segment:
// each segment is decoded into `out` first, so "%2E%2E" is recognised as "..".
bool append_normalized(std::string& out, std::string_view path) {
    std::size_t i = 0;
    const std::size_t n = path.size();
    for (;;) {
        while (i < n && path[i] == '/') {
            ++i;
        }
        std::size_t end = path.find('/', i);
        if (end == std::string_view::npos) {
            end = n;
        }
        const std::size_t mark = out.size();
        out.push_back('/');
        if (!append_segment(out, path.substr(i, end - i))) {
            return false;
        }
        i = end;
        const std::string_view segment = std::string_view(out).substr(mark + 1);
        if (segment == "." || segment == "..") {
            const bool up = segment.size() == 2;
            out.resize(mark);
            if (up) {
                const std::size_t parent = out.rfind('/');
                out.resize(parent == std::string::npos ? 0 : parent);
            }
            // "/a/." and "/a/b/.." name a directory: keep the trailing '/'.
            if (i == n) {
                out.push_back('/');
            }
        }
        if (i == n) {
            return true;
        }
    }
}

} // namespace

std::optional<std::string> normalize_path(std::string_view request_target) {
    // A control character, space or DEL anywhere, query included, makes the target invalid.
    for (char c : request_target) {
        if (is_control(static_cast<unsigned char>(c))) {
            return std::nullopt;
        }
    }
    std::string_view rest = request_target;
    if (rest.empty() || rest[0] != '/') {
        // Absolute-form: "http://authority/path?query"; only http and https are proxied.
        std::size_t skip = 0;
        if (istarts_with(rest, "http://")) {
            skip = 7;
        } else if (istarts_with(rest, "https://")) {
            skip = 8;
        } else {
            return std::nullopt; // includes "" and the asterisk-form "*"
        }
        rest.remove_prefix(skip);
        const std::size_t authority_end = rest.find_first_of("/?#");
        if (authority_end == 0) {
            return std::nullopt; // "http:///x": no authority
        }
        rest.remove_prefix(authority_end == std::string_view::npos ? rest.size() : authority_end);
        if (rest.empty() || rest[0] != '/') {
            return std::string("/"); // "http://host" or "http://host?x"
        }
    }
    const std::size_t path_end = rest.find_first_of("?#");
    if (path_end != std::string_view::npos) {
        rest = rest.substr(0, path_end);
    }
    std::string out;
    out.reserve(rest.size());
    if (!append_normalized(out, rest)) {
        return std::nullopt;
    }
    if (out.empty()) {
        out.push_back('/');
    }
    return out;
}

} // namespace sluice::key
