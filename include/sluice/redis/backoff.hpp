// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

namespace sluice::redis {

/**
 * The wait before the next connection attempt after a failure: exponential backoff with "equal
 * jitter". The ceiling doubles from `min` up to `max` with each failed attempt; the wait is half
 * the ceiling plus a random part of at most the other half, so that the workers and instances
 * that lost Redis together do not all return at one instant. Any failure counts, whether the TCP
 * connect was refused, Redis refused the connection's set-up (AUTH, SELECT, SCRIPT LOAD), or it
 * closed the connection right after; only a connection that completed its set-up and then lasted
 * at least `max` resets it (the client's rule).
 *
 * With the client's defaults (100 ms, 500 ms) the waits are at least 50, 100, 200, then 250 ms:
 * a worker makes at most 4 attempts a second once the ceiling is reached.
 */
class reconnect_backoff {
public:
    using milliseconds = std::chrono::milliseconds;

    reconnect_backoff(milliseconds min, milliseconds max) noexcept
        : min_(min)
        , max_(max) {}

    /// The ceiling of the next wait: `min` x 2^failures, at most `max`.
    milliseconds ceiling() const noexcept {
        return std::min(max_, min_ * (std::int64_t{1} << failures_));
    }

    /// The least the next wait can be: half its ceiling.
    milliseconds shortest() const noexcept { return milliseconds{ceiling().count() / 2}; }

    /// The next wait, drawn with `rng` from [shortest(), ceiling()]; counts one more failure.
    template <typename Rng>
    milliseconds next(Rng& rng) {
        const auto top = ceiling().count();
        const std::int64_t half = top / 2;
        std::uniform_int_distribution<std::int64_t> jitter(0, top - half);
        failures_ = std::min(failures_ + 1, max_doublings);
        return milliseconds{half + jitter(rng)};
    }

    /// After a connection that completed its set-up and lasted.
    void reset() noexcept { failures_ = 0; }

private:
    // 2^20 x any sensible `min` is far beyond any sensible `max`; the cap keeps the shift defined.
    static constexpr unsigned max_doublings = 20;

    milliseconds min_;
    milliseconds max_;
    unsigned failures_ = 0;
};

/**
 * The most connection attempts one client can start within any span of `window`, failing each:
 * one at the start of the span, then one after each wait, every wait at its shortest and counted
 * from the first (the shortest) on. What a test may allow a client facing a refusing Redis.
 */
inline std::int64_t most_attempts_within(std::chrono::milliseconds window,
                                         std::chrono::milliseconds min,
                                         std::chrono::milliseconds max) {
    reconnect_backoff backoff(min, max);
    std::minstd_rand rng; // next() only advances the schedule here; the draw is not used
    std::int64_t attempts = 1;
    std::chrono::milliseconds elapsed{0};
    for (;;) {
        elapsed += backoff.shortest();
        if (elapsed > window || backoff.shortest().count() <= 0) {
            return attempts;
        }
        ++attempts;
        backoff.next(rng);
    }
}

} // namespace sluice::redis
