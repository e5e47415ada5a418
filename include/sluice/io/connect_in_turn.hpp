// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/io/net.hpp"
#include "sluice/io/timed_stream.hpp"

#include <chrono>
#include <span>

namespace sluice {

/**
 * Connects `stream` to the first of `endpoints` that takes it, trying each in turn, each with an
 * equal share of what is left before `deadline`: an address that drops SYNs costs its share, not
 * the whole, so that a live one after it is still reached in time (nginx gives each upstream
 * server its own `proxy_connect_timeout`, then tries the next). Nothing is tried once `deadline`
 * has passed. Ends with the last attempt's error (beast::error::timeout for one cut short), or
 * host_not_found when there is no endpoint; the stream's deadline is `deadline` again after.
 */
awaitable<error_code> connect_in_turn(timed_stream& stream,
                                      std::span<const tcp::endpoint> endpoints,
                                      std::chrono::steady_clock::time_point deadline);

} // namespace sluice
