// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/core/log_throttle.hpp"

#include <exception>
#include <string_view>

namespace sluice {

/**
 * The completion of a spawned coroutine (`co_spawn(ex, run(), log_escaped{"what"})`): an
 * exception escaping one is a bug, never control flow, and `net::detached` would drop it unseen
 * (an accept loop would then stop accepting without a word). Logs it as an error naming
 * `what`; through `throttle` where a peer can make it happen again and again (a session).
 */
struct log_escaped {
    std::string_view what;
    log_throttle* throttle = nullptr;

    void operator()(std::exception_ptr e) const noexcept;
};

} // namespace sluice
