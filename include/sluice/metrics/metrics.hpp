// SPDX-License-Identifier: Apache-2.0
#pragma once

// Server-owned counters, exported in one place (Seastar's httpd keeps its counters so). Counters
// are relaxed atomics shared by all workers: an increment is one uncontended-enough instruction
// and a scrape reads a consistent-enough snapshot; nothing here takes a lock on the request path.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

namespace sluice::metrics {

using counter = std::atomic<std::uint64_t>;
using gauge = std::atomic<std::int64_t>;

/// A gauge on a cache line of its own, for one of several threads to write (see
/// `registry::worker_connections`).
struct alignas(64) padded_gauge {
    gauge value{0};
};

inline void bump(counter& c, std::uint64_t n = 1) noexcept {
    c.fetch_add(n, std::memory_order_relaxed);
}

/**
 * Adds an amount that a peer's figure decides (a cost: up to 2^53 each, so that 2,048 of them
 * would wrap a plain sum), stopping at the largest value: a scraper takes a wrap for a counter
 * reset. Saturating as the limits are; `bump` stays one instruction for counts of requests.
 */
void add_amount(counter& c, std::uint64_t n) noexcept;

/// A latency histogram with fixed bucket bounds (seconds), Prometheus style (cumulative on export).
class histogram {
public:
    static constexpr std::array<double, 14> bounds{
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

    void observe(std::chrono::nanoseconds elapsed) noexcept;

    /// Appends the `_bucket`, `_sum` and `_count` lines for `name` with extra `labels` (may be "").
    void render(std::string& out, const std::string& name, const std::string& labels) const;

private:
    std::array<counter, bounds.size() + 1> buckets_{}; // the last one is +Inf
    /// In microseconds, each observation rounded: nanoseconds wrapped (Prometheus takes a wrap
    /// for a counter reset) after 1.8e19 ns in all, 21 days of 10k long requests at once.
    counter sum_us_{0};
};

/**
 * A histogram of signed whole amounts (a cost settlement's `actual - reserved`, issue 15), with
 * bucket bounds symmetric around 0 in decades: a refund is negative, a further charge positive,
 * and, amounts being integers, the bucket (-1, 0] holds exactly the settlements that matched
 * their reservation. Prometheus buckets are cumulative upper bounds (`le`), so negative bounds
 * need nothing special; only `_sum` is no longer monotonic (refunds lower it), so take `rate()`
 * of `_count` and of the buckets, not of `_sum`.
 */
class amount_histogram {
public:
    static constexpr std::array<std::int64_t, 15> bounds{-1000000,
                                                         -100000,
                                                         -10000,
                                                         -1000,
                                                         -100,
                                                         -10,
                                                         -1,
                                                         0,
                                                         1,
                                                         10,
                                                         100,
                                                         1000,
                                                         10000,
                                                         100000,
                                                         1000000};

    void observe(std::int64_t amount) noexcept;

    /// As `histogram::render`.
    void render(std::string& out, const std::string& name, const std::string& labels) const;

private:
    std::array<counter, bounds.size() + 1> buckets_{}; // the last one is +Inf
    gauge sum_{0};
};

/// How one request ended, as far as the limiter is concerned.
enum class decision_kind {
    allowed,          // forwarded at once
    delayed,          // held by shaping, then forwarded
    rejected,         // 429
    dry_run_rejected, // a dry-run limit would have rejected; forwarded
    failed_open,      // the store failed; forwarded (failure-mode open)
    failed_closed,    // the store failed; 503 (failure-mode closed)
};

inline constexpr std::size_t decision_kind_count = 6;

const char* to_string(decision_kind kind) noexcept;

/// Per-rule request counters; `rule` is the rule's name, or "fallback".
struct rule_counters {
    std::array<counter, decision_kind_count> by_decision{};

    void count(decision_kind kind) noexcept { bump(by_decision[static_cast<std::size_t>(kind)]); }

    /// CONCURRENCY slots of the rule's limits held by this instance's requests now.
    gauge in_flight{0};

    // Cost-weighted limits (a `cost` block), summed over the rule's limits, for the admitted
    // requests that each limit charged. A reservation is counted once its final charge is known:
    // when the response is over for a limit with `cost.response`, at admission for one without
    // (its reservation stands), so that both totals always count the same reservations.
    counter cost_reserved{0};           // what those requests reserved
    counter cost_settled{0};            // what they were finally charged: reserved + the settlement
    counter cost_missing{0};            // settlements without a usable figure: `on-missing` applied
    amount_histogram cost_settle_error; // `actual - reserved` of settlements with a figure
};

/// Every metric sluice exports. One instance per process, owned by the app.
class registry {
public:
    /// The counters of rule `name`, created on first use; the reference stays valid for the
    /// registry's lifetime (rules are resolved when a config is loaded, not per request).
    rule_counters& rule(const std::string& name);

