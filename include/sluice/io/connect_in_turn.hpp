// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/io/net.hpp"
#include "sluice/io/timed_stream.hpp"

#include <chrono>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace sluice {

/**
 * The addresses whose connect failed lately (refused, or no answer within its share of the
 * deadline), so that the next connects try them after the others for `fail_timeout`: nginx
 * takes a server that failed out of its turn for `fail_timeout` (10 s) as well. One that failed
 * is never skipped, only tried last: when every other fails too, it still gets its turn. Each
 * upstream pool (one a worker) keeps its own; a host's addresses are few, and at most
 * `max_remembered` are remembered, the oldest failure forgotten first.
 */
class recent_failures {
public:
    using time_point = std::chrono::steady_clock::time_point;

    static constexpr std::chrono::seconds fail_timeout{10};
    static constexpr std::size_t max_remembered = 16;

    /// `endpoints` in the order to try them at `now`: those with no failure within
    /// fail_timeout first, then the others, each group in its own order.
    std::vector<tcp::endpoint> order(std::span<const tcp::endpoint> endpoints,
                                     time_point now) const;

    void failed(const tcp::endpoint& endpoint, time_point now);

    void succeeded(const tcp::endpoint& endpoint);

private:
    bool failed_lately(const tcp::endpoint& endpoint, time_point now) const;

    std::vector<std::pair<tcp::endpoint, time_point>> failures_;
};

/**
 * Connects `stream` to the first of `endpoints` that takes it, in the order `failures` gives
 * (the addresses that failed lately last), trying each in turn, each with an equal share of what
 * is left before `deadline`: an address that drops SYNs costs its share, not the whole, so that
 * a live one after it is still reached in time (nginx gives each upstream server its own
 * `proxy_connect_timeout`, then tries the next), and costs it again only once its failure is
 * `fail_timeout` old. Nothing is tried once `deadline` has passed. Ends with the last attempt's
 * error (beast::error::timeout for one cut short), or host_not_found when there is no endpoint;
 * the stream's deadline is `deadline` again after. Each attempt's outcome goes to `failures`.
 */
awaitable<error_code> connect_in_turn(timed_stream& stream,
                                      std::span<const tcp::endpoint> endpoints,
                                      std::chrono::steady_clock::time_point deadline,
                                      recent_failures& failures);

} // namespace sluice
