// SPDX-License-Identifier: Apache-2.0
#include "sluice/metrics/metrics.hpp"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace sluice::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(Metrics, RequestsAreCountedByDecisionAndRule) {
    registry r;
    auto& completions = r.rule("completions");
    completions.count(decision_kind::rejected);
    completions.count(decision_kind::rejected);
    r.rule("fallback").count(decision_kind::allowed);
    const auto text = r.render();
    EXPECT_THAT(text, HasSubstr("# TYPE sluice_requests_total counter\n"));
    EXPECT_THAT(text,
                HasSubstr("sluice_requests_total{decision=\"rejected\",rule=\"completions\"} 2\n"));
    EXPECT_THAT(text,
                HasSubstr("sluice_requests_total{decision=\"allowed\",rule=\"fallback\"} 1\n"));
    EXPECT_THAT(text,
                HasSubstr("sluice_requests_total{decision=\"delayed\",rule=\"fallback\"} 0\n"));
}

TEST(Metrics, MemoryStoreEvictionsAreExported) {
    registry r;
    bump(r.memory_store_evictions_total, 3);
    const auto text = r.render();
    EXPECT_THAT(text, HasSubstr("# TYPE sluice_memory_store_evictions_total counter\n"));
    EXPECT_THAT(text, HasSubstr("sluice_memory_store_evictions_total 3\n"));
}

TEST(Metrics, RuleCountersAreStable) {
    registry r;
    auto& first = r.rule("a");
    for (int i = 0; i < 100; ++i) {
        r.rule("other" + std::to_string(i));
    }
    EXPECT_EQ(&first, &r.rule("a"));
}

TEST(Metrics, HistogramBucketsAreCumulative) {
    registry r;
    using namespace std::chrono_literals;
    r.upstream_latency.observe(300us); // <= 0.0005
    r.upstream_latency.observe(3ms);   // <= 0.005
    r.upstream_latency.observe(20s);   // +Inf only
    const auto text = r.render();
    EXPECT_THAT(text, HasSubstr("sluice_upstream_latency_seconds_bucket{le=\"0.0005\"} 1\n"));
    EXPECT_THAT(text, HasSubstr("sluice_upstream_latency_seconds_bucket{le=\"0.0025\"} 1\n"));
    EXPECT_THAT(text, HasSubstr("sluice_upstream_latency_seconds_bucket{le=\"0.005\"} 2\n"));
    EXPECT_THAT(text, HasSubstr("sluice_upstream_latency_seconds_bucket{le=\"10\"} 2\n"));
    EXPECT_THAT(text, HasSubstr("sluice_upstream_latency_seconds_bucket{le=\"+Inf\"} 3\n"));
    EXPECT_THAT(text, HasSubstr("sluice_upstream_latency_seconds_count 3\n"));
    EXPECT_THAT(text, HasSubstr("sluice_upstream_latency_seconds_sum 20.0033\n"));
}

