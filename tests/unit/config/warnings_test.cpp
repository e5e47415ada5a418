// SPDX-License-Identifier: Apache-2.0
// Non-fatal findings: Redis TTLs too short for a limit's state, and rules that can never match.
#include "config_test_util.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sluice::config::test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const std::string redis_10s = "rate-limit:\n  store: redis\n  redis: { ttl: 10s }\n";

TEST(ConfigWarnings, TtlShorterThanAFullDrainNamesBothFigures) {
    const auto cfg = load(base + redis_10s + R"(  rules:
    - name: x
      match: { path: /x }
      limits:
        - { capacity: 50, flowRate: 2 }
)");
    EXPECT_THAT(cfg.warnings,
                ElementsAre("t.yaml:10: rate-limit.redis.ttl 10s is shorter than rule 'x' limit 1 "
                            "needs to drain a full bucket (capacity 50 / flowRate 2 = 25s): a "
                            "quiet client's queue state would be forgotten"));
}

TEST(ConfigWarnings, TtlCoversTokenBucketsButNotWindows) {
    const auto cfg = load(base + redis_10s + R"(  fallback: { capacity: 100, flowRate: 3 }
  rules:
    - name: y
      match: { path: /y }
      limits:
        - { algorithm: TOKEN_BUCKET, capacity: 30, refillRate: 2 }
        - { algorithm: FIXED_WINDOW, limit: 5, window: 1m }
        - { algorithm: SLIDING_WINDOW, limit: 5, window: 10s }
)");
    // Window keys expire with their own window in Redis, whatever the ttl: no warning for them.
    ASSERT_EQ(cfg.warnings.size(), 2u);
    EXPECT_THAT(cfg.warnings[0],
                HasSubstr("t.yaml:6: rate-limit.redis.ttl 10s is shorter than the fallback limit "
                          "needs to drain a full bucket (capacity 100 / flowRate 3 = 33.334s)"));
    EXPECT_THAT(cfg.warnings[1],
                HasSubstr("rule 'y' limit 1 needs to refill an empty bucket (capacity 30 / "
                          "refillRate 2 = 15s)"));
}

// A tunnel cap that leaves no upstream connection to other requests keeps nothing for them.
TEST(ConfigWarnings, MaxTunnelsNotBelowMaxConnectionsIsWarned) {
    EXPECT_THAT(load(base + "  max-connections: 8\n  max-tunnels: 8\n").warnings,
                ElementsAre("t.yaml:4: upstream.max-tunnels 8 is not below "
                            "upstream.max-connections (8): WebSocket tunnels can still take "
                            "every upstream connection"));
    EXPECT_THAT(load(base + "  max-connections: 8\n  max-tunnels: 7\n").warnings, IsEmpty());
    EXPECT_THAT(load(base + "  max-tunnels: 0\n").warnings, IsEmpty()) << "0: no cap";
    EXPECT_EQ(load(base + "  max-tunnels: 7\n").upstream.max_tunnels, 7u);
}

TEST(ConfigWarnings, DefaultFallbackFitsTheDefaultTtl) {
    // capacity 50 / flowRate 5 = 10s, well inside the 60s default.
    EXPECT_THAT(load(base + "rate-limit:\n  store: redis\n").warnings, IsEmpty());
    // Exactly equal is enough.
    EXPECT_THAT(load(base + redis_10s).warnings, IsEmpty());
}

TEST(ConfigWarnings, MemoryStoreHasNoTtl) {
    const auto cfg = load(base + "rate-limit:\n  redis: { ttl: 1s }\n");
    EXPECT_THAT(cfg.warnings, IsEmpty());
}

// A cost that never fits its limit refuses every such request: knowable from the file, warned.
TEST(ConfigWarnings, ACostLargerThanItsLimitHoldsIsWarned) {
    const auto cfg = load(base + R"(rate-limit:
  rules:
    - name: fixed
      match: { path: /a }
      limits:
        - { algorithm: FIXED_WINDOW, limit: 10, window: 1m, cost: { request: 11 } }
    - name: figure
      match: { path: /b }
      limits:
        - { algorithm: TOKEN_BUCKET, capacity: 100, refillRate: 1,
            cost: { request: "header:X-Tokens", default: 500 } }
    - name: fits
      match: { path: /c }
      limits:
        - { algorithm: TOKEN_BUCKET, capacity: 100, refillRate: 1, cost: { request: 100 } }
)");
    EXPECT_THAT(cfg.warnings,
                ElementsAre(HasSubstr("t.yaml:8: rule 'fixed' limit 1 reserves 11 (cost.request), "
                                      "more than the 10 it holds: every such request is refused "
                                      "(429), whatever the traffic"),
                            HasSubstr("t.yaml:12: rule 'figure' limit 1 reserves 500 "
                                      "(cost.default) for a request without its figure, more than "
                                      "the 100 it holds")));
}

TEST(ConfigWarnings, ShadowedRulesNameBothRulesAndLines) {
    const auto cfg = load(base + R"(rate-limit:
  rules:
    - name: api
      match: { path: /v1/* }
      limits: []
    - name: completions
      match: { path: /v1/completions, methods: [POST] }
      limits: []
    - name: posts
      match: { path: /p, methods: [POST, PUT] }
      limits: []
    - name: post-only
      match: { path: /p, methods: [POST] }
      limits: []
    - name: any-p
      match: { path: /p }
      limits: []
)");
    EXPECT_THAT(cfg.warnings,
                ElementsAre("t.yaml:8: rule 'completions' (line 8) is shadowed by rule 'api' (line "
                            "5): every request it matches is matched by 'api' first, so its limits "
                            "never apply",
                            HasSubstr("rule 'post-only' (line 14) is shadowed by rule 'posts' "
                                      "(line 11)")));
}

TEST(ConfigWarnings, SpecificBeforeBroadIsFine) {
    const auto cfg = load(base + R"(rate-limit:
  rules:
    - name: completions
      match: { path: /v1/completions }
      limits: []
    - name: api
      match: { path: /v1/* }
      limits: []
    - name: other-glob
      match: { path: "/v*/x" }
      limits: []
)");
    EXPECT_THAT(cfg.warnings, IsEmpty());
}

} // namespace
} // namespace sluice::config::test
