// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstdint>

namespace sluice {

/**
 * A source of "now" in milliseconds, injectable so that algorithm and store tests control time.
 *
 * The value's origin is the implementation's: the memory store compares readings of one clock,
 * so a steady (monotonic) clock is right for it and immune to wall-clock steps; but a
 * FIXED_WINDOW starts at a multiple of its length from the origin, which must be Unix time's, as
 * the Redis store's (Redis TIME), for both stores to start a window at the same moment.
 */
class clock {
public:
    virtual ~clock() = default;

    /// Milliseconds since the clock's epoch; may have a fractional part.
    virtual double now_ms() const noexcept = 0;
};

/**
 * `std::chrono::steady_clock`, in milliseconds with sub-millisecond precision, set to Unix time
 * when made: steady, and a FIXED_WINDOW of a minute (or a day) starts on the minute (at midnight
 * UTC) as on Redis. It does not follow the wall clock after that (it drifts from it as the
 * kernel slews it, by at most 0.05%).
 */
class steady_clock_source final : public clock {
public:
    steady_clock_source() noexcept;

    double now_ms() const noexcept override;

private:
    double unix_offset_ms_;
};

/// A clock that moves only when told to: for tests. Thread-safe.
class manual_clock final : public clock {
public:
    explicit manual_clock(double start_ms = 0) noexcept
        : now_(start_ms) {}

    double now_ms() const noexcept override { return now_.load(std::memory_order_relaxed); }

    void set(double ms) noexcept { now_.store(ms, std::memory_order_relaxed); }

    void advance(double ms) noexcept { set(now_ms() + ms); }

private:
    std::atomic<double> now_;
};

} // namespace sluice
