// SPDX-License-Identifier: Apache-2.0
#pragma once

// Small text helpers shared by the modules that read header values, logs and configuration.

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace sluice {

/// A table by byte value of the letters, the digits and `others`: a character class that costs
/// one load per byte where a scan wants it.
constexpr std::array<bool, 256> alphanumeric_and(std::string_view others) noexcept {
    std::array<bool, 256> table{};
    for (const char c : others) {
        table[static_cast<unsigned char>(c)] = true;
    }
    for (int c = '0'; c <= '9'; ++c) {
        table[static_cast<std::size_t>(c)] = true;
    }
    for (int c = 'a'; c <= 'z'; ++c) {
        table[static_cast<std::size_t>(c)] = true;
        table[static_cast<std::size_t>(c - 'a' + 'A')] = true;
    }
    return table;
}

namespace detail {
// RFC 9110 5.6.2's tchar (Beast's parse_field table), for the scan of a response head's field
// names.
inline constexpr auto tchar_table = alphanumeric_and("!#$%&'*+-.^_`|~");
} // namespace detail

/// Whether `c` is a tchar (RFC 9110 5.6.2), a byte of a token: a field name, a method.
constexpr bool is_tchar(char c) noexcept {
    return detail::tchar_table[static_cast<unsigned char>(c)];
}

/// Whether `text` is a token (RFC 9110 5.6.2): one tchar or more.
constexpr bool is_token(std::string_view text) noexcept {
    return !text.empty() && std::all_of(text.begin(), text.end(), is_tchar);
}

/// The value of the hexadecimal digit `c` (either case), or -1 when `c` is none: a
/// percent-encoded byte, an IPv6 group.
constexpr int hex_digit_value(char c) noexcept {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/// `text` without the blanks (spaces and tabs: HTTP's OWS, RFC 9110 5.6.3) around it.
constexpr std::string_view trim_blanks(std::string_view text) noexcept {
    const auto first = text.find_first_not_of(" \t");
    if (first == std::string_view::npos) {
        return {};
    }
    return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

/// Whether `a` and `b` are equal but for the case of ASCII letters, as HTTP compares field
/// names and tokens. sluice's own: Beast 1.81's `iequals` reads a byte past the end of both
/// when they differ only in the case of their last byte (a Transfer-Encoding of `chunkeD` at
/// the end of a head's block of text: the response_head fuzz target found it under ASan).
constexpr bool iequals(std::string_view a, std::string_view b) noexcept {
    const auto lower = [](char c) {
        return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    };
    if (a.size() != b.size()) {
        return false;
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (lower(a[i]) != lower(b[i])) {
            return false;
        }
    }
    return true;
}

/// Whether `text` begins with `prefix` but for the case of ASCII letters (a URL's scheme).
constexpr bool istarts_with(std::string_view text, std::string_view prefix) noexcept {
    return text.size() >= prefix.size() && iequals(text.substr(0, prefix.size()), prefix);
}

/// The index after the well-formed UTF-8 sequence that starts at `i` in `text`, or npos when
/// none does there (overlong forms, surrogates and code points above U+10FFFF are not UTF-8).
std::size_t next_code_point(std::string_view text, std::size_t i) noexcept;

/// Whether `text` is UTF-8 throughout.
bool is_utf8(std::string_view text) noexcept;

/// Appends `text` to `out` as the inside of a JSON string: quotes, backslashes, control
/// characters and DEL escaped, well-formed UTF-8 as it is, and each byte of `text` that is no
/// UTF-8 as U+FFFD (`\ufffd`), so that the string is valid JSON whatever `text` holds.
void append_json_escaped(std::string& out, std::string_view text);

} // namespace sluice
