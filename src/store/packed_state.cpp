// SPDX-License-Identifier: Apache-2.0
#include "store/packed_state.hpp"

#include "sluice/core/saturate.hpp"

#include <type_traits>
#include <utility>
#include <variant>

namespace sluice::store {
namespace {

using limiter::concurrency_state;
using limiter::fixed_window_state;
using limiter::leaky_bucket_state;
using limiter::sliding_window_state;
using limiter::token_bucket_state;

template <std::size_t index, class T>
constexpr bool alternative_is =
    std::is_same_v<std::variant_alternative_t<index, limiter::state>, T>;

// The kinds are the variant's indices: a new alternative must be given its packing here.
constexpr std::uint8_t leaky = 0, token = 1, fixed = 2, sliding = 3, concurrency = 4;
static_assert(alternative_is<leaky, leaky_bucket_state> &&
              alternative_is<token, token_bucket_state> &&
              alternative_is<fixed, fixed_window_state> &&
              alternative_is<sliding, sliding_window_state> &&
              alternative_is<concurrency, concurrency_state> &&
              std::variant_size_v<limiter::state> == 5);
static_assert(fresh_kind == leaky);
static_assert(sizeof(packed_state) == 24);

} // namespace

limiter::state unpack(const packed_state& packed, std::uint8_t kind) {
    switch (kind) {
    case token:
        return token_bucket_state{packed.count, {packed.ms, packed.ms_fraction}};
    case fixed:
        return fixed_window_state{packed.count, packed.ms};
    case sliding:
        return *packed.sliding;
    case concurrency:
        return concurrency_state{packed.count, saturating_cast<std::uint64_t>(packed.ms)};
    default:
        return leaky_bucket_state{packed.count, {packed.ms, packed.ms_fraction}};
    }
}

limiter::state take(packed_state& packed, std::uint8_t kind) noexcept {
    if (kind == sliding) {
        return std::move(*packed.sliding);
    }
    return unpack(packed, kind);
}

void pack(limiter::state&& state, packed_state& packed, std::uint8_t& kind) {
    if (auto* s = std::get_if<sliding_window_state>(&state)) {
        if (kind != sliding) {
            packed.sliding = new sliding_window_state(std::move(*s));
            packed.ms = 0;
            packed.ms_fraction = 0;
            kind = sliding;
        } else {
            *packed.sliding = std::move(*s);
        }
        return;
    }
    clear(packed, kind);
    std::visit(
        [&packed](auto& s) {
            using T = std::decay_t<decltype(s)>;
            if constexpr (std::is_same_v<T, concurrency_state>) {
                packed.count = s.in_flight;
                packed.ms = static_cast<double>(s.epoch); // exact: the store counts them from 1
            } else if constexpr (std::is_same_v<T, leaky_bucket_state>) {
                packed.count = s.queue_size;
                packed.ms = s.last_leak.whole;
                packed.ms_fraction = s.last_leak.fraction;
            } else if constexpr (std::is_same_v<T, token_bucket_state>) {
                packed.count = s.tokens;
                packed.ms = s.last_refill.whole;
                packed.ms_fraction = s.last_refill.fraction;
            } else if constexpr (std::is_same_v<T, fixed_window_state>) {
                packed.count = s.count;
                packed.ms = s.window_start_ms;
            }
        },
        state);
    kind = static_cast<std::uint8_t>(state.index());
}

void clear(packed_state& packed, std::uint8_t& kind) noexcept {
    if (kind == sliding) {
        delete packed.sliding;
    }
    packed.count = 0;
    packed.ms = 0;
    packed.ms_fraction = 0;
    kind = fresh_kind;
}

} // namespace sluice::store