/// The value of the sample `series` (name and labels, as rendered) in `text`.
double sample(const std::string& text, const std::string& series) {
    const auto at = text.find("\n" + series + " ");
    EXPECT_NE(at, std::string::npos) << series;
    return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

// The sum was kept in nanoseconds, a uint64 that wraps after 1.8e19 ns of latency in all (21 days
// of 10k long requests in flight), which Prometheus takes for a counter reset.
TEST(Metrics, AHistogramsSumDoesNotWrap) {
    registry r;
    using namespace std::chrono_literals;
    constexpr auto longest = std::chrono::nanoseconds::max(); // 292 years
    constexpr int observations = 10;
    for (int i = 0; i < observations; ++i) {
        r.upstream_latency.observe(longest);
    }
    const double seconds = std::chrono::duration<double>(longest).count() * observations;
    EXPECT_NEAR(sample(r.render(), "sluice_upstream_latency_seconds_sum"), seconds, seconds * 1e-9);

    // A day of 10k requests in flight, every day for a year.
    registry year;
    for (int day = 0; day < 365; ++day) {
        year.redis_latency.observe(10'000 * 24h);
    }
    const double expected = 365.0 * 10'000 * 86'400;
    EXPECT_NEAR(sample(year.render(), "sluice_redis_command_duration_seconds_sum"),
                expected,
                expected * 1e-12);

    // Each observation to the nearest microsecond.
    registry small;
    small.slot_wait.observe(1499ns);
    small.slot_wait.observe(1500ns);
    small.slot_wait.observe(-5ns); // a clock that stepped back adds nothing
    EXPECT_THAT(small.render(), HasSubstr("\nsluice_concurrency_wait_seconds_sum 3e-06\n"));
}

// Each field of the registry reaches the rendering under its own name, once, with its own value
// (the table in metrics.cpp is where a field gets its name: a field left out of it, or two
// entries pointing at one field, show here).
TEST(Metrics, EveryFieldIsRenderedOnceWithItsValue) {
    registry r;
    const std::pair<counter*, const char*> counters[] = {
        {&r.connections_total, "sluice_connections_total"},
        {&r.bad_requests_total, "sluice_bad_requests_total"},
        {&r.client_timeouts_total, "sluice_client_timeouts_total"},
        {&r.dropped_header_fields_total, "sluice_dropped_header_fields_total"},
        {&r.held_total, "sluice_held_requests_total"},
        {&r.held_overflow_total, "sluice_held_overflow_total"},
        {&r.held_abandoned_total, "sluice_held_abandoned_total"},
        {&r.held_drained_total, "sluice_held_drained_total"},
        {&r.connections_over_cap_total, "sluice_connections_over_cap_total"},
        {&r.upstream_connect_errors_total, "sluice_upstream_connect_errors_total"},
        {&r.upstream_timeouts_total, "sluice_upstream_timeouts_total"},
        {&r.upstream_busy_total, "sluice_upstream_busy_total"},
        {&r.tunnels_refused_total, "sluice_tunnels_refused_total"},
        {&r.upstream_lookup_failures_total, "sluice_upstream_lookup_failures_total"},
        {&r.redis_lookup_failures_total, "sluice_redis_lookup_failures_total"},
        {&r.redis_errors_total, "sluice_redis_errors_total"},
        {&r.redis_timeouts_total, "sluice_redis_timeouts_total"},
        {&r.redis_failovers_total, "sluice_redis_failovers_total"},
        {&r.store_errors_total, "sluice_store_errors_total"},
        {&r.memory_store_evictions_total, "sluice_memory_store_evictions_total"},
        {&r.redis_give_backs_total, "sluice_redis_give_backs_total"},
        {&r.log_lines_dropped_total, "sluice_log_lines_dropped_total"},
        {&r.redis_moved_total, "sluice_redis_redirections_total{kind=\"moved\"}"},
        {&r.redis_ask_total, "sluice_redis_redirections_total{kind=\"ask\"}"},
        {&r.redis_tryagain_total, "sluice_redis_redirections_total{kind=\"tryagain\"}"},
        {&r.redis_map_changed_total, "sluice_redis_map_refreshes_total{result=\"changed\"}"},
        {&r.redis_map_unchanged_total, "sluice_redis_map_refreshes_total{result=\"unchanged\"}"},
        {&r.redis_map_failed_total, "sluice_redis_map_refreshes_total{result=\"failed\"}"},
    };
    bump(r.redis_node_calls("10.0.0.5:6379"), 7);
    std::uint64_t value = 100;
    for (const auto& [field, name] : counters) {
        bump(*field, ++value);
    }
    r.connections_open = -3; // a gauge may go below zero for a moment; it renders as it is
    r.held_now = 42;
    r.connections_parked = 7;
    r.request_body_buffer_bytes = 16384;
    r.tunnels_open = 3;
    r.count_workers(2);
    r.worker_connections()[1].value = 5;
    const auto text = r.render();
    value = 100;
    for (const auto& [field, name] : counters) {
        EXPECT_THAT(text,
                    HasSubstr(std::string("\n") + name + " " + std::to_string(++value) + "\n"));
        const auto family =
            std::string(std::string_view(name).substr(0, std::string_view(name).find('{')));
        EXPECT_THAT(text, HasSubstr("# TYPE " + family + " counter\n"));
    }
    EXPECT_THAT(text, HasSubstr("\nsluice_redis_calls_total{node=\"10.0.0.5:6379\"} 7\n"));
    EXPECT_THAT(text, HasSubstr("\nsluice_connections_open -3\n"));
    EXPECT_THAT(text, HasSubstr("\nsluice_held_requests 42\n"));
    EXPECT_THAT(text, HasSubstr("\nsluice_connections_parked 7\n"));
    EXPECT_THAT(text, HasSubstr("\nsluice_request_body_buffer_bytes 16384\n"));
    EXPECT_THAT(text, HasSubstr("\nsluice_tunnels_open 3\n"));
    EXPECT_THAT(text, HasSubstr("# TYPE sluice_tunnels_open gauge\n"));
    EXPECT_THAT(text, HasSubstr("# TYPE sluice_request_body_buffer_bytes gauge\n"));
    EXPECT_THAT(text, HasSubstr("\nsluice_worker_connections_open{worker=\"0\"} 0\n"));
    EXPECT_THAT(text, HasSubstr("\nsluice_worker_connections_open{worker=\"1\"} 5\n"));
    EXPECT_THAT(text, HasSubstr("# TYPE sluice_worker_connections_open gauge\n"));
    EXPECT_THAT(text, HasSubstr("# TYPE sluice_held_requests gauge\n"));
    EXPECT_THAT(text, HasSubstr("# TYPE sluice_redis_command_duration_seconds histogram\n"));
    EXPECT_THAT(text, HasSubstr("# TYPE sluice_concurrency_wait_seconds histogram\n"));
    EXPECT_THAT(text, HasSubstr("# TYPE sluice_concurrency_in_flight gauge\n"));
    EXPECT_THAT(text, HasSubstr("# TYPE sluice_cost_settle_error histogram\n"));
    // One TYPE line per family: the requests, the concurrency in flight (per rule), the
    // upstream responses, the 3 cost counters and the cost histogram (per rule), the 3 Redis
    // Cluster families with labels (redirections, map refreshes, calls per node), the counters
    // without labels, 5 gauges, the connections per worker and 3 histograms.
    std::size_t families = 0;
    for (auto at = text.find("# TYPE "); at != std::string::npos;
         at = text.find("# TYPE ", at + 1)) {
        ++families;
    }
    EXPECT_EQ(families, 3u + 4u + 3u + (std::size(counters) - 6u) + 5u + 1u + 3u);
}

// The settle error's buckets are cumulative upper bounds, negative ones included: a refund of
// 50 is at or below -10, an exact settlement in (-1, 0], a further charge of 140 at or below
// 1000; the sum is signed.
TEST(Metrics, CostSettleErrorBucketsAreSignedAndCumulative) {
    registry r;
    auto& rule = r.rule("llm");
    rule.cost_settle_error.observe(-50);
    rule.cost_settle_error.observe(0);
    rule.cost_settle_error.observe(140);
    rule.cost_settle_error.observe(-2000000); // below every bound: in the first bucket
    bump(rule.cost_reserved, 70);
    bump(rule.cost_settled, 30);
    bump(rule.cost_missing);
    const auto text = r.render();
    const auto bucket = [](const char* le, int n) {
        return fmt::format("sluice_cost_settle_error_bucket{{rule=\"llm\",le=\"{}\"}} {}\n", le, n);
    };
    EXPECT_THAT(text, HasSubstr(bucket("-1000000", 1)));
    EXPECT_THAT(text, HasSubstr(bucket("-100000", 1)));
    EXPECT_THAT(text, HasSubstr(bucket("-100", 1)));
    EXPECT_THAT(text, HasSubstr(bucket("-10", 2)));
    EXPECT_THAT(text, HasSubstr(bucket("-1", 2)));
    EXPECT_THAT(text, HasSubstr(bucket("0", 3)));
    EXPECT_THAT(text, HasSubstr(bucket("100", 3)));
    EXPECT_THAT(text, HasSubstr(bucket("1000", 4)));
    EXPECT_THAT(text, HasSubstr(bucket("+Inf", 4)));
    EXPECT_THAT(text, HasSubstr("sluice_cost_settle_error_sum{rule=\"llm\"} -1999910\n"));
    EXPECT_THAT(text, HasSubstr("sluice_cost_settle_error_count{rule=\"llm\"} 4\n"));
    EXPECT_THAT(text, HasSubstr("sluice_cost_reserved_total{rule=\"llm\"} 70\n"));
    EXPECT_THAT(text, HasSubstr("sluice_cost_settled_total{rule=\"llm\"} 30\n"));
    EXPECT_THAT(text, HasSubstr("sluice_cost_settle_missing_total{rule=\"llm\"} 1\n"));
}

// Cost amounts are a peer's figures, up to 2^53 each: their counters and the settle error's sum
// stop at their largest value rather than wrap after a few thousand, which a scraper would take
// for a reset.
TEST(Metrics, CostAmountsSaturateRatherThanWrap) {
    registry r;
    auto& rule = r.rule("llm");
    constexpr std::int64_t most = std::int64_t{1} << 53;
    for (int i = 0; i < 2100; ++i) {
        add_amount(rule.cost_reserved, static_cast<std::uint64_t>(most));
        rule.cost_settle_error.observe(most);
    }
    EXPECT_EQ(rule.cost_reserved.load(), std::numeric_limits<std::uint64_t>::max());
    const auto text = r.render();
    EXPECT_THAT(text,
                HasSubstr("sluice_cost_settle_error_sum{rule=\"llm\"} 9.223372036854776e+18\n"))
        << text;
}

// The nodes' addresses come from the Cluster's replies: each new one a series, forever, grew
// /metrics without bound (a Cluster on Kubernetes gets new pod addresses with every restart).
TEST(Metrics, RedisNodeSeriesAreCappedTheRestCountedAsOther) {
    registry r;
    const auto node = [](std::size_t i) {
        return fmt::format("10.0.{}.{}:6379", i / 200, i % 200);
    };
    constexpr std::size_t nodes = registry::max_node_series + 50;
    for (std::size_t i = 0; i < nodes; ++i) {
        bump(r.redis_node_calls(node(i)), 2);
    }
    // A node seen before the cap keeps its series; one first seen after it stays "other".
    bump(r.redis_node_calls(node(0)));
    bump(r.redis_node_calls(node(nodes - 1)));
    EXPECT_EQ(&r.redis_node_calls(node(nodes - 1)), &r.redis_node_calls("10.9.9.9:1"));
    const auto text = r.render();
    std::size_t series = 0;
    for (auto at = text.find("\nsluice_redis_calls_total{"); at != std::string::npos;
         at = text.find("\nsluice_redis_calls_total{", at + 1)) {
        ++series;
    }
    EXPECT_EQ(series, registry::max_node_series + 1);
    EXPECT_THAT(text, HasSubstr("\nsluice_redis_calls_total{node=\"10.0.0.0:6379\"} 3\n"));
    EXPECT_THAT(text, HasSubstr("\nsluice_redis_calls_total{node=\"10.0.0.63:6379\"} 2\n"));
    EXPECT_THAT(text, Not(HasSubstr("node=\"10.0.0.64:6379\"")));
    EXPECT_THAT(text, HasSubstr("\nsluice_redis_calls_total{node=\"other\"} 101\n"));
}

TEST(Metrics, LabelValuesAreEscaped) {
    registry r;
    r.rule("a\"b\\c").count(decision_kind::allowed);
    EXPECT_THAT(r.render(), HasSubstr("rule=\"a\\\"b\\\\c\""));
}

} // namespace
} // namespace sluice::metrics
