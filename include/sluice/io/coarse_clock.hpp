// SPDX-License-Identifier: Apache-2.0
#pragma once

// steady_clock as the kernel last stored it: for the deadlines and idle ages of the request
// path, which need no better.
//
// steady_clock::now() reads the TSC through the vdso, 22 ns on this machine, and a proxied
// request read it twelve times (a perf probe on clock_gettime): 1.7% of sluice's CPU in a
// `perf record` of one worker under wrk -c64. CLOCK_MONOTONIC_COARSE is the same clock without
// the TSC read, 5 ns. The kernel advances it at a tick by whole ticks, so while its ticks come
// on time it lags steady_clock by less than two ticks (`resolution()` is one: 4 ms here; 20
// million readings on this machine, busy or not, lagged by at most 4.95 ms). A tick that comes
// late (a virtual CPU descheduled) lets it lag further: CI once saw 8.0049 ms. A deadline that
// then fires that much early does no harm here. Latencies and the limiter's clock keep
// steady_clock: they need its precision.

#include <chrono>
#include <ctime>

namespace sluice {

struct coarse_clock {
    using duration = std::chrono::steady_clock::duration;
    using time_point = std::chrono::steady_clock::time_point;

    /// steady_clock's time as the kernel last stored it: at or before steady_clock::now().
    static time_point now() noexcept {
        timespec ts{};
        ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        return time_point(to_duration(ts));
    }

    /// The kernel's tick: how often now() moves.
    static duration resolution() noexcept {
        static const duration tick = [] {
            timespec ts{};
            ::clock_getres(CLOCK_MONOTONIC_COARSE, &ts);
            return to_duration(ts);
        }();
        return tick;
    }

    /// At or after steady_clock::now(), by less than two ticks, while the kernel's ticks come on
    /// time: a deadline of latest_now() + d comes no sooner than d from now (a late tick can
    /// make it a little sooner), and at most two ticks later.
    static time_point latest_now() noexcept { return now() + 2 * resolution(); }

private:
    static duration to_duration(const timespec& ts) noexcept {
        return std::chrono::duration_cast<duration>(std::chrono::seconds(ts.tv_sec) +
                                                    std::chrono::nanoseconds(ts.tv_nsec));
    }
};

} // namespace sluice
