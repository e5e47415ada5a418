// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/io/net.hpp"

#include <boost/asio/ip/address.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sluice {

/// What a lookup of a host name found: its addresses, or why there are none.
struct lookup_result {
    error_code ec;
    std::vector<net::ip::address> addresses;
};

/**
 * Resolves a host name, blocking. Runs on a thread of its own, never on a worker's: it must be
 * safe to call from any thread, and may take any time or never return.
 */
using lookup_function = std::function<lookup_result(const std::string& host)>;

/// The system's resolver (getaddrinfo, through Asio's synchronous resolver).
lookup_result system_lookup(const std::string& host);

/**
 * The addresses of a host name, for one user on one worker (an upstream pool, a Redis client),
 * so that a connect need not wait for DNS. Not thread-safe: used on its executor only.
 *
 * Why not Asio's resolver: Asio 1.81 runs an io_context's lookups on one private thread that
 * calls the blocking getaddrinfo, which no cancel interrupts. When DNS stops answering, every
 * connect queued behind the stuck call, for tens of seconds, and the io_context's destruction
 * joined that thread, so the exit waited for it too. Here each lookup runs on a detached thread
 * of its own that the cache abandons when it is destroyed (the result is then dropped, and
 * nothing of the cache or its io_context is touched), at most one lookup per host at a time
 * (so a DNS that hangs costs one stuck thread per host and cache, not one per connect).
 *
 * Several hosts are kept, the `max_hosts` last asked for: after a reload that changes the host,
 * requests of the old configuration may still be forwarded (held by shaping), and each finds its
 * own host's addresses rather than taking the other's away; the new host's lookup starts at once,
 * not after a stuck lookup of the old one.
 *
 * The addresses are used while the next lookup runs, however old they are (a DNS outage then
 * keeps the upstream reachable where it has not moved); a failed lookup keeps them, and is
 * tried again a second later (or after `interval`, if shorter).
 */
class address_cache {
public:
    using time_point = std::chrono::steady_clock::time_point;

    /// A failed lookup is tried again no sooner than this (or the interval, if shorter).
    static constexpr std::chrono::milliseconds retry_after_failure{1'000};

    /// Hosts kept; asking for one more forgets the least recently asked for.
    static constexpr std::size_t max_hosts = 4;

    /**
     * `label` says in its log lines what the host is ("upstream", "redis"). `failures`, when
     * given, counts every lookup that failed (one that could not start too): the metric an
     * operator watches, where the warnings are throttled. It must outlive the cache.
     */
    address_cache(const executor& ex,
                  lookup_function lookup,
                  std::string label,
                  std::atomic<std::uint64_t>* failures = nullptr);

    /// Abandons a lookup in flight: its thread finishes alone, and drops its result.
    ~address_cache();

    address_cache(const address_cache&) = delete;
    address_cache& operator=(const address_cache&) = delete;

    /**
     * The addresses last found for `host`: stale ones too, none before its first lookup
     * succeeds. Starts a lookup of `host`, unless one is in flight, when they are due: never
     * looked up, found more than `interval` before `now`, or the last lookup failed. Never
     * suspends. The reference is valid until the next call.
     */
    const std::vector<net::ip::address>&
    addresses(const std::string& host, std::chrono::milliseconds interval, time_point now);

    /**
     * Waits until the lookup in flight for `host` completes, or `deadline` (steady_clock)
     * passes, or the caller's cancellation slot is signalled. Completes on the cache's executor;
     * at once when no lookup of `host` is in flight. A lookup still running at the deadline goes
     * on, to fill the cache for later.
     */
    awaitable<void> wait_for_lookup(std::string host, time_point deadline);

    /// Why the last lookup of `host` failed; clear when it succeeded, or none has completed.
    error_code last_error(const std::string& host) const noexcept;

    bool lookup_in_flight(const std::string& host) const noexcept;

    /// Whether a lookup of any host is in flight (tests).
    bool lookup_in_flight() const noexcept;

    /// Lookups started since construction (tests; a lookup that could not start counts).
    std::uint64_t lookups_started() const noexcept;

private:
    struct state;
    struct handoff;

    std::shared_ptr<state> state_;
};

} // namespace sluice
