// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

namespace sluice {

/**
 * Lets at most one log line through per interval for one call site, counting the ones it holds
 * back. Every line that a peer can trigger (a refusal, a failed accept, a bad reply) goes through
 * one of these: a hostile or broken peer can then cost at most a line per interval, however many
 * times it triggers the condition. Thread-safe and lock-free: workers share a call site's
 * throttle.
 *
 * Usage: `static log_throttle throttle; log_throttled(throttle, spdlog::level::warn, "...", x);`
 */
class log_throttle {
public:
    explicit log_throttle(std::chrono::milliseconds interval = std::chrono::seconds(1)) noexcept
        : interval_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(interval).count()) {}

    log_throttle(const log_throttle&) = delete;
    log_throttle& operator=(const log_throttle&) = delete;

    /**
     * Whether a line may be written at `now_ns` (steady clock). When it may, `suppressed` is set
     * to the number of lines held back since the last one written.
     */
    bool allow(std::int64_t now_ns, std::uint64_t& suppressed) noexcept {
        auto next = next_ns_.load(std::memory_order_relaxed);
        if (now_ns < next || !next_ns_.compare_exchange_strong(
                                 next, now_ns + interval_ns_, std::memory_order_relaxed)) {
            suppressed_.fetch_add(1, std::memory_order_relaxed);
            return false;
        }
        suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
        return true;
    }

    /// `allow` at the steady clock's current time.
    bool allow(std::uint64_t& suppressed) noexcept {
        const auto now = std::chrono::steady_clock::now().time_since_epoch();
        return allow(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(), suppressed);
    }

private:
    std::int64_t interval_ns_;
    /// The first instant at which the next line may be written.
    std::atomic<std::int64_t> next_ns_{std::numeric_limits<std::int64_t>::min()};
    std::atomic<std::uint64_t> suppressed_{0};
};

/**
 * Logs through `throttle`: the line is written only when the throttle allows it, and then says
 * how many like it were held back since the previous one.
 */
template <typename... Args>
void log_throttled(log_throttle& throttle,
                   spdlog::level::level_enum level,
                   fmt::format_string<Args...> format,
                   Args&&... args) {
    if (!spdlog::should_log(level)) {
        return;
    }
    std::uint64_t suppressed = 0;
    if (!throttle.allow(suppressed)) {
        return;
    }
    auto line = fmt::format(format, std::forward<Args>(args)...);
    if (suppressed > 0) {
        line += fmt::format(" ({} similar lines suppressed)", suppressed);
    }
    spdlog::log(level, "{}", line);
}

} // namespace sluice
