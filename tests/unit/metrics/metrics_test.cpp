// SPDX-License-Identifier: Apache-2.0
#include "sluice/metrics/metrics.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sluice::metrics {
namespace {

using ::testing::HasSubstr;

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

TEST(Metrics, LabelValuesAreEscaped) {
    registry r;
    r.rule("a\"b\\c").count(decision_kind::allowed);
    EXPECT_THAT(r.render(), HasSubstr("rule=\"a\\\"b\\\\c\""));
}

} // namespace
} // namespace sluice::metrics
