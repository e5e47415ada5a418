// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/cost.hpp"

#include "sluice/core/text.hpp"

#include <charconv>
#include <cmath>
#include <system_error>

namespace sluice::limiter {

std::optional<std::int64_t> parse_cost_figure(std::string_view text) noexcept {
    text = trim_blanks(text);
    if (text.empty()) {
        return std::nullopt;
    }
    // from_chars accepts neither a '+' nor leading spaces, and reads "inf" and "nan": refused
    // below by the checks on the value.
    double value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value) ||
        value < 0) {
        return std::nullopt;
    }
    const double whole = std::ceil(value);
    // Saturates: a figure beyond 2^53 is more than any limit holds.
    if (whole >= static_cast<double>(max_amount)) {
        return max_amount;
    }
    return static_cast<std::int64_t>(whole);
}

} // namespace sluice::limiter
