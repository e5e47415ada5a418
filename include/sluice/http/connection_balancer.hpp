// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/metrics/metrics.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

namespace sluice::http {

/**
 * How many client connections each worker has open, and which worker the next one should go to
 * (what Envoy calls exact balance). The workers accept from one listening socket, the first
 * free one first (see http::open_acceptor), which spreads short connections well but leaves
 * keep-alive connections opened together wherever they landed: in 10 rounds of
 * `bench/worker_balance` (two workers, wrk's 64 connections opened afresh each round), all 64
 * went to one worker once and the CPU split 345 to 80 once (52.6k and 48.9k requests/s, where
 * the median round made 59.1k). A worker that accepts a connection hands it to the worker `pick`
 * names (see `accept_loop`), and counts it there at once, so that a burst accepted by one worker
 * spreads too.
 *
 * Thread-safe: the counts are the registry's `sluice_worker_connections_open` gauges, relaxed
 * atomics on cache lines of their own, read at each accept and written at each accept and close,
 * never per request.
 */
class connection_balancer {
public:
    /// Keeps its counts in `counts`, one per worker (index = worker), which must outlive it.
    explicit connection_balancer(std::span<metrics::padded_gauge> counts) noexcept
        : counts_(counts) {}

    std::size_t workers() const noexcept { return counts_.size(); }

    /**
     * The worker the next connection accepted by worker `accepting` should go to: `accepting`
     * itself unless another has at least two fewer open, then the one with the fewest (the
     * first by index on a tie). The counts stay within two of each other. The margin spares a
     * hand-off (a cross-thread post, and the socket's move between reactors: two system calls)
     * where the workers are as good as even, as short connections keep them.
     */
    std::size_t pick(std::size_t accepting) const noexcept;

    /// A connection started (or was handed) to `worker`.
    void opened(std::size_t worker) noexcept;

    /// A connection of `worker` ended.
    void closed(std::size_t worker) noexcept;

    /// The connections `worker` has open.
    std::int64_t open(std::size_t worker) const noexcept;

private:
    std::span<metrics::padded_gauge> counts_;
};

} // namespace sluice::http
