// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/leaky_bucket.hpp"

#include "sluice/core/saturate.hpp"

#include <algorithm>
#include <cmath>

namespace sluice::limiter {
namespace {

// T = 1000 / flowRate is rarely exact in binary, so sums of slots land a hair off whole values
// (3 x 333.333... may give 999.9999999999999). Both roundings tolerate that much; the Lua script
// uses the same constants, so the stores still decide alike.
constexpr double slot_epsilon = 1e-9;
constexpr double ms_epsilon = 1e-6;

milliseconds ceil_ms(double ms) noexcept {
    return saturating_ms(std::ceil(std::max(0.0, ms - ms_epsilon)));
}

} // namespace

decision leak_and_admit(leaky_bucket_state& state,
                        bool exists,
                        std::int64_t capacity,
                        double flow_rate,
                        bool shaping,
                        std::optional<milliseconds> max_delay,
                        double now_ms) noexcept {
    const double slot_ms = 1000.0 / flow_rate;
    std::int64_t q = exists ? state.queue_size : 0;
    double last = exists ? state.last_leak_ms : now_ms;

    // Leak whole slots; keep the fraction of the slot in progress.
    if (now_ms > last) {
        const double leaked = std::floor((now_ms - last) / slot_ms + slot_epsilon);
        if (leaked >= static_cast<double>(q)) {
            q = 0;
            last = now_ms;
        } else if (leaked > 0) {
            q -= saturating_cast<std::int64_t>(leaked); // leaked < q here
            last += leaked * slot_ms;
        }
    }

    decision d;
    d.limit = capacity;
    d.window = ceil_ms(static_cast<double>(capacity) * slot_ms);

    // The new request would stand at position q + 1; the head leaves at `last`.
    const double wait_ms = last + static_cast<double>(q) * slot_ms - now_ms;
    const bool has_room = q + 1 <= capacity;
    const bool wait_fits =
        !shaping || !max_delay || wait_ms <= static_cast<double>(max_delay->count()) + ms_epsilon;

    if (has_room && wait_fits) {
        ++q;
        d.allowed = true;
        d.delay = shaping ? ceil_ms(wait_ms) : milliseconds{0};
    } else {
        d.allowed = false;
        // Full: the next slot frees at last + T. Too long a wait: it shrinks one ms per ms.
        const double until =
            has_room ? wait_ms - static_cast<double>(max_delay->count()) : last + slot_ms - now_ms;
        d.retry_after = std::max(ceil_ms(until), milliseconds{1});
    }
    d.remaining = capacity - q;
    d.reset_after = ceil_ms(last + static_cast<double>(q) * slot_ms - now_ms);

    state.queue_size = q;
    state.last_leak_ms = last;
    return d;
}

decision leaky_bucket_acquire(leaky_bucket_state& state,
                              bool exists,
                              const config::limit& limit,
                              double now_ms) noexcept {
    return leak_and_admit(state,
                          exists,
                          limit.capacity,
                          limit.flow_rate,
                          limit.mode == config::shaping_mode::shape,
                          limit.max_delay,
                          now_ms);
}

} // namespace sluice::limiter
