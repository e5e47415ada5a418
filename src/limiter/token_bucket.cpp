// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/token_bucket.hpp"

#include "sluice/limiter/leaky_bucket.hpp"

namespace sluice::limiter {

decision token_bucket_acquire(token_bucket_state& state,
                              bool exists,
                              const config::limit& limit,
                              double now_ms,
                              std::int64_t cost) noexcept {
    leaky_bucket_state queue{limit.capacity - state.tokens, state.last_refill};
    auto d = leak_and_admit(
        queue, exists, limit.capacity, limit.refill_rate, false, std::nullopt, now_ms, cost);
    state.tokens = limit.capacity - queue.queue_size;
    state.last_refill = queue.last_leak;
    return d;
}

milliseconds token_bucket_settle(token_bucket_state& state,
                                 bool exists,
                                 const config::limit& limit,
                                 double now_ms,
                                 std::int64_t delta) noexcept {
    // A debt is a queue above capacity: the tokens below zero.
    leaky_bucket_state queue{limit.capacity - state.tokens, state.last_refill};
    const auto reset = leak_and_settle(queue, exists, limit.refill_rate, now_ms, delta);
    state.tokens = limit.capacity - queue.queue_size;
    state.last_refill = queue.last_leak;
    return reset;
}

} // namespace sluice::limiter
