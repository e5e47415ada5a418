// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/algorithm.hpp"

namespace sluice::limiter {
namespace {

// Makes `current` hold alternative T, reporting whether it already held one.
template <typename T>
T& hold(state& current, bool& exists) {
    if (!std::holds_alternative<T>(current)) {
        current.emplace<T>();
        exists = false;
    }
    return std::get<T>(current);
}

} // namespace

decision acquire(state& current, bool exists, const config::limit& limit, double now_ms) {
    switch (limit.algo) {
    case config::algorithm::leaky_bucket: {
        auto& s = hold<leaky_bucket_state>(current, exists);
        return leaky_bucket_acquire(s, exists, limit, now_ms);
    }
    case config::algorithm::token_bucket: {
        auto& s = hold<token_bucket_state>(current, exists);
        return token_bucket_acquire(s, exists, limit, now_ms);
    }
    case config::algorithm::fixed_window: {
        auto& s = hold<fixed_window_state>(current, exists);
        return fixed_window_acquire(s, exists, limit, now_ms);
    }
    case config::algorithm::sliding_window: {
        auto& s = hold<sliding_window_state>(current, exists);
        return sliding_window_acquire(s, exists, limit, now_ms);
    }
    case config::algorithm::concurrency: {
        auto& s = hold<concurrency_state>(current, exists);
        return concurrency_acquire(s, limit);
    }
    }
    return {};
}

bool release(state& current) noexcept {
    auto* s = std::get_if<concurrency_state>(&current);
    if (s == nullptr) {
        return false;
    }
    concurrency_release(*s);
    return s->in_flight == 0;
}

} // namespace sluice::limiter
