// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/token_bucket.hpp"

#include "sluice/limiter/leaky_bucket.hpp"

namespace sluice::limiter {

decision token_bucket_acquire(token_bucket_state& state,
                              bool exists,
                              const config::limit& limit,
                              double now_ms) noexcept {
    leaky_bucket_state queue{limit.capacity - state.tokens, state.last_refill_ms};
    auto d = leak_and_admit(
        queue, exists, limit.capacity, limit.refill_rate, false, std::nullopt, now_ms);
    state.tokens = limit.capacity - queue.queue_size;
    state.last_refill_ms = queue.last_leak_ms;
    return d;
}

} // namespace sluice::limiter