    // Connections and requests.
    gauge connections_open{0};
    counter connections_total{0};
    counter connections_over_cap_total{0}; // came at server.max-connections
    gauge connections_parked{0};        // idle keep-alive connections parked without their buffers
    gauge request_body_buffer_bytes{0}; // allocated by request bodies read ahead, held in memory
    counter bad_requests_total{0};    // 400/413/414/431 answered by sluice itself (header or body)
    counter client_timeouts_total{0}; // 408: a header or body not in within its timeout
    counter dropped_header_fields_total{0}; // names with '_': server.headers-with-underscores

    // Shaping.
    gauge held_now{0};
    counter held_total{0};
    counter held_overflow_total{0};  // refused with 503: rate-limit.max-held reached
    counter held_abandoned_total{0}; // the client left while held: never forwarded
    counter held_drained_total{0};   // answered 503: a drain stops the worker first
    histogram slot_wait;             // queued for a CONCURRENCY slot: until decided again

    // Upstream.
    // What the forwarder saw of the upstream; a client's failure counts in none of these.
    histogram upstream_latency;               // responses only: forwarding start → response end
    std::array<counter, 6> upstream_status{}; // index 1..5 = 1xx..5xx, 0 = no response
    counter upstream_connect_errors_total{0};
    counter upstream_timeouts_total{0};
    counter upstream_busy_total{0};   // 503: upstream.max-connections in use for upstream.timeout
    gauge tunnels_open{0};            // WebSocket upgrades being forwarded and tunnels open
    counter tunnels_refused_total{0}; // 503: upstream.max-tunnels reached
    counter upstream_lookup_failures_total{0}; // the upstream's host name: DNS lookups failed

    // Store.
    histogram redis_latency;
    counter redis_errors_total{0};
    counter redis_timeouts_total{0};
    counter store_errors_total{0};
    // Sentinel: a switch of the primary acted on; Cluster: a primary that left a worker's map
    // with its slots owned by another node (each worker that saw it counts it).
    counter redis_failovers_total{0};
    counter redis_lookup_failures_total{0};  // Redis's, a Sentinel's or a node's host name
    counter memory_store_evictions_total{0}; // rate-limit.memory.max-keys reached

    // Logging: lines that never reached stdout or stderr (a reader that fell behind by more
    // than the queue, a failed write).
    counter log_lines_dropped_total{0};

    // Redis Cluster (issue 16), summed over the workers (each reads its own map).
    counter redis_moved_total{0};    // MOVED replies followed
    counter redis_ask_total{0};      // ASK replies followed
    counter redis_tryagain_total{0}; // TRYAGAIN replies sent again
    counter redis_map_changed_total{0};
    counter redis_map_unchanged_total{0};
    counter redis_map_failed_total{0}; // no node answered CLUSTER SLOTS
    counter redis_give_backs_total{0}; // multi-slot requests refused after a slot charged them

    /// Nodes with a `sluice_redis_calls_total` series of their own, at most: the first this many
    /// nodes sent to since start-up.
    static constexpr std::size_t max_node_series = 64;

    /// Script calls sent to the Cluster node `node` ("host:port"), created on first use; past
    /// `max_node_series` nodes, a new node's calls count under node="other" (the addresses come
    /// from the cluster's replies: a Cluster on Kubernetes gets new ones on every pod restart, a
    /// hostile one with every MOVED). The reference stays valid for the registry's lifetime.
    counter& redis_node_calls(const std::string& node);

    /// Makes the per-worker gauges of `worker_connections`, all 0: once, at start-up, before any
    /// is used or rendered.
    void count_workers(std::size_t workers);

    /// Client connections open now, per worker (index = worker): kept by
    /// http::connection_balancer, which reads them to spread connections. Empty until
    /// `count_workers`.
    std::span<padded_gauge> worker_connections() noexcept {
        return {worker_connections_.get(), workers_};
    }

    /// The whole registry in the Prometheus text exposition format (version 0.0.4).
    std::string render() const;

private:
    /// The per-rule families of every rule: requests by decision, CONCURRENCY slots held.
    void render_rule_metrics(std::string& out) const;

    /// The per-rule families of cost-weighted limits (issue 15).
    void render_cost_metrics(std::string& out) const;

    /// The Redis Cluster families with labels.
    void render_cluster_metrics(std::string& out) const;

    std::unique_ptr<padded_gauge[]> worker_connections_;
    std::size_t workers_ = 0;
    mutable std::mutex rules_mutex_;
    std::map<std::string, std::unique_ptr<rule_counters>> rules_;
    /// Guarded by rules_mutex_ too: nodes are added when a worker first sends to one. At most
    /// `max_node_series` nodes, and "other".
    std::map<std::string, std::unique_ptr<counter>> node_calls_;
};

} // namespace sluice::metrics
