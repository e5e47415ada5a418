// SPDX-License-Identifier: Apache-2.0
// Rules end to end (issue 5): which rule a request matches, limits that share or split buckets
// (prefix patterns, IPv6 prefixes, API-key headers), rules with several limits on the memory
// store and on Redis, dry-run, and every algorithm through both stores.

#include "integration_util.hpp"
#include "support/admin_client.hpp"
#include "support/limit_probe.hpp"
#include "support/redis_server.hpp"
#include "support/resp_client.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

std::string make_yaml(const recording_upstream& upstream,
                      const std::string& rate_limit,
                      const std::string& server_extra = "") {
    return compose_yaml(upstream.url(), rate_limit, server_extra);
}

// A flow so slow nothing leaks during a test: one slot every 100 s.
constexpr const char* no_leak = "flowRate: 0.01, mode: police";

/// Rules of every match kind, each with its own capacity so that a response shows which
/// limit decided it: RateLimit-Policy names the rule and its q is the capacity.
std::string matching_rules() {
    return fmt::format(R"(  fallback: {{ capacity: 1, {0} }}
  rules:
    - name: exact
      match: {{ path: /v1/exact }}
      limits: [ {{ capacity: 2, {0} }} ]
    - name: models
      match: {{ path: /v1/models/* }}
      limits: [ {{ capacity: 3, {0} }} ]
    - name: post-only
      match: {{ path: /v1/submit, methods: [POST] }}
      limits: [ {{ capacity: 4, {0} }} ]
    - name: broad
      match: {{ path: /v1/first/* }}
      limits: [ {{ capacity: 5, {0} }} ]
    - name: shadowed
      match: {{ path: /v1/first/x }}
      limits: [ {{ capacity: 6, {0} }} ]
)",
                       no_leak);
}

class RulesMatching : public testing::Test {
protected:
    recording_upstream upstream_;
    sluice_process sluice_{make_yaml(upstream_, matching_rules())};
    const std::uint16_t port_ = sluice_.port();
};

TEST_F(RulesMatching, ExactRuleMatchesOnlyItsPath) {
    auto v = probe(port_, "GET", "/v1/exact");
    EXPECT_EQ(v.status, 200u);
    EXPECT_EQ(v.policy, "exact");
    EXPECT_EQ(v.quota, 2);
    EXPECT_EQ(v.remaining, 1);
    EXPECT_EQ(probe(port_, "GET", "/v1/exact?q=1").policy, "exact") << "the query is not the path";
    EXPECT_EQ(probe(port_, "GET", "/v1//exact").status, 429u) << "a spelling of the same path";
    EXPECT_EQ(probe(port_, "GET", "/v1/exact/").policy, "fallback");
    EXPECT_EQ(probe(port_, "GET", "/v1/exactly").policy, "fallback");
}

TEST_F(RulesMatching, PrefixRuleSharesOneBucketAcrossItsPaths) {
    const std::vector<std::string> paths = {"/v1/models/1", "/v1/models/2", "/v1/models/a/b"};
    for (std::size_t i = 0; i < paths.size(); ++i) {
        const limit_view v = probe(port_, "GET", paths[i]);
        EXPECT_EQ(v.status, 200u) << paths[i];
        EXPECT_EQ(v.policy, "models") << paths[i];
        EXPECT_EQ(v.remaining, 2 - static_cast<long long>(i)) << paths[i];
    }
    const limit_view v = probe(port_, "GET", "/v1/models/2");
    EXPECT_EQ(v.status, 429u) << "/v1/models/1 and /v1/models/2 must share one bucket";
    EXPECT_EQ(v.policy, "models");
    EXPECT_EQ(json_string_field(v.body, "limit"), "models") << v.body;
    EXPECT_TRUE(sluice_.wait_for_log("key=rate-limit:127.0.0.1:/v1/models/*", 5s))
        << "a prefix rule keys by its pattern";
    // The prefix ends in '/': the bare directory is not under it.
    EXPECT_EQ(probe(port_, "GET", "/v1/models").policy, "fallback");
}

TEST_F(RulesMatching, MethodFilterSendsOtherMethodsToTheFallback) {
    auto v = probe(port_, "POST", "/v1/submit");
    EXPECT_EQ(v.policy, "post-only");
    EXPECT_EQ(v.quota, 4);
    v = probe(port_, "GET", "/v1/submit");
    EXPECT_EQ(v.policy, "fallback");
    EXPECT_EQ(v.quota, 1);
    EXPECT_EQ(probe(port_, "PUT", "/v1/submit").policy, "fallback");
}

TEST_F(RulesMatching, FirstMatchWinsAndTheRestFallBack) {
    // A rule listed after a prefix that covers it can never match: sluice warns at start.
    EXPECT_NE(sluice_.log_text().find("shadowed"), std::string::npos) << sluice_.log_text();
    auto v = probe(port_, "GET", "/v1/first/x");
    EXPECT_EQ(v.policy, "broad");
    EXPECT_EQ(v.quota, 5);

    // No rule: the fallback, one bucket per path.
    v = probe(port_, "GET", "/nothing/here");
    EXPECT_EQ(v.status, 200u);
    EXPECT_EQ(v.policy, "fallback");
    EXPECT_EQ(v.remaining, 0);
    v = probe(port_, "GET", "/nothing/here");
    EXPECT_EQ(v.status, 429u);
    EXPECT_EQ(json_string_field(v.body, "limit"), "fallback") << v.body;
    EXPECT_EQ(probe(port_, "GET", "/nothing/else").status, 200u);
}

// A rule limited to some methods and the fallback that takes the other methods of the same
// exact path are two limits: neither may draw on the other's bucket.
TEST(Rules, MethodFilteredRuleAndFallbackKeepSeparateBuckets) {
    recording_upstream upstream;
    const std::string rules = fmt::format(R"(  fallback: {{ capacity: 1, {0} }}
  rules:
    - name: post-only
      match: {{ path: /v1/submit, methods: [POST] }}
      limits: [ {{ capacity: 4, {0} }} ]
)",
                                          no_leak);
    sluice_process sluice(make_yaml(upstream, rules));
    const auto port = sluice.port();

    auto v = probe(port, "POST", "/v1/submit");
    EXPECT_EQ(v.status, 200u);
    EXPECT_EQ(v.remaining, 3);
    v = probe(port, "GET", "/v1/submit");
    EXPECT_EQ(v.status, 200u) << "the rule's POST used up the fallback's bucket: " << v.body;
    EXPECT_EQ(v.policy, "fallback");
    EXPECT_EQ(v.remaining, 0);
    v = probe(port, "PUT", "/v1/submit");
    EXPECT_EQ(v.status, 429u) << "GET and PUT share the fallback's bucket for /v1/submit";
    EXPECT_EQ(json_string_field(v.body, "limit"), "fallback") << v.body;
    v = probe(port, "POST", "/v1/submit");
    EXPECT_EQ(v.status, 200u) << "the fallback's requests were charged to the rule";
    EXPECT_EQ(v.remaining, 2);
}

TEST(Rules, EmptyLimitsListIsUnlimited) {
    recording_upstream upstream;
    const std::string rules = fmt::format(R"(  fallback: {{ capacity: 1, {0} }}
  rules:
    - name: open
      match: {{ path: /open, methods: [GET] }}
      limits: []
)",
                                          no_leak);
    sluice_process sluice(make_yaml(upstream, rules));

    http_connection connection(sluice.port());
    constexpr int count = 30;
    for (int i = 0; i < count; ++i) {
        connection.send("GET", "/open");
        const http_response response = connection.read_response();
        ASSERT_EQ(response.status, 200u) << "request " << i;
        EXPECT_FALSE(response.header("RateLimit")) << "an exempt path carries no RateLimit";
    }
    ASSERT_TRUE(upstream.wait_for_count(count, 10s));
    // Another method is not exempt: the fallback (capacity 1) applies.
    EXPECT_EQ(probe(sluice.port(), "POST", "/open").status, 200u);
    EXPECT_EQ(probe(sluice.port(), "POST", "/open").status, 429u);
}

// A rule with two limits: Retry-After is the longest wait among the limits that refused (and
// only those), and the 429 names the rule.
TEST(RulesMultiLimit, RetryAfterIsTheLongestWaitAmongRefusingLimits) {
    recording_upstream upstream;
    const std::string rules = R"(  rules:
    - name: slow-last
      match: { path: /slow-last }
      limits:
        - { capacity: 1, flowRate: 1, mode: police }
        - { capacity: 1, flowRate: 0.1, mode: police, key: [global] }
    - name: slow-first
      match: { path: /slow-first }
      limits:
        - { capacity: 1, flowRate: 0.1, mode: police, key: [global] }
        - { capacity: 1, flowRate: 1, mode: police }
    - name: global-refuses
      match: { path: /global-refuses }
      limits:
        - { capacity: 5, flowRate: 0.01, mode: police }
        - { capacity: 2, flowRate: 0.1, mode: police, key: [global] }
    - name: client-refuses
      match: { path: /client-refuses }
      limits:
        - { capacity: 2, flowRate: 0.1, mode: police }
        - { capacity: 5, flowRate: 0.01, mode: police, key: [global] }
)";
    sluice_process sluice(make_yaml(upstream, rules));
    const auto port = sluice.port();

    struct a_case {
        std::string rule;
        int admitted;          // requests admitted before the 429
        long long quota;       // RateLimit-Policy q of the limit that refused
        long long max_retry_s; // its wait; any other limit's wait is longer or shorter
        long long min_retry_s;
    };

    // Both limits refuse: the slower one (10 s) decides, whatever its position.
    // One limit refuses: its wait, never the admitting limit's (100 s), decides.
    const std::vector<a_case> cases = {
        {"slow-last", 1, 1, 10, 9},
        {"slow-first", 1, 1, 10, 9},
        {"global-refuses", 2, 2, 10, 9},
        {"client-refuses", 2, 2, 10, 9},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.rule);
        const std::string target = "/" + c.rule;
        for (int i = 0; i < c.admitted; ++i) {
            ASSERT_EQ(probe(port, "GET", target).status, 200u);
        }
        const limit_view v = probe(port, "GET", target);
        ASSERT_EQ(v.status, 429u);
        ASSERT_TRUE(v.retry_after);
        const long long retry = std::stoll(*v.retry_after);
        EXPECT_LE(retry, c.max_retry_s);
        EXPECT_GE(retry, c.min_retry_s);
        EXPECT_EQ(json_int_field(v.body, "retry_after"), retry) << v.body;
        EXPECT_EQ(json_string_field(v.body, "limit"), c.rule) << v.body;
        EXPECT_EQ(json_string_field(v.body, "error"), "rate_limited") << v.body;
        EXPECT_EQ(v.policy, c.rule);
        EXPECT_EQ(v.quota, c.quota) << "RateLimit-Policy must describe the refusing limit";
        EXPECT_EQ(v.remaining, 0);
    }
}

// A per-client bucket plus a limit shared by every client, on Redis: when the shared limit
// refuses, the request is charged nowhere, so the client's own bucket stays as it was.
TEST(RulesMultiLimit, SharedLimitRefusesAndClientBucketIsUnchangedOnRedis) {
    if (!redis_server::available()) {
        GTEST_SKIP() << "no redis-server";
    }
    redis_server redis;
    recording_upstream upstream;
    const std::string rules = redis_store_yaml(redis.port()) + R"(  rules:
    - name: completions
      match: { path: /v1/completions, methods: [POST] }
      limits:
        - { capacity: 10, flowRate: 0.01, mode: police, key: [ip, endpoint] }
        - { capacity: 3, flowRate: 0.01, mode: police, key: [endpoint] }
    - name: embeddings
      match: { path: /v1/embeddings, methods: [POST] }
      limits:
        - { capacity: 10, flowRate: 0.01, mode: police, key: [ip, endpoint] }
        - { capacity: 3, flowRate: 0.01, mode: police, key: [global] }
)";
    sluice_process sluice(make_yaml(upstream, rules, "  trusted-proxies: [\"127.0.0.1/32\"]\n"));
    const auto port = sluice.port();

    struct a_case {
        std::string path;
        std::string client_key;
        std::string shared_key;
    };

    // Method-filtered rules never own the page's key (the fallback serves the other methods of
    // the path), so even the per-client limit is scoped: rate-limit:<rule>#0:<ip>:<path>.
    const std::vector<a_case> cases = {
        {"/v1/completions",
         "rate-limit:completions#0:10.0.0.1:/v1/completions",
         "rate-limit:completions#1:/v1/completions"},
        {"/v1/embeddings",
         "rate-limit:embeddings#0:10.0.0.1:/v1/embeddings",
         "rate-limit:embeddings#1:*"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.path);
        const header_list client_a = {{"X-Forwarded-For", "10.0.0.1"}};
        const header_list client_b = {{"X-Forwarded-For", "10.0.0.2"}};
        for (int i = 0; i < 3; ++i) {
            ASSERT_EQ(probe(port, "POST", c.path, client_a).status, 200u) << "request " << i;
        }
        const std::string& client_key = c.client_key;
        resp_client store(redis.port());
        const auto client_before = as_map(store.hgetall(client_key));
        const auto shared_before = as_map(store.hgetall(c.shared_key));
        EXPECT_EQ(client_before.count("queue_size") ? client_before.at("queue_size") : "", "3")
            << client_key << " " << describe(client_before);
        EXPECT_TRUE(client_before.count("last_leak_time")) << describe(client_before);
        EXPECT_EQ(shared_before.count("queue_size") ? shared_before.at("queue_size") : "", "3")
            << c.shared_key << " " << describe(shared_before);

        const limit_view refused = probe(port, "POST", c.path, client_a);
        EXPECT_EQ(refused.status, 429u);
        EXPECT_EQ(refused.quota, 3) << "the shared limit refused";
        EXPECT_EQ(json_string_field(refused.body, "limit"), c.path.substr(4)) << refused.body;
        const auto client_after = as_map(store.hgetall(client_key));
        EXPECT_EQ(client_after, client_before) << describe(client_after);
        EXPECT_EQ(as_map(store.hgetall(c.shared_key)), shared_before);

        // Another client: refused by the shared limit too, and no bucket of its own appears.
        EXPECT_EQ(probe(port, "POST", c.path, client_b).status, 429u);
        EXPECT_FALSE(store.exists("rate-limit:10.0.0.2:" + c.path));
    }
    // Only admitted requests reached the upstream.
    ASSERT_TRUE(upstream.wait_for_count(6, 10s));
    ASSERT_TRUE(upstream.wait_quiet(5s));
    EXPECT_EQ(upstream.requests().size(), 6u);
}

class RulesIpv6 : public testing::Test {
protected:
    /// sluice behind a trusted proxy, capacity 1 per key, with `prefix` as ipv6-prefix (or the
    /// default when 0).
    std::unique_ptr<sluice_process> start(int prefix) {
        std::string rate_limit = fmt::format("  fallback: {{ capacity: 1, {} }}\n", no_leak);
        if (prefix > 0) {
            rate_limit += fmt::format("  ipv6-prefix: {}\n", prefix);
        }
        return std::make_unique<sluice_process>(
            make_yaml(upstream_, rate_limit, "  trusted-proxies: [\"127.0.0.1/32\"]\n"));
    }

    unsigned get_as(const sluice_process& sluice, const std::string& client) {
        return get(sluice.port(), "/v6", {{"X-Forwarded-For", client}}).status;
    }

    recording_upstream upstream_;
};

TEST_F(RulesIpv6, AddressesInOneSlash64ShareABucketByDefault) {
    const auto sluice = start(0);
    EXPECT_EQ(get_as(*sluice, "2001:db8:1:2::1"), 200u);
    EXPECT_EQ(get_as(*sluice, "2001:db8:1:2:ffff:ffff:ffff:fffe"), 429u) << "same /64";
    EXPECT_EQ(get_as(*sluice, "[2001:db8:1:2::7]:4711"), 429u) << "same /64, bracketed with port";
    EXPECT_EQ(get_as(*sluice, "2001:db8:1:3::1"), 200u) << "the next /64";
    EXPECT_EQ(get_as(*sluice, "2001:db8:1:3::2"), 429u);
    EXPECT_TRUE(sluice->wait_for_log("key=rate-limit:2001:db8:1:2::/64:/v6", 5s));
    EXPECT_TRUE(sluice->wait_for_log("key=rate-limit:2001:db8:1:3::/64:/v6", 5s));
}

TEST_F(RulesIpv6, PrefixOf128KeysEveryAddress) {
    const auto sluice = start(128);
    EXPECT_EQ(get_as(*sluice, "2001:db8:1:2::1"), 200u);
    EXPECT_EQ(get_as(*sluice, "2001:db8:1:2::2"), 200u) << "another address, another bucket";
    EXPECT_EQ(get_as(*sluice, "2001:db8:1:2::1"), 429u);
    EXPECT_EQ(get_as(*sluice, "2001:0db8:1:2:0:0:0:1"), 429u) << "one address, two spellings";
    EXPECT_TRUE(sluice->wait_for_log("key=rate-limit:2001:db8:1:2::1:/v6", 5s));
}

TEST_F(RulesIpv6, PrefixOf48GroupsWiderNetworks) {
    const auto sluice = start(48);
    EXPECT_EQ(get_as(*sluice, "2001:db8:1:2::1"), 200u);
    EXPECT_EQ(get_as(*sluice, "2001:db8:1:ffff::1"), 429u) << "same /48";
    EXPECT_EQ(get_as(*sluice, "2001:db8:2::1"), 200u) << "the next /48";
}

TEST(RulesHeaderKey, ApiKeysSeparateBucketsAndMissingHeaderFallsBackToIp) {
    recording_upstream upstream;
    const std::string rules = fmt::format(R"(  fallback: {{ capacity: 1, {} }}
  rules:
    - name: api
      match: {{ path: /api/* }}
      limits:
        - {{ capacity: 2, {}, key: ["header:X-Api-Key"] }}
)",
                                          no_leak,
                                          no_leak);
    sluice_process sluice(make_yaml(upstream, rules));
    const auto port = sluice.port();
    const header_list alice = {{"X-Api-Key", "alice"}};
    const header_list bob = {{"X-Api-Key", "bob"}};

    EXPECT_EQ(probe(port, "GET", "/api/a", alice).remaining, 1);
    EXPECT_EQ(probe(port, "GET", "/api/b", alice).remaining, 0) << "one key, one bucket";
    EXPECT_EQ(probe(port, "GET", "/api/c", alice).status, 429u);
    const limit_view first_bob = probe(port, "GET", "/api/a", bob);
    EXPECT_EQ(first_bob.status, 200u) << "another API key has its own bucket";
    EXPECT_EQ(first_bob.remaining, 1);
    EXPECT_EQ(probe(port, "GET", "/api/a", {{"x-api-key", "alice"}}).status, 429u)
        << "header names are case-insensitive";

    // Without the header the client address is the key: it cannot escape the limit.
    EXPECT_EQ(probe(port, "GET", "/api/a").remaining, 1);
    EXPECT_EQ(probe(port, "GET", "/api/z", {{"X-Api-Key", ""}}).remaining, 0)
        << "an empty header counts as missing";
    EXPECT_EQ(probe(port, "GET", "/api/q").status, 429u);
    EXPECT_TRUE(sluice.wait_for_log("key=rate-limit:api#0:h=alice", 5s));
    EXPECT_TRUE(sluice.wait_for_log("key=rate-limit:api#0:127.0.0.1 ", 5s));
}

// A header a limit reads, on two lines, is a 400 that never reaches the upstream: a client
// rotating the line the limit reads, while the upstream reads the other, would escape it. A
// header no limit of the request's rule reads may repeat as before.
TEST(RulesHeaderKey, AKeyHeaderOnTwoLinesGets400AndNeverReachesTheUpstream) {
    recording_upstream upstream;
    const std::string rules = fmt::format(R"(  fallback: {{ capacity: 100, {} }}
  rules:
    - name: api
      match: {{ path: /api/* }}
      limits:
        - {{ capacity: 100, {}, key: ["header:X-Api-Key"] }}
)",
                                          no_leak,
                                          no_leak);
    sluice_process sluice(make_yaml(upstream, rules));
    const auto port = sluice.port();
    const header_list twice = {{"X-Api-Key", "rotated"}, {"x-api-key", "alice"}};
    EXPECT_EQ(probe(port, "GET", "/api/a", twice).status, 400u);
    EXPECT_EQ(probe(port, "GET", "/other", twice).status, 200u) << "the fallback reads no header";
    EXPECT_EQ(probe(port, "GET", "/api/b", {{"X-Api-Key", "alice"}}).status, 200u);
    ASSERT_TRUE(upstream.wait_for_count(2, 5s));
    ASSERT_TRUE(upstream.wait_quiet(2s));
    const auto seen = upstream.requests();
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen[0].target, "/other");
    EXPECT_EQ(seen[1].target, "/api/b");
    EXPECT_TRUE(sluice.wait_for_log("path=/api/a key=- decision=- status=400", 5s))
        << sluice.log_text();
}

// server.headers-with-underscores: drop (the default). A CGI-style upstream reads X_Api_Key as
// X-Api-Key, so a client could send its key under the spelling sluice does not read; such
// fields are taken out before the limiter and never reach the upstream, and a held request's
// (whose header is parsed again when its hold ends) are taken out again and counted once.
TEST(RulesHeaderKey, FieldsWithUnderscoresAreDroppedByDefault) {
    recording_upstream upstream;
    const std::string rules = fmt::format(R"(  fallback: {{ capacity: 100, {} }}
  rules:
    - name: api
      match: {{ path: /api/* }}
      limits:
        - {{ capacity: 1, {}, key: ["header:X-Api-Key"] }}
    - name: held
      match: {{ path: /held/* }}
      limits:
        - {{ capacity: 5, flowRate: 5 }}
)",
                                          no_leak,
                                          no_leak);
    sluice_process sluice(make_yaml(upstream, rules));
    const auto port = sluice.port();
    const auto admin = admin_port(sluice);
    const header_list spoof = {{"X_Api_Key", "victim"}, {"X-Api-Key", "alice"}};
    EXPECT_EQ(probe(port, "GET", "/api/a", spoof).status, 200u);
    EXPECT_EQ(probe(port, "GET", "/api/a", {{"X-Api-Key", "alice"}}).status, 429u)
        << "the limiter read X-Api-Key alone";
    const header_list traced = {{"X_Trace", "1"}, {"X-Trace", "2"}, {"x_b", "3"}};
    EXPECT_EQ(probe(port, "GET", "/held/a", traced).status, 200u);
    EXPECT_EQ(probe(port, "GET", "/held/a", traced).status, 200u);
    ASSERT_TRUE(upstream.wait_for_count(3, 5s));
    ASSERT_TRUE(upstream.wait_quiet(1s));
    const auto seen = upstream.requests();
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen[0].header("X-Api-Key"), "alice");
    EXPECT_EQ(seen[0].header("X_Api_Key"), std::nullopt);
    for (std::size_t i = 1; i < 3; ++i) {
        EXPECT_EQ(seen[i].header("X-Trace"), "2") << i;
        EXPECT_EQ(seen[i].header("X_Trace"), std::nullopt) << i;
        EXPECT_EQ(seen[i].header("x_b"), std::nullopt) << i;
    }
    bool met = false;
    const std::string text = wait_for_metrics(
        admin,
        [](const std::string& t) { return metric_or_zero(t, "sluice_held_requests_total") >= 1; },
        5s,
        met);
    ASSERT_TRUE(met) << "the second /held request was held: " << text;
    EXPECT_EQ(metric_value(text, "sluice_dropped_header_fields_total"), 5) << text;
}

// headers-with-underscores: reject refuses such a request with 400 (never forwarded, and the
// connection is kept); allow forwards it whole, as before there was a choice.
TEST(RulesHeaderKey, FieldsWithUnderscoresAreRefusedOrAllowedAsConfigured) {
    recording_upstream upstream;
    const std::string rules = fmt::format("  fallback: {{ capacity: 100, {} }}\n", no_leak);
    {
        sluice_process sluice(make_yaml(upstream, rules, "  headers-with-underscores: reject\n"));
        http_connection connection(sluice.port());
        connection.send("GET", "/a", {{"X_Api_Key", "k"}});
        EXPECT_EQ(connection.read_response().status, 400u);
        connection.send("GET", "/b", {{"X-Api-Key", "k"}});
        EXPECT_EQ(connection.read_response().status, 200u) << "the connection carries on";
        ASSERT_TRUE(upstream.wait_for_count(1, 5s));
        ASSERT_TRUE(upstream.wait_quiet(1s));
        ASSERT_EQ(upstream.requests().size(), 1u);
        EXPECT_EQ(upstream.requests()[0].target, "/b");
        EXPECT_TRUE(sluice.wait_for_log("path=/a key=- decision=- status=400", 5s))
            << sluice.log_text();
    }
    sluice_process sluice(make_yaml(upstream, rules, "  headers-with-underscores: allow\n"));
    EXPECT_EQ(probe(sluice.port(), "GET", "/c", {{"X_Api_Key", "k"}}).status, 200u);
    ASSERT_TRUE(upstream.wait_for_count(2, 5s));
    EXPECT_EQ(upstream.requests()[1].header("X_Api_Key"), "k");
}

// A key header longer than 256 bytes (a JWT, say) is keyed by its first 240 bytes and a digest
// of the whole (FNV-1a 64 of 1,000 'k's, computed apart with python3): two such keys differing
// only at their end have buckets of their own.
TEST(RulesHeaderKey, LongKeyHeadersAreKeyedByTheirDigest) {
    recording_upstream upstream;
    const std::string rules = fmt::format(R"(  rules:
    - name: api
      match: {{ path: /api/* }}
      limits:
        - {{ capacity: 1, {}, key: ["header:X-Api-Key"] }}
)",
                                          no_leak);
    sluice_process sluice(make_yaml(upstream, rules));
    const auto port = sluice.port();
    const std::string one(1000, 'k');
    const std::string other = std::string(999, 'k') + "z";
    EXPECT_EQ(probe(port, "GET", "/api/a", {{"X-Api-Key", one}}).status, 200u);
    EXPECT_EQ(probe(port, "GET", "/api/a", {{"X-Api-Key", one}}).status, 429u);
    EXPECT_EQ(probe(port, "GET", "/api/a", {{"X-Api-Key", other}}).status, 200u);
    EXPECT_TRUE(sluice.wait_for_log(
        "key=rate-limit:api#0:h=" + std::string(240, 'k') + "~156dfe4694b8e4fd ", 5s))
        << sluice.log_text();
}

TEST(RulesDryRun, ForwardsEverythingAndCountsWouldBeRejections) {
    recording_upstream upstream;
    const std::string rules =
        fmt::format("  fallback: {{ capacity: 2, {}, dry-run: true }}\n", no_leak);
    sluice_process sluice(make_yaml(upstream, rules));
    const auto admin = admin_port(sluice);

    constexpr int count = 7;
    http_connection connection(sluice.port());
    for (int i = 0; i < count; ++i) {
        connection.send("GET", "/dry");
        EXPECT_EQ(connection.read_response().status, 200u) << "request " << i;
    }
    ASSERT_TRUE(upstream.wait_for_count(count, 10s));
    bool met = false;
    const std::string text = wait_for_metrics(
        admin,
        [](const std::string& t) {
            return metric_or_zero(t,
                                  R"(sluice_requests_total{decision="allowed",rule="fallback"})") +
                       metric_or_zero(
                           t,
                           R"(sluice_requests_total{decision="dry_run_rejected",rule="fallback"})") >=
                   count;
        },
        10s,
        met);
    ASSERT_TRUE(met) << text;
    // Each request counts once: the decisions add up to the requests.
    EXPECT_EQ(metric_value(text, R"(sluice_requests_total{decision="allowed",rule="fallback"})"),
              2);
    EXPECT_EQ(metric_value(text, R"(sluice_requests_total{decision="rejected",rule="fallback"})"),
              0);
    EXPECT_EQ(
        metric_value(text, R"(sluice_requests_total{decision="dry_run_rejected",rule="fallback"})"),
        count - 2);
}

// --- every algorithm through each store -------------------------------------------------------

struct algorithm_case {
    const char* name;
    const char* limit;  // the fallback limit's YAML, inside braces
    long long quota;    // how many a burst admits
    long long window_s; // RateLimit-Policy w, 0 if none
    bool redis;
};

void PrintTo(const algorithm_case& c, std::ostream* os) {
    *os << c.name << (c.redis ? " on redis" : " in memory");
}

std::string algorithm_case_name(const testing::TestParamInfo<algorithm_case>& info) {
    return std::string(info.param.redis ? "Redis" : "Memory") + info.param.name;
}

class RulesAlgorithm : public testing::TestWithParam<algorithm_case> {};

// Windows of a day and refills of one token in 1000 s: nothing frees up during the burst (a
// fixed window could only reset if the burst straddled a midnight of the store's clock).
TEST_P(RulesAlgorithm, BurstAdmitsExactlyTheQuota) {
    const algorithm_case& c = GetParam();
    std::unique_ptr<redis_server> redis;
    std::string store = "  store: memory\n";
    if (c.redis) {
        if (!redis_server::available()) {
            GTEST_SKIP() << "no redis-server";
        }
        redis = std::make_unique<redis_server>();
        store = redis_store_yaml(redis->port());
    }
    recording_upstream upstream;
    sluice_process sluice(
        make_yaml(upstream, store + fmt::format("  fallback: {{ {} }}\n", c.limit)));

    const limit_view first = probe(sluice.port(), "GET", "/first");
    if (c.redis && first.status == 503) {
        GTEST_SKIP() << c.name
                     << " is not supported by the Redis script yet: the first request got 503; "
                     << "sluice log:\n"
                     << sluice.log_text();
    }
    ASSERT_EQ(first.status, 200u);

    constexpr int sent = 12;
    const burst_counts result = burst_get(sluice.port(), sent, "/burst");
    EXPECT_EQ(result.admitted, c.quota);
    EXPECT_EQ(result.rejected, sent - c.quota);
    EXPECT_EQ(result.other, 0);
    for (const auto& response : result.responses) {
        const limit_view v = view_of(response);
        EXPECT_EQ(v.quota, c.quota);
        if (c.window_s > 0) {
            const auto policy = parse_sf_item(response.header("RateLimit-Policy").value_or(""));
            ASSERT_TRUE(policy);
            EXPECT_EQ(policy->integer("w"), c.window_s);
        }
        if (response.status == 429) {
            ASSERT_TRUE(v.retry_after);
            EXPECT_GE(std::stoll(*v.retry_after), 1);
            EXPECT_EQ(v.remaining, 0);
        }
    }
    const auto forwarded = static_cast<std::size_t>(1 + result.admitted);
    ASSERT_TRUE(upstream.wait_for_count(forwarded, 10s));
    ASSERT_TRUE(upstream.wait_quiet(5s));
    EXPECT_EQ(upstream.requests().size(), forwarded);
}

constexpr const char* token_bucket = "algorithm: TOKEN_BUCKET, capacity: 5, refillRate: 0.001";
constexpr const char* fixed_window = "algorithm: FIXED_WINDOW, limit: 4, window: 24h";
constexpr const char* sliding_window = "algorithm: SLIDING_WINDOW, limit: 6, window: 24h";
constexpr const char* leaky_bucket = "algorithm: LEAKY_BUCKET, capacity: 3, flowRate: 0.001, "
                                     "mode: police";

INSTANTIATE_TEST_SUITE_P(
    Rules,
    RulesAlgorithm,
    testing::Values(algorithm_case{"TokenBucket", token_bucket, 5, 0, false},
                    algorithm_case{"FixedWindow", fixed_window, 4, 86400, false},
                    algorithm_case{"SlidingWindow", sliding_window, 6, 86400, false},
                    algorithm_case{"LeakyBucket", leaky_bucket, 3, 0, false},
                    algorithm_case{"TokenBucket", token_bucket, 5, 0, true},
                    algorithm_case{"FixedWindow", fixed_window, 4, 86400, true},
                    algorithm_case{"SlidingWindow", sliding_window, 6, 86400, true},
                    algorithm_case{"LeakyBucket", leaky_bucket, 3, 0, true}),
    algorithm_case_name);

} // namespace
} // namespace sluice::test
