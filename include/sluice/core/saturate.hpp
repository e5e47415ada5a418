// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <limits>

namespace sluice {

/**
 * `x` converted to the integer type `To`, truncated toward zero like `static_cast`, but clamped
 * to `To`'s range instead of undefined behaviour when it does not fit: +inf and anything at or
 * above the maximum give the maximum, -inf and anything at or below the minimum give the
 * minimum, and NaN gives 0 (a NaN here means the arithmetic upstream already failed; 0 is the
 * value no caller mistakes for "a very long time"). Every double-to-integer conversion in src/
 * goes through here.
 */
template <std::integral To, std::floating_point From>
constexpr To saturating_cast(From x) noexcept {
    constexpr To lo = std::numeric_limits<To>::min();
    constexpr To hi = std::numeric_limits<To>::max();
    if (x != x) {
        return 0;
    }
    // The bounds convert exactly or round up to the next power of two (2^63 for int64), so
    // every x strictly between them converts without overflow.
    if (x >= static_cast<From>(hi)) {
        return hi;
    }
    if (x <= static_cast<From>(lo)) {
        return lo;
    }
    return static_cast<To>(x);
}

/// a + b, clamped to T's range where it would overflow.
template <std::integral T>
constexpr T saturating_add(T a, T b) noexcept {
    T sum{};
    if (__builtin_add_overflow(a, b, &sum)) {
        return b > 0 ? std::numeric_limits<T>::max() : std::numeric_limits<T>::min();
    }
    return sum;
}

/// A whole number of milliseconds held in a double (already rounded by the caller), saturated.
constexpr std::chrono::milliseconds saturating_ms(double whole_ms) noexcept {
    return std::chrono::milliseconds{saturating_cast<std::int64_t>(whole_ms)};
}

} // namespace sluice
