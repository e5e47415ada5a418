// SPDX-License-Identifier: Apache-2.0
#include "sluice/metrics/metrics.hpp"

#include "sluice/core/saturate.hpp"

#include <fmt/format.h>

namespace sluice::metrics {
namespace {

std::uint64_t load(const counter& c) noexcept {
    return c.load(std::memory_order_relaxed);
}

void header(std::string& out, const char* name, const char* type, const char* help) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void single(std::string& out, const char* name, const char* type, const char* help, double value) {
    header(out, name, type, help);
    fmt::format_to(std::back_inserter(out), "{} {}\n", name, value);
}

// Prometheus label values escape backslash, double quote and newline.
std::string escape_label(const std::string& value) {
    std::string out;
    out.reserve(value.size());
    for (char c : value) {
        if (c == '\\' || c == '"') {
            out += '\\';
            out += c;
        } else if (c == '\n') {
            out += "\\n";
        } else {
            out += c;
        }
    }
    return out;
}

} // namespace

namespace {

// The `_bucket`, `_sum` and `_count` lines of a histogram: `buckets` holds one count per bound
// and then the +Inf bucket's, each alone (they are summed here, Prometheus buckets being
// cumulative); `sum` is already in the metric's unit.
template <typename Bound, std::size_t N>
void render_histogram(std::string& out,
                      const std::string& name,
                      const std::string& labels,
                      const std::array<Bound, N>& bounds,
                      const std::array<counter, N + 1>& buckets,
                      double sum) {
    const std::string sep = labels.empty() ? "" : ",";
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < N; ++i) {
        cumulative += load(buckets[i]);
        fmt::format_to(std::back_inserter(out),
                       "{}_bucket{{{}{}le=\"{}\"}} {}\n",
                       name,
                       labels,
                       sep,
                       bounds[i],
                       cumulative);
    }
    cumulative += load(buckets.back());
    fmt::format_to(std::back_inserter(out),
                   "{}_bucket{{{}{}le=\"+Inf\"}} {}\n",
                   name,
                   labels,
                   sep,
                   cumulative);
    const auto braces = labels.empty() ? std::string{} : "{" + labels + "}";
    fmt::format_to(std::back_inserter(out),
                   "{}_sum{} {}\n{}_count{} {}\n",
                   name,
                   braces,
                   sum,
                   name,
                   braces,
                   cumulative);
}

} // namespace

void histogram::observe(std::chrono::nanoseconds elapsed) noexcept {
    const double seconds = std::chrono::duration<double>(elapsed).count();
    std::size_t i = 0;
    while (i < bounds.size() && seconds > bounds[i]) {
        ++i;
    }
    bump(buckets_[i]);
    // To the nearest microsecond: the sum of 2^64 ns would wrap after 584 years of latency in
    // all, 21 days of 10k requests in flight; 2^64 us take 584k years.
    const auto ns = static_cast<std::uint64_t>(elapsed.count() > 0 ? elapsed.count() : 0);
    bump(sum_us_, (ns + 500) / 1000);
}

void histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
    render_histogram(out, name, labels, bounds, buckets_, static_cast<double>(load(sum_us_)) / 1e6);
}

namespace {

// `a += n`, stopping at T's bounds rather than wrapping.
template <typename T>
void add_saturating(std::atomic<T>& a, T n) noexcept {
    auto now = a.load(std::memory_order_relaxed);
    while (!a.compare_exchange_weak(now, saturating_add(now, n), std::memory_order_relaxed)) {
    }
}

} // namespace

void add_amount(counter& c, std::uint64_t n) noexcept {
    add_saturating(c, n);
}

void amount_histogram::observe(std::int64_t amount) noexcept {
    std::size_t i = 0;
    while (i < bounds.size() && amount > bounds[i]) {
        ++i;
    }
    bump(buckets_[i]);
    // Saturating, as add_amount: settlements of 2^53 each would wrap it after 1,024.
    add_saturating(sum_, amount);
}

void amount_histogram::render(std::string& out,
                              const std::string& name,
                              const std::string& labels) const {
    render_histogram(out,
                     name,
                     labels,
                     bounds,
                     buckets_,
                     static_cast<double>(sum_.load(std::memory_order_relaxed)));
}

const char* to_string(decision_kind kind) noexcept {
    switch (kind) {
    case decision_kind::allowed:
        return "allowed";
    case decision_kind::delayed:
        return "delayed";
    case decision_kind::rejected:
        return "rejected";
    case decision_kind::dry_run_rejected:
        return "dry_run_rejected";
    case decision_kind::failed_open:
        return "failed_open";
    case decision_kind::failed_closed:
        return "failed_closed";
    }
    return "unknown";
}

