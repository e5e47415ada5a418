// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstdint>

namespace sluice {

/**
 * A source of "now" in milliseconds, injectable so that algorithm and store tests control time.
 *
 * The value's origin is the implementation's: the memory store only ever compares readings of
 * one clock, so a steady (monotonic) clock is right for it and immune to wall-clock steps.
 */
class clock {
public:
    virtual ~clock() = default;

    /// Milliseconds since the clock's epoch; may have a fractional part.
    virtual double now_ms() const noexcept = 0;
};

/// `std::chrono::steady_clock`, in milliseconds with sub-millisecond precision.
class steady_clock_source final : public clock {
public:
    double now_ms() const noexcept override;
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
