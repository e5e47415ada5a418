// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/cost.hpp"

#include "sluice/core/text.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <system_error>

namespace sluice::limiter {
namespace {

// Whether a decimal number that from_chars found out of a double's range (`digits[.digits]
// [e[+-]digits]`, no sign) is at least 1: its order of magnitude, the position of its first
// significant digit plus its exponent, is not negative. Exponents saturate: a text has fewer
// digits than a billion, so the sign is right however long either part is.
bool beyond_one(std::string_view number) noexcept {
    const auto e = number.find_first_of("eE");
    const auto mantissa = number.substr(0, e);
    const auto point = std::min(mantissa.find('.'), mantissa.size());
    const auto first = mantissa.find_first_not_of("0.");
    if (first == std::string_view::npos) {
        return false; // all zeros: in range, never here
    }
    // 10^order <= mantissa < 10^(order + 1).
    std::int64_t order = first < point ? static_cast<std::int64_t>(point - first) - 1
                                       : -static_cast<std::int64_t>(first - point);
    if (e != std::string_view::npos) {
        auto exponent = number.substr(e + 1);
        const bool negative = !exponent.empty() && exponent.front() == '-';
        if (!exponent.empty() && (exponent.front() == '-' || exponent.front() == '+')) {
            exponent.remove_prefix(1);
        }
        std::int64_t value = 0;
        for (const char c : exponent) {
            value = std::min<std::int64_t>(value * 10 + (c - '0'), 1'000'000'000'000);
        }
        order += negative ? -value : value;
    }
    return order >= 0;
}

} // namespace

std::optional<std::int64_t> parse_cost_figure(std::string_view text) noexcept {
    text = trim_blanks(text);
    if (text.empty()) {
        return std::nullopt;
    }
    // from_chars accepts neither a '+' nor leading spaces, and reads "inf" and "nan": refused
    // below by the checks on the value.
    double value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec == std::errc::result_out_of_range && end == text.data() + text.size() &&
        text.front() != '-') {
        // A decimal number beyond a double's range saturates as one within it does (1e309 as
        // 1e300: more than any limit holds), and one below it is rounded up as any fraction is:
        // the figure stays monotonic, and no text reserves less than a smaller number would.
        return beyond_one(text) ? max_amount : 1;
    }
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
