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

decision
acquire(state& current, bool exists, const config::limit& limit, double now_ms, std::int64_t cost) {
    switch (limit.algo) {
    case config::algorithm::leaky_bucket: {
        auto& s = hold<leaky_bucket_state>(current, exists);
        return leaky_bucket_acquire(s, exists, limit, now_ms, cost);
    }
    case config::algorithm::token_bucket: {
        auto& s = hold<token_bucket_state>(current, exists);
        return token_bucket_acquire(s, exists, limit, now_ms, cost);
    }
    case config::algorithm::fixed_window: {
        auto& s = hold<fixed_window_state>(current, exists);
        return fixed_window_acquire(s, exists, limit, now_ms, cost);
    }
    case config::algorithm::sliding_window: {
        auto& s = hold<sliding_window_state>(current, exists);
        return sliding_window_acquire(s, exists, limit, now_ms, cost);
    }
    case config::algorithm::concurrency: {
        auto& s = hold<concurrency_state>(current, exists);
        return concurrency_acquire(s, limit);
    }
    }
    return {};
}

std::optional<milliseconds> settle(state& current,
                                   bool exists,
                                   const config::limit& limit,
                                   double now_ms,
                                   std::int64_t delta) noexcept {
    if (!settles(limit.algo)) {
        return std::nullopt;
    }
    const bool own = exists && ((limit.algo == config::algorithm::leaky_bucket &&
                                 std::holds_alternative<leaky_bucket_state>(current)) ||
                                (limit.algo == config::algorithm::token_bucket &&
                                 std::holds_alternative<token_bucket_state>(current)) ||
                                (limit.algo == config::algorithm::fixed_window &&
                                 std::holds_alternative<fixed_window_state>(current)) ||
                                (limit.algo == config::algorithm::sliding_window &&
                                 std::holds_alternative<sliding_window_state>(current)));
    // A refund on a fresh state gives back nothing: storing it would only hold a key. A key
    // holding another algorithm's state (a reload changed the limit while the request ran)
    // belongs to the new limit: settling the old one's charge there would replace it, a
    // CONCURRENCY count of slots in use among them, which would then let in more than its limit.
    if (delta == 0 || (exists && !own) || (delta < 0 && (!own || !takes_refunds(limit)))) {
        return std::nullopt;
    }
    switch (limit.algo) {
    case config::algorithm::leaky_bucket: {
        auto& s = hold<leaky_bucket_state>(current, exists);
        return leaky_bucket_settle(s, exists, limit, now_ms, delta);
    }
    case config::algorithm::token_bucket: {
        auto& s = hold<token_bucket_state>(current, exists);
        return token_bucket_settle(s, exists, limit, now_ms, delta);
    }
    case config::algorithm::fixed_window: {
        auto& s = hold<fixed_window_state>(current, exists);
        return fixed_window_settle(s, exists, limit, now_ms, delta);
    }
    case config::algorithm::sliding_window: {
        auto& s = hold<sliding_window_state>(current, exists);
        return sliding_window_settle(s, exists, limit, now_ms, delta);
    }
    case config::algorithm::concurrency:
        break;
    }
    return std::nullopt;
}

bool release(state& current, std::uint64_t epoch) noexcept {
    auto* s = std::get_if<concurrency_state>(&current);
    if (s == nullptr) {
        return false;
    }
    concurrency_release(*s, epoch);
    return s->in_flight == 0;
}

} // namespace sluice::limiter
