// SPDX-License-Identifier: Apache-2.0
#pragma once

// Limits and a key's state for the algorithms' unit tests.

#include "sluice/limiter/algorithm.hpp"

#include <chrono>
#include <cstdint>
#include <utility>

namespace sluice::limiter::test {

using std::chrono::milliseconds;

inline config::limit token(std::int64_t capacity, double refill_rate) {
    config::limit l;
    l.algo = config::algorithm::token_bucket;
    l.capacity = capacity;
    l.refill_rate = refill_rate;
    return l;
}

inline config::limit windowed(config::algorithm algo, std::int64_t count, milliseconds window) {
    config::limit l;
    l.algo = algo;
    l.limit_count = count;
    l.window = window;
    return l;
}

// A key's stored state, committed only on admission, as a store keeps it.
class key_state {
public:
    explicit key_state(config::limit l)
        : limit_(std::move(l)) {}

    decision request(double now_ms) {
        auto next = state_;
        auto d = acquire(next, exists_, limit_, now_ms);
        if (d.allowed) {
            state_ = std::move(next);
            exists_ = true;
        }
        return d;
    }

private:
    config::limit limit_;
    state state_;
    bool exists_ = false;
};

} // namespace sluice::limiter::test