rule_counters& registry::rule(const std::string& name) {
    std::lock_guard lock(rules_mutex_);
    auto& slot = rules_[name];
    if (!slot) {
        slot = std::make_unique<rule_counters>();
    }
    return *slot;
}

counter& registry::redis_node_calls(const std::string& node) {
    // No node is named so: a node's name has its port.
    static const std::string other_nodes = "other";
    std::lock_guard lock(rules_mutex_);
    auto it = node_calls_.find(node);
    if (it == node_calls_.end()) {
        const bool room = node_calls_.size() - node_calls_.count(other_nodes) < max_node_series;
        it = node_calls_.try_emplace(room ? node : other_nodes).first;
    }
    if (!it->second) {
        it->second = std::make_unique<counter>(0);
    }
    return *it->second;
}

void registry::count_workers(std::size_t workers) {
    worker_connections_ = std::make_unique<padded_gauge[]>(workers);
    workers_ = workers;
}

namespace {

/// A metric of one value: a counter or a gauge of the registry, with its name and help text.
struct scalar_metric {
    const char* name;
    const char* help;
    counter registry::*as_counter = nullptr;
    gauge registry::*as_gauge = nullptr;
};

/// Every counter and gauge sluice exports without labels, in the order they are rendered. A
/// field added to the registry is exported by adding its line here (metrics_test.cpp checks
/// that each name appears in the rendering).
constexpr scalar_metric scalar_metrics[] = {
    {"sluice_connections_open",
     "Client connections open now.",
     nullptr,
     &registry::connections_open},
    {"sluice_connections_total", "Client connections accepted.", &registry::connections_total},
    {"sluice_connections_over_cap_total",
     "Client connections that came at server.max-connections: each closed its worker's oldest "
     "idle connection, or was closed itself when none was idle.",
     &registry::connections_over_cap_total},
    {"sluice_connections_parked",
     "Idle keep-alive connections parked now: idle past a 100 ms grace, their buffers and request "
     "state freed until their next bytes.",
     nullptr,
     &registry::connections_parked},
    {"sluice_request_body_buffer_bytes",
     "Bytes allocated now by request bodies held in memory: read ahead up to "
     "server.request-buffer-size (or a json: limit's cost.max-body) as they arrive, freed once "
     "the request has gone upstream.",
     nullptr,
     &registry::request_body_buffer_bytes},
    {"sluice_bad_requests_total",
     "Requests answered 400/413/414/431 by sluice: a broken or too large header or body.",
     &registry::bad_requests_total},
    {"sluice_client_timeouts_total",
     "Requests answered 408 by sluice: the header did not arrive within server.header-timeout, "
     "or the body within server.body-timeout.",
     &registry::client_timeouts_total},
    {"sluice_dropped_header_fields_total",
     "Request header fields taken out because their name has an underscore "
     "(server.headers-with-underscores: drop).",
     &registry::dropped_header_fields_total},
    {"sluice_held_requests",
     "Requests held by shaping now (counted from before the limiter decides, so that "
     "rate-limit.max-held also bounds the requests being decided).",
     nullptr,
     &registry::held_now},
    {"sluice_held_requests_total",
     "Requests held by shaping before being forwarded.",
     &registry::held_total},
    {"sluice_held_overflow_total",
     "Requests refused with 503 because rate-limit.max-held was reached.",
     &registry::held_overflow_total},
    {"sluice_held_abandoned_total",
     "Held requests whose client disconnected; never forwarded.",
     &registry::held_abandoned_total},
    {"sluice_held_drained_total",
     "Held or queued requests answered 503 because a drain stops sluice before their wait ends; "
     "never forwarded.",
     &registry::held_drained_total},
    {"sluice_upstream_connect_errors_total",
     "Upstream connections that could not be made (answered 502).",
     &registry::upstream_connect_errors_total},
    {"sluice_upstream_timeouts_total",
     "Upstream responses that did not come within upstream.timeout (answered 504).",
     &registry::upstream_timeouts_total},
    {"sluice_upstream_busy_total",
     "Requests answered 503 because upstream.max-connections connections were in use for "
     "upstream.timeout (nothing sent upstream).",
     &registry::upstream_busy_total},
    {"sluice_tunnels_open",
     "WebSocket upgrades being forwarded and tunnels open now (what upstream.max-tunnels caps, "
     "per worker).",
     nullptr,
     &registry::tunnels_open},
    {"sluice_tunnels_refused_total",
     "WebSocket upgrades answered 503 because their worker had upstream.max-tunnels upgrades "
     "and tunnels already (nothing sent upstream).",
     &registry::tunnels_refused_total},
    {"sluice_upstream_lookup_failures_total",
     "DNS lookups of the upstream's host name that failed, summed over the workers (each looks "
     "it up every upstream.resolve-interval, every second after a failure). Connections go on "
     "to the addresses found before; with none, requests are answered 502.",
     &registry::upstream_lookup_failures_total},
    {"sluice_redis_errors_total",
     "Redis commands that failed (connection lost, error reply).",
     &registry::redis_errors_total},
    {"sluice_redis_timeouts_total",
     "Redis commands that got no reply within rate-limit.redis.timeout.",
     &registry::redis_timeouts_total},
    {"sluice_store_errors_total",
     "Requests the store could not decide (handled by failure-mode).",
     &registry::store_errors_total},
    {"sluice_redis_failovers_total",
     "Failovers followed. Sentinel: switches of the primary acted on (every worker's connection "
     "moved to the address the Sentinels gave). Redis Cluster: primaries that left a worker's "
     "slot map with their slots owned by another node (a replica promoted), counted by each "
     "worker that saw it.",
     &registry::redis_failovers_total},
    {"sluice_redis_lookup_failures_total",
     "DNS lookups that failed of the host names of Redis, the Sentinels or the Cluster's nodes, "
     "summed over every connection's lookups (every 30 s, every second while the server cannot "
     "be reached). Connections go on to the addresses found before; with none, the failure "
     "mode applies.",
     &registry::redis_lookup_failures_total},
    {"sluice_redis_give_backs_total",
     "Redis Cluster: requests whose limits span slots, refused after another slot charged them; "
     "each charge was given back (what all-or-none across slots costs).",
     &registry::redis_give_backs_total},
    {"sluice_memory_store_evictions_total",
     "Keys the memory store evicted while their state still mattered "
     "(rate-limit.memory.max-keys reached).",
     &registry::memory_store_evictions_total},
    {"sluice_log_lines_dropped_total",
     "Log lines (access log and diagnostics) that were not written: their reader fell behind by "
     "more than the 1 MiB each of stdout and stderr may queue (a stalled pipe or log driver), or "
     "the write failed. Requests never wait for the log.",
     &registry::log_lines_dropped_total},
};

/// A metric read from one field (`Field`: a pointer to a member of the registry or of a rule's
/// counters), with its name and help text.
template <typename Field>
struct field_metric {
    const char* name;
    const char* help;
    Field field;
};

/// The histograms of the registry.
constexpr field_metric<histogram registry::*> histogram_metrics[] = {
    {"sluice_upstream_latency_seconds",
     "Upstream time of answered requests, from the start of forwarding (connection included) to "
     "the response's last byte relayed to the client.",
     &registry::upstream_latency},
    {"sluice_concurrency_wait_seconds",
     "Time requests waited for a free CONCURRENCY slot (mode shape), until admitted or refused "
     "by another limit; a wait that ended in max-delay or the client leaving is not counted.",
     &registry::slot_wait},
    {"sluice_redis_command_duration_seconds",
     "Redis round-trip time of limiter scripts.",
     &registry::redis_latency},
};

/// The per-rule counters of cost-weighted limits.
constexpr field_metric<counter rule_counters::*> cost_counter_metrics[] = {
    {"sluice_cost_reserved_total",
     "Cost reserved by admitted requests of the rule's cost-weighted limits, counted with the "
     "settlement (at admission for a limit without cost.response).",
     &rule_counters::cost_reserved},
    {"sluice_cost_settled_total",
     "Cost those requests were finally charged: the reservation plus its settlement (actual - "
     "reserved, or on-missing's 0 or -reserved).",
     &rule_counters::cost_settled},
    {"sluice_cost_settle_missing_total",
     "Settlements whose response carried no usable figure, so on-missing applied.",
     &rule_counters::cost_missing},
};

} // namespace

