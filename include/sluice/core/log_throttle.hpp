// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
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

namespace detail {

/// Writes a line a throttle let through, saying how many like it the throttle held back before.
template <typename... Args>
void write_allowed_line(spdlog::level::level_enum level,
                        std::uint64_t suppressed,
                        fmt::format_string<Args...> format,
                        Args&&... args) {
    auto line = fmt::format(format, std::forward<Args>(args)...);
    if (suppressed > 0) {
        line += fmt::format(" ({} similar lines suppressed)", suppressed);
    }
    spdlog::log(level, "{}", line);
}

} // namespace detail

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
    detail::write_allowed_line(level, suppressed, format, std::forward<Args>(args)...);
}

/**
 * A `log_throttle` per distinct line (`log_throttled`) or per kind of line (`log_throttled_by`):
 * each may be written once per interval, and the next time it is written it says how many times
 * it was held back. For errors of several kinds (the step that failed, a Redis error's code): one
 * call site then reports each kind, where a plain throttle would let the first hide the others.
 * Keyed by line only where the texts come from a small set: a text a peer or a reply shapes
 * would let every new one through. Thread-safe (a mutex:
 * only failure paths use it). At most `max_lines` texts are remembered; a new one beyond that
 * forgets the one seen least recently, with its count.
 */
class keyed_log_throttle {
public:
    explicit keyed_log_throttle(std::chrono::milliseconds interval = std::chrono::seconds(10),
                                std::size_t max_lines = 64)
        : interval_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(interval).count())
        , max_lines_(max_lines) {}

    keyed_log_throttle(const keyed_log_throttle&) = delete;
    keyed_log_throttle& operator=(const keyed_log_throttle&) = delete;

    /// Whether `line` may be written at `now_ns` (steady clock); when it may, `suppressed` is
    /// the number of times it was held back since it was last written.
    bool allow(const std::string& line, std::int64_t now_ns, std::uint64_t& suppressed) {
        const std::lock_guard lock(mutex_);
        auto it = lines_.find(line);
        if (it == lines_.end()) {
            if (lines_.size() >= max_lines_) {
                forget_least_recent();
            }
            lines_.emplace(line, entry{now_ns + interval_ns_, 0, now_ns});
            suppressed = 0;
            return true;
        }
        auto& e = it->second;
        e.last_seen_ns = now_ns;
        if (now_ns < e.next_ns) {
            ++e.suppressed;
            return false;
        }
        suppressed = std::exchange(e.suppressed, 0);
        e.next_ns = now_ns + interval_ns_;
        return true;
    }

    /// `allow` at the steady clock's current time.
    bool allow(const std::string& line, std::uint64_t& suppressed) {
        const auto now = std::chrono::steady_clock::now().time_since_epoch();
        return allow(
            line, std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(), suppressed);
    }

private:
    struct entry {
        std::int64_t next_ns;
        std::uint64_t suppressed;
        std::int64_t last_seen_ns;
    };

    void forget_least_recent() {
        auto oldest = lines_.begin();
        for (auto it = lines_.begin(); it != lines_.end(); ++it) {
            if (it->second.last_seen_ns < oldest->second.last_seen_ns) {
                oldest = it;
            }
        }
        if (oldest != lines_.end()) {
            lines_.erase(oldest);
        }
    }

    std::int64_t interval_ns_;
    std::size_t max_lines_;
    std::mutex mutex_;
    std::unordered_map<std::string, entry> lines_;
};

/**
 * Logs through `throttle`, keyed by the formatted line: each distinct line at most once per
 * interval, then with the number of times it was held back.
 */
template <typename... Args>
void log_throttled(keyed_log_throttle& throttle,
                   spdlog::level::level_enum level,
                   fmt::format_string<Args...> format,
                   Args&&... args) {
    if (!spdlog::should_log(level)) {
        return;
    }
    auto line = fmt::format(format, std::forward<Args>(args)...);
    std::uint64_t suppressed = 0;
    if (!throttle.allow(line, suppressed)) {
        return;
    }
    if (suppressed > 0) {
        line += fmt::format(" ({} identical lines suppressed)", suppressed);
    }
    spdlog::log(level, "{}", line);
}

/**
 * Logs through `throttle`, keyed by `key` (a kind of line, from a fixed set) rather than by the
 * formatted line: for lines whose text varies without bound (a reply's), where a key per text
 * would let every new text through. Each key at most once per interval, then with the number of
 * lines of its kind held back.
 */
template <typename... Args>
void log_throttled_by(keyed_log_throttle& throttle,
                      std::string_view key,
                      spdlog::level::level_enum level,
                      fmt::format_string<Args...> format,
                      Args&&... args) {
    if (!spdlog::should_log(level)) {
        return;
    }
    std::uint64_t suppressed = 0;
    if (!throttle.allow(std::string(key), suppressed)) {
        return;
    }
    detail::write_allowed_line(level, suppressed, format, std::forward<Args>(args)...);
}

} // namespace sluice
