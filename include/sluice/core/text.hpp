// SPDX-License-Identifier: Apache-2.0
#pragma once

// Small text helpers shared by the modules that read header values.

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

} // namespace sluice