void registry::render_cost_metrics(std::string& out) const {
    std::lock_guard lock(rules_mutex_);
    for (const auto& m : cost_counter_metrics) {
        header(out, m.name, "counter", m.help);
        for (const auto& [name, counters] : rules_) {
            fmt::format_to(std::back_inserter(out),
                           "{}{{rule=\"{}\"}} {}\n",
                           m.name,
                           escape_label(name),
                           load((*counters).*m.field));
        }
    }
    header(out,
           "sluice_cost_settle_error",
           "histogram",
           "actual - reserved of the settlements with a usable figure, in the limit's units "
           "(negative: a refund; _sum may decrease).");
    for (const auto& [name, counters] : rules_) {
        counters->cost_settle_error.render(
            out, "sluice_cost_settle_error", "rule=\"" + escape_label(name) + "\"");
    }
}

void registry::render_cluster_metrics(std::string& out) const {
    header(out,
           "sluice_redis_redirections_total",
           "counter",
           "Redis Cluster replies that sent a script call elsewhere (moved, ask) or again "
           "(tryagain).");
    const std::pair<const char*, const counter*> kinds[] = {{"moved", &redis_moved_total},
                                                            {"ask", &redis_ask_total},
                                                            {"tryagain", &redis_tryagain_total}};
    for (const auto& [kind, c] : kinds) {
        fmt::format_to(std::back_inserter(out),
                       "sluice_redis_redirections_total{{kind=\"{}\"}} {}\n",
                       kind,
                       load(*c));
    }
    header(out,
           "sluice_redis_map_refreshes_total",
           "counter",
           "Redis Cluster slot map reads (CLUSTER SLOTS) by what they found.");
    const std::pair<const char*, const counter*> results[] = {
        {"changed", &redis_map_changed_total},
        {"unchanged", &redis_map_unchanged_total},
        {"failed", &redis_map_failed_total}};
    for (const auto& [result, c] : results) {
        fmt::format_to(std::back_inserter(out),
                       "sluice_redis_map_refreshes_total{{result=\"{}\"}} {}\n",
                       result,
                       load(*c));
    }
    header(out,
           "sluice_redis_calls_total",
           "counter",
           "Script calls sent to each Redis Cluster node: the first 64 nodes sent to since "
           "start-up, each under its host:port, any later one under node=\"other\".");
    std::lock_guard lock(rules_mutex_);
    for (const auto& [node, c] : node_calls_) {
        fmt::format_to(std::back_inserter(out),
                       "sluice_redis_calls_total{{node=\"{}\"}} {}\n",
                       escape_label(node),
                       load(*c));
    }
}

