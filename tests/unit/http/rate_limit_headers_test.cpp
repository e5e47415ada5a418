// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/rate_limit_headers.hpp"
#include "sluice/http/response_head.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <memory_resource>
#include <string>
#include <utility>

namespace sluice::http {
namespace {

using std::chrono::milliseconds;

limiter::decision make_decision(std::int64_t limit,
                                milliseconds window,
                                std::int64_t remaining,
                                milliseconds reset_after) {
    limiter::decision d;
    d.allowed = true;
    d.limit = limit;
    d.window = window;
    d.remaining = remaining;
    d.reset_after = reset_after;
    return d;
}

std::string field(const boost::beast::http::fields& f, std::string_view name) {
    const auto it = f.find(name);
    return it == f.end() ? std::string("<absent>") : std::string(it->value());
}

TEST(CeilSeconds, RoundsUpAndNeverGoesNegative) {
    EXPECT_EQ(ceil_seconds(milliseconds(0)), 0);
    EXPECT_EQ(ceil_seconds(milliseconds(1)), 1);
    EXPECT_EQ(ceil_seconds(milliseconds(1000)), 1);
    EXPECT_EQ(ceil_seconds(milliseconds(1001)), 2);
    EXPECT_EQ(ceil_seconds(milliseconds(-5)), 0);
}

// A duration near the largest one (a Redis reply's, say) rounds up without overflowing.
TEST(CeilSeconds, SaturatesNearTheLargestDuration) {
    constexpr auto max = std::numeric_limits<std::int64_t>::max();
    EXPECT_EQ(ceil_seconds(milliseconds(max)), max / 1000 + 1);
    EXPECT_EQ(ceil_seconds(milliseconds(max - 1)), max / 1000 + 1);
    EXPECT_EQ(ceil_seconds(milliseconds(max / 1000 * 1000)), max / 1000);
}

TEST(RetryAfterSeconds, IsAtLeastOne) {
    EXPECT_EQ(retry_after_seconds(milliseconds(0)), 1);
    EXPECT_EQ(retry_after_seconds(milliseconds(200)), 1);
    EXPECT_EQ(retry_after_seconds(milliseconds(1500)), 2);
    EXPECT_EQ(retry_after_seconds(milliseconds(6000)), 6);
}

TEST(PolicyValue, HasQuotaAndWindowInSeconds) {
    // The page's bucket: capacity 50 draining at 5/s empties in 10 s.
    EXPECT_EQ(policy_value("fallback", make_decision(50, milliseconds(10'000), 20, {})),
              R"("fallback";q=50;w=10)");
    EXPECT_EQ(policy_value("api", make_decision(3, milliseconds(2'500), 0, {})),
              R"("api";q=3;w=3)");
}

TEST(PolicyValue, LeavesOutAZeroWindow) {
    EXPECT_EQ(policy_value("x", make_decision(7, milliseconds(0), 0, {})), R"("x";q=7)");
}

TEST(PolicyValue, EscapesTheNameAsAnSfString) {
    EXPECT_EQ(policy_value(R"(a"b\c)", make_decision(1, {}, 0, {})), R"("a\"b\\c";q=1)");
    // Bytes an sf-string cannot carry (controls, UTF-8) become '_'.
    EXPECT_EQ(policy_value("t\x01\xc3\xa9", make_decision(1, {}, 0, {})), R"("t___";q=1)");
}

TEST(RateLimitValue, HasRemainingAndResetRoundedUp) {
    EXPECT_EQ(rate_limit_value("api", make_decision(50, {}, 17, milliseconds(3'200))),
              R"("api";r=17;t=4)");
    EXPECT_EQ(rate_limit_value("api", make_decision(50, {}, 50, milliseconds(0))),
              R"("api";r=50;t=0)");
}

TEST(RateLimitValue, ClampsNegativeRemainingToZero) {
    EXPECT_EQ(rate_limit_value("a", make_decision(5, {}, -3, milliseconds(999))), R"("a";r=0;t=1)");
}

TEST(SetRateLimitHeaders, SetsTheDraftFieldsOnly) {
    boost::beast::http::fields f;
    set_rate_limit_headers(
        f, "fallback", make_decision(50, milliseconds(10'000), 49, milliseconds(200)), false);
    EXPECT_EQ(field(f, "RateLimit-Policy"), R"("fallback";q=50;w=10)");
    EXPECT_EQ(field(f, "RateLimit"), R"("fallback";r=49;t=1)");
    EXPECT_EQ(field(f, "X-RateLimit-Limit"), "<absent>");
    EXPECT_EQ(field(f, "X-RateLimit-Remaining"), "<absent>");
    EXPECT_EQ(field(f, "X-RateLimit-Reset"), "<absent>");
}

TEST(SetRateLimitHeaders, AddsXRateLimitWhenAsked) {
    boost::beast::http::fields f;
    set_rate_limit_headers(
        f, "r", make_decision(10, milliseconds(2'000), 0, milliseconds(1'801)), true);
    EXPECT_EQ(field(f, "X-RateLimit-Limit"), "10");
    EXPECT_EQ(field(f, "X-RateLimit-Remaining"), "0");
    EXPECT_EQ(field(f, "X-RateLimit-Reset"), "2");
}

TEST(SetRateLimitHeaders, ReplacesWhatTheUpstreamSent) {
    boost::beast::http::fields f;
    f.insert("RateLimit", R"("upstream";r=1;t=1)");
    f.insert("RateLimit", R"("other";r=2;t=2)");
    f.insert("X-RateLimit-Limit", "999");
    set_rate_limit_headers(
        f, "mine", make_decision(5, milliseconds(1'000), 4, milliseconds(200)), true);
    EXPECT_EQ(f.count("RateLimit"), 1u);
    EXPECT_EQ(field(f, "RateLimit"), R"("mine";r=4;t=1)");
    EXPECT_EQ(f.count("X-RateLimit-Limit"), 1u);
    EXPECT_EQ(field(f, "X-RateLimit-Limit"), "5");
}

/// An upstream's response head with `fields` (names Beast does not know are field::unknown).
std::unique_ptr<response_head>
head_with(std::initializer_list<std::pair<std::string_view, std::string_view>> fields) {
    auto head = std::make_unique<response_head>(std::pmr::new_delete_resource());
    for (const auto& [name, value] : fields) {
        head->add(boost::beast::http::string_to_field(name), name, value);
    }
    return head;
}

std::string field(const response_head& head, std::string_view name) {
    const auto* f = head.find(name);
    return f == nullptr ? std::string("<absent>") : std::string(f->value());
}

TEST(AppendRateLimitLines, WritesTheSameFieldsAsLinesAndDropsTheUpstreams) {
    const auto head = head_with({{"Content-Type", "text/plain"},
                                 {"RateLimit", R"("upstream";r=1;t=1)"},
                                 {"ratelimit-policy", R"("upstream";q=9)"},
                                 {"X-RateLimit-Limit", "999"}});
    auto& f = *head;
    std::string lines = "Existing: 1\r\n";
    append_rate_limit_lines(
        f, lines, "api", make_decision(10, milliseconds(2'000), 3, milliseconds(1'500)), true);
    EXPECT_EQ(lines,
              "Existing: 1\r\n"
              "RateLimit-Policy: \"api\";q=10;w=2\r\n"
              "RateLimit: \"api\";r=3;t=2\r\n"
              "X-RateLimit-Limit: 10\r\n"
              "X-RateLimit-Remaining: 3\r\n"
              "X-RateLimit-Reset: 2\r\n");
    EXPECT_EQ(field(f, "RateLimit"), "<absent>");
    EXPECT_EQ(field(f, "RateLimit-Policy"), "<absent>");
    EXPECT_EQ(field(f, "X-RateLimit-Limit"), "<absent>");
    EXPECT_EQ(field(f, "Content-Type"), "text/plain");
}

TEST(AppendRateLimitLines, LeavesXRateLimitAloneUnlessAskedAndEscapesLongNames) {
    const auto head = head_with({{"X-RateLimit-Limit", "999"}});
    auto& f = *head;
    // Longer than the stack buffer, with characters to escape: the slow path, same result.
    const std::string name = std::string(400, 'n') + "\"";
    std::string lines;
    append_rate_limit_lines(
        f, lines, name, make_decision(1, milliseconds(0), 0, milliseconds(1)), false);
    const std::string sf = "\"" + std::string(400, 'n') + "\\\"\"";
    EXPECT_EQ(lines, "RateLimit-Policy: " + sf + ";q=1\r\nRateLimit: " + sf + ";r=0;t=1\r\n");
    EXPECT_EQ(field(f, "X-RateLimit-Limit"), "999");
}

TEST(RejectionBody, IsTheDocumentedJson) {
    EXPECT_EQ(rejection_body("completions", 1, 3),
              R"({"error":"rate_limited","limit":"completions","limit_index":1,"retry_after":3})");
    EXPECT_EQ(rejection_body(R"(we"ird)", 0, 1),
              R"({"error":"rate_limited","limit":"we\"ird","limit_index":0,"retry_after":1})");
}

TEST(RejectionBody, ACostWeightedRefusalNamesTheCostAndWhatRemainsOrTheCapacity) {
    EXPECT_EQ(cost_rejection_body("llm", 0, 3, 80, 40),
              R"({"error":"rate_limited","limit":"llm","limit_index":0,"retry_after":3,)"
              R"("cost":80,"remaining":40})");
    EXPECT_EQ(never_fits_body("llm", 1, 200, 100),
              R"({"error":"rate_limited","limit":"llm","limit_index":1,"retry_after":null,)"
              R"("cost":200,"capacity":100})");
}

} // namespace
} // namespace sluice::http
