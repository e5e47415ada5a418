// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/clock.hpp"

#include <chrono>

namespace sluice {

double steady_clock_source::now_ms() const noexcept {
    using ms = std::chrono::duration<double, std::milli>;
    return std::chrono::duration_cast<ms>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

} // namespace sluice