void registry::render_rule_metrics(std::string& out) const {
    std::lock_guard lock(rules_mutex_);
    header(out, "sluice_requests_total", "counter", "Requests by limiter decision and rule.");
    for (const auto& [name, counters] : rules_) {
        for (std::size_t k = 0; k < decision_kind_count; ++k) {
            fmt::format_to(std::back_inserter(out),
                           "sluice_requests_total{{decision=\"{}\",rule=\"{}\"}} {}\n",
                           to_string(static_cast<decision_kind>(k)),
                           escape_label(name),
                           load(counters->by_decision[k]));
        }
    }
    header(out,
           "sluice_concurrency_in_flight",
           "gauge",
           "Requests holding a CONCURRENCY slot of the rule's limits on this instance now.");
    for (const auto& [name, counters] : rules_) {
        fmt::format_to(std::back_inserter(out),
                       "sluice_concurrency_in_flight{{rule=\"{}\"}} {}\n",
                       escape_label(name),
                       counters->in_flight.load(std::memory_order_relaxed));
    }
}

std::string registry::render() const {
    std::string out;
    out.reserve(8192);

    render_rule_metrics(out);
    render_cost_metrics(out);
    render_cluster_metrics(out);

    header(out,
           "sluice_upstream_responses_total",
           "counter",
           "Upstream responses by status class; none: no response (the connection failed or broke, "
           "or timed out).");
    static constexpr const char* classes[] = {"none", "1xx", "2xx", "3xx", "4xx", "5xx"};
    for (std::size_t i = 0; i < upstream_status.size(); ++i) {
        fmt::format_to(std::back_inserter(out),
                       "sluice_upstream_responses_total{{code=\"{}\"}} {}\n",
                       classes[i],
                       load(upstream_status[i]));
    }

    for (const auto& m : scalar_metrics) {
        const double value =
            m.as_counter != nullptr
                ? static_cast<double>(load(this->*m.as_counter))
                : static_cast<double>((this->*m.as_gauge).load(std::memory_order_relaxed));
        single(out, m.name, m.as_counter != nullptr ? "counter" : "gauge", m.help, value);
    }
    header(out,
           "sluice_worker_connections_open",
           "gauge",
           "Client connections open now, per worker: how evenly the workers share them (a worker "
           "hands a connection it accepts to the one with the fewest when it has two more).");
    for (std::size_t i = 0; i < workers_; ++i) {
        fmt::format_to(std::back_inserter(out),
                       "sluice_worker_connections_open{{worker=\"{}\"}} {}\n",
                       i,
                       worker_connections_[i].value.load(std::memory_order_relaxed));
    }
    for (const auto& m : histogram_metrics) {
        header(out, m.name, "histogram", m.help);
        (this->*m.field).render(out, m.name, "");
    }
    return out;
}

} // namespace sluice::metrics
