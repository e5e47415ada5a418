// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/concurrency.hpp"

#include <algorithm>

namespace sluice::limiter {

decision concurrency_acquire(concurrency_state& state, const config::limit& limit) noexcept {
    decision d;
    d.limit = limit.limit_count;
    d.in_flight = true;
    d.allowed = state.in_flight < limit.limit_count;
    if (d.allowed) {
        ++state.in_flight;
    }
    d.remaining = std::max<std::int64_t>(limit.limit_count - state.in_flight, 0);
    return d;
}

void concurrency_release(concurrency_state& state, std::uint64_t epoch) noexcept {
    if (state.epoch == epoch) {
        state.in_flight = std::max<std::int64_t>(state.in_flight - 1, 0);
    }
}

} // namespace sluice::limiter
