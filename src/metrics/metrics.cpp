// SPDX-License-Identifier: Apache-2.0
#include "sluice/metrics/metrics.hpp"

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

void histogram::observe(std::chrono::nanoseconds elapsed) noexcept {
    const double seconds = std::chrono::duration<double>(elapsed).count();
    std::size_t i = 0;
    while (i < bounds.size() && seconds > bounds[i]) {
        ++i;
    }
    bump(buckets_[i]);
    bump(sum_ns_, static_cast<std::uint64_t>(elapsed.count() > 0 ? elapsed.count() : 0));
}

void histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
    const std::string sep = labels.empty() ? "" : ",";
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < bounds.size(); ++i) {
        cumulative += load(buckets_[i]);
        fmt::format_to(std::back_inserter(out),
                       "{}_bucket{{{}{}le=\"{}\"}} {}\n",
                       name,
                       labels,
                       sep,
                       bounds[i],
                       cumulative);
    }
    cumulative += load(buckets_.back());
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
                   static_cast<double>(load(sum_ns_)) / 1e9,
                   name,
                   braces,
                   cumulative);
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

std::string registry::render() const {
    std::string out;
    out.reserve(8192);

    header(out, "sluice_requests_total", "counter", "Requests by limiter decision and rule.");
    {
        std::lock_guard lock(rules_mutex_);
        for (const auto& [name, counters] : rules_) {
            for (std::size_t k = 0; k < decision_kind_count; ++k) {
                fmt::format_to(std::back_inserter(out),
                               "sluice_requests_total{{decision=\"{}\",rule=\"{}\"}} {}\n",
                               to_string(static_cast<decision_kind>(k)),
                               escape_label(name),
                               load(counters->by_decision[k]));
            }
        }
    }

    single(out,
           "sluice_connections_open",
           "gauge",
           "Client connections open now.",
           static_cast<double>(connections_open.load(std::memory_order_relaxed)));
    single(out,
           "sluice_connections_total",
           "counter",
           "Client connections accepted.",
           static_cast<double>(load(connections_total)));
    single(out,
           "sluice_bad_requests_total",
           "counter",
           "Requests answered 400/413/414/431 by sluice: a broken or too large header or body.",
           static_cast<double>(load(bad_requests_total)));
    single(out,
           "sluice_client_timeouts_total",
           "counter",
           "Requests answered 408 by sluice: the header did not arrive within "
           "server.header-timeout, or the body within server.body-timeout.",
           static_cast<double>(load(client_timeouts_total)));
    single(out,
           "sluice_held_requests",
           "gauge",
           "Requests held by shaping now (counted from before the limiter decides, so that "
           "rate-limit.max-held also bounds the requests being decided).",
           static_cast<double>(held_now.load(std::memory_order_relaxed)));
    single(out,
           "sluice_held_requests_total",
           "counter",
           "Requests held by shaping before being forwarded.",
           static_cast<double>(load(held_total)));
    single(out,
           "sluice_held_overflow_total",
           "counter",
           "Requests refused with 503 because rate-limit.max-held was reached.",
           static_cast<double>(load(held_overflow_total)));
    single(out,
           "sluice_held_abandoned_total",
           "counter",
           "Held requests whose client disconnected; never forwarded.",
           static_cast<double>(load(held_abandoned_total)));

    header(out,
           "sluice_upstream_latency_seconds",
           "histogram",
           "Upstream time of answered requests, from the start of forwarding (connection "
           "included) to the response's last byte relayed to the client.");
    upstream_latency.render(out, "sluice_upstream_latency_seconds", "");
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
    single(out,
           "sluice_upstream_connect_errors_total",
           "counter",
           "Upstream connections that could not be made (answered 502).",
           static_cast<double>(load(upstream_connect_errors_total)));
    single(out,
           "sluice_upstream_timeouts_total",
           "counter",
           "Upstream responses that did not come within upstream.timeout (answered 504).",
           static_cast<double>(load(upstream_timeouts_total)));
    single(out,
           "sluice_upstream_busy_total",
           "counter",
           "Requests answered 503 because upstream.max-connections connections were in use "
           "for upstream.timeout (nothing sent upstream).",
           static_cast<double>(load(upstream_busy_total)));

    header(out,
           "sluice_redis_command_duration_seconds",
           "histogram",
           "Redis round-trip time of limiter scripts.");
    redis_latency.render(out, "sluice_redis_command_duration_seconds", "");
    single(out,
           "sluice_redis_errors_total",
           "counter",
           "Redis commands that failed (connection lost, error reply).",
           static_cast<double>(load(redis_errors_total)));
    single(out,
           "sluice_redis_timeouts_total",
           "counter",
           "Redis commands that got no reply within rate-limit.redis.timeout.",
           static_cast<double>(load(redis_timeouts_total)));
    single(out,
           "sluice_store_errors_total",
           "counter",
           "Requests the store could not decide (handled by failure-mode).",
           static_cast<double>(load(store_errors_total)));
    single(out,
           "sluice_memory_store_evictions_total",
           "counter",
           "Keys the memory store evicted while their state still mattered "
           "(rate-limit.memory.max-keys reached).",
           static_cast<double>(load(memory_store_evictions_total)));
    return out;
}

} // namespace sluice::metrics
