// SPDX-License-Identifier: Apache-2.0
#pragma once

// Small text helpers shared by the modules that read header values, logs and configuration.

#include <cstddef>
#include <string>
#include <string_view>

namespace sluice {

/// `text` without the blanks (spaces and tabs: HTTP's OWS, RFC 9110 5.6.3) around it.
constexpr std::string_view trim_blanks(std::string_view text) noexcept {
    const auto first = text.find_first_not_of(" \t");
    if (first == std::string_view::npos) {
        return {};
    }
    return text.substr(first, text.find_last_not_of(" \t") - first + 1);
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
