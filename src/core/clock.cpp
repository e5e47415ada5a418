// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/clock.hpp"

#include <chrono>

namespace sluice {

namespace {

using ms = std::chrono::duration<double, std::milli>;

double steady_ms() noexcept {
    return std::chrono::duration_cast<ms>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

} // namespace

steady_clock_source::steady_clock_source() noexcept
    : unix_offset_ms_(
          std::chrono::duration_cast<ms>(std::chrono::system_clock::now().time_since_epoch())
              .count() -
          steady_ms()) {}

double steady_clock_source::now_ms() const noexcept {
    return steady_ms() + unix_offset_ms_;
}

} // namespace sluice
