// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/limiter/concurrency.hpp"
#include "sluice/limiter/fixed_window.hpp"
#include "sluice/limiter/leaky_bucket.hpp"
#include "sluice/limiter/sliding_window.hpp"
#include "sluice/limiter/token_bucket.hpp"

#include <variant>

namespace sluice::limiter {

/// The state of one key under any algorithm; the alternative matches `config::limit::algo`.
using state = std::variant<leaky_bucket_state,
                           token_bucket_state,
                           fixed_window_state,
                           sliding_window_state,
                           concurrency_state>;

/**
 * One request against `limit` at `now_ms`, dispatching on the limit's algorithm. A stored state
 * of another algorithm (the limit changed on reload) counts as no state. On return `current`
 * holds the state to store if the caller commits. Allocates only for SLIDING_WINDOW.
 */
decision acquire(state& current, bool exists, const config::limit& limit, double now_ms);

/// CONCURRENCY: gives back a slot `acquire` took. A state of another algorithm (the limit changed
/// on reload) is left as it is. True when the key then holds no slot (nothing to remember).
bool release(state& current) noexcept;

} // namespace sluice::limiter
