// SPDX-License-Identifier: Apache-2.0
// Invalid configurations: each problem names its key and its line, and all are reported at once.
#include "config_test_util.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace sluice::config::test {
namespace {

TEST(ConfigErrors, UnknownTopLevelKeySuggestsTheNearestOne) {
    const auto p = problems_of(base + "rate_limit:\n  store: memory\n");
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(has_problem(p, 3, "rate_limit", "unknown key; did you mean 'rate-limit'?"));
}

TEST(ConfigErrors, UnknownNestedKeySuggestsTheNearestOne) {
    const auto p = problems_of(base + R"(rate-limit:
  fallback:
    algorithm: LEAKY_BUCKET
    capacity: 50
    flowrate: 5
)");
    EXPECT_TRUE(
        has_problem(p, 7, "rate-limit.fallback.flowrate", "unknown key; did you mean 'flowRate'?"));
    // The misspelt parameter also leaves the real one missing: never a silent default.
    EXPECT_TRUE(has_problem(p, 4, "rate-limit.fallback.flowRate", "is required"));
}

TEST(ConfigErrors, UnknownKeyFarFromAnyListsTheKnownOnes) {
    const auto p = problems_of(base + "logging:\n  colour: true\n");
    EXPECT_TRUE(has_problem(p, 4, "logging.colour", "known keys here: access-log, format, level"));
}

TEST(ConfigErrors, WrongTypes) {
    const auto p = problems_of(base + R"(server:
  workers: [1, 2]
  listen: { host: x }
logging:
  access-log: maybe
rate-limit: 5
)");
    EXPECT_TRUE(
        has_problem(p, 4, "server.workers", "must be an integer between 0 and 1024, got a list"));
    EXPECT_TRUE(has_problem(p, 5, "server.listen", "must be a non-empty string, got a mapping"));
    EXPECT_TRUE(has_problem(p, 7, "logging.access-log", "must be true or false, got 'maybe'"));
    EXPECT_TRUE(has_problem(p, 8, "rate-limit", "must be a mapping, got '5'"));
}

TEST(ConfigErrors, CapacityMustBePositive) {
    for (const std::string bad : {"0", "-3", "2.5", "abc"}) {
        const auto p = problems_of(base + "rate-limit:\n  fallback:\n    capacity: " + bad +
                                   "\n    flowRate: 5\n");
        EXPECT_TRUE(
            has_problem(p,
                        5,
                        "rate-limit.fallback.capacity",
                        "must be an integer between 1 and 9007199254740992, got '" + bad + "'"));
    }
}

TEST(ConfigErrors, FlowRateMustBeAboveZero) {
    for (const std::string bad :
         {"0", "-1", "abc", ".inf", "nan", "0r/s", "-5r/m", "0.0r/h", "5r/d", "5 r/sec", "r/s"}) {
        const auto p = problems_of(
            base + "rate-limit:\n  fallback:\n    capacity: 5\n    flowRate: " + bad + "\n");
        EXPECT_TRUE(has_problem(
            p, 6, "rate-limit.fallback.flowRate", "must be a rate > 0 such as 5 (per second)"))
            << bad;
        EXPECT_TRUE(has_problem(p, 6, "rate-limit.fallback.flowRate", "got '" + bad + "'"));
    }
}

// Beyond one a nanosecond, a rate is a typo (zeros too many) that would switch the limit off: a
// slot shorter than the buckets' tolerance leaks at every request.
TEST(ConfigErrors, ARateAboveOneANanosecondIsRefused) {
    for (const std::string bad : {"1000000001", "50000000000", "4000000000000r/h"}) {
        const auto p = problems_of(
            base + "rate-limit:\n  fallback:\n    capacity: 5\n    flowRate: " + bad + "\n");
        EXPECT_TRUE(has_problem(p,
                                6,
                                "rate-limit.fallback.flowRate",
                                "must be a rate of at most 1000000000 per second (one a "
                                "nanosecond), got '" +
                                    bad + "'"))
            << bad;
    }
    const auto cfg =
        load(base + "rate-limit:\n  fallback:\n    capacity: 5\n    flowRate: 1000000000\n");
    EXPECT_EQ(cfg.rate_limit.fallback.flow_rate, 1e9);
}

TEST(ConfigErrors, FractionalFlowRateIsAccepted) {
    const auto cfg = load(base + "rate-limit:\n  fallback:\n    capacity: 5\n    flowRate: 0.5\n");
    EXPECT_EQ(cfg.rate_limit.fallback.flow_rate, 0.5);
}

TEST(ConfigErrors, BadDuration) {
    const auto p = problems_of(base + "rate-limit:\n  redis:\n    ttl: 5 parsecs\n");
    EXPECT_TRUE(has_problem(
        p,
        5,
        "rate-limit.redis.ttl",
        "must be a duration > 0 such as 500ms, 30s, 2m30s, 1h, 1d or 1.5 (seconds), got "
        "'5 parsecs'"));
}

TEST(ConfigErrors, ZeroAndNegativeDurations) {
    const auto p = problems_of(base + "server:\n  idle-timeout: 0\n  drain-timeout: -1s\n");
    EXPECT_TRUE(has_problem(p, 4, "server.idle-timeout", "must be a duration > 0"));
    EXPECT_TRUE(has_problem(p, 5, "server.drain-timeout", "must be a duration >= 0"));
}

TEST(ConfigErrors, BadSizes) {
    const auto p = problems_of(base + "server:\n  max-header-size: 16kb\n  max-body-size: -1\n"
                                      "  max-uri-length: 0\n  max-chunk-header-size: 0\n"
                                      "  max-trailer-size: 2GiB\n  request-buffer-size: 2GiB\n");
    EXPECT_TRUE(has_problem(p, 4, "server.max-header-size", "got '16kb'"));
    EXPECT_TRUE(has_problem(p, 5, "server.max-body-size", "must be a size >= 0B"));
    EXPECT_TRUE(has_problem(p, 6, "server.max-uri-length", "must be a size between 1B and 1GiB"));
    EXPECT_TRUE(
        has_problem(p, 7, "server.max-chunk-header-size", "must be a size between 1B and 1GiB"));
    EXPECT_TRUE(has_problem(p, 8, "server.max-trailer-size", "must be a size between 1B and 1GiB"));
    EXPECT_TRUE(
        has_problem(p, 9, "server.request-buffer-size", "must be a size between 0B and 1GiB"));
}

TEST(ConfigErrors, AnUpstreamHeadLimitOutOfRange) {
    const std::pair<std::string, std::string> cases[] = {
        {"0", "must be a size between 1B and 1GiB"},
        {"2GiB", "must be a size between 1B and 1GiB"},
        {"64kb", "got '64kb'"},
    };
    for (const auto& [value, text] : cases) {
        const auto p = problems_of(base + "  max-header-size: " + value + "\n");
        EXPECT_TRUE(has_problem(p, 3, "upstream.max-header-size", text)) << value;
    }
}

TEST(ConfigErrors, BadListenAddresses) {
    const auto p = problems_of(base + R"(server:
  listen: 127.0.0.1
admin:
  listen: ::1:9901
)");
    EXPECT_TRUE(has_problem(p, 4, "server.listen", "the port is missing"));
    EXPECT_TRUE(has_problem(p, 6, "admin.listen", "an IPv6 address needs brackets"));
    for (const std::string bad :
         {"127.0.0.1:70000", "300.1.1.1:80", ":", ":x", "[zz]:80", "a b:1"}) {
        const auto q = problems_of(base + "server:\n  listen: \"" + bad + "\"\n");
        EXPECT_TRUE(has_problem(
            q, 4, "server.listen", "must be host:port, [v6]:port or :port, got '" + bad))
            << bad;
    }
}

TEST(ConfigErrors, ListenWithoutHostIsEveryInterface) {
    const auto cfg = load(base + "server:\n  listen: :8080\nadmin:\n  listen: \":9901\"\n");
    EXPECT_EQ(cfg.server.listen.host, "0.0.0.0");
    EXPECT_EQ(cfg.server.listen.port, 8080);
    EXPECT_EQ(cfg.admin.listen.host, "0.0.0.0");
    EXPECT_EQ(cfg.admin.listen.port, 9901);
}

TEST(ConfigErrors, FamiliarSpellingsAreRead) {
    const auto cfg = load(base + R"(server:
  max-body-size: 10MB
  max-header-size: 1.5k
  idle-timeout: 2m30s
  body-timeout: 1d
rate-limit:
  fallback: { algorithm: LEAKY_BUCKET, capacity: 5, flowRate: 600r/m }
  rules:
    - name: api
      match: { path: /api }
      limits:
        - { algorithm: TOKEN_BUCKET, capacity: 5, refillRate: 36r/h }
)");
    EXPECT_EQ(cfg.server.max_body_bytes, 10u << 20);
    EXPECT_EQ(cfg.server.max_header_bytes, 1'536u);
    EXPECT_EQ(cfg.server.idle_timeout, std::chrono::seconds(150));
    EXPECT_EQ(cfg.server.body_timeout, std::chrono::hours(24));
    EXPECT_EQ(cfg.rate_limit.fallback.flow_rate, 10.0);
    ASSERT_EQ(cfg.rate_limit.rules.size(), 1u);
    EXPECT_EQ(cfg.rate_limit.rules[0].limits[0].refill_rate, 0.01);
}

TEST(ConfigErrors, FamiliarSpellingsKeepTheRanges) {
    const auto p = problems_of(base + R"(server:
  max-header-size: 1.5GB
  max-uri-length: 0.5
  idle-timeout: 0m0s
  body-timeout: 40000d
rate-limit:
  fallback: { algorithm: TOKEN_BUCKET, capacity: 5, refillRate: 0r/h }
)");
    EXPECT_TRUE(has_problem(p, 4, "server.max-header-size", "must be a size between 1B and 1GiB"));
    EXPECT_TRUE(has_problem(p, 5, "server.max-uri-length", "got '0.5'"));
    EXPECT_TRUE(has_problem(p, 6, "server.idle-timeout", "must be a duration > 0"));
    EXPECT_TRUE(has_problem(p, 7, "server.body-timeout", "got '40000d'"));
    EXPECT_TRUE(has_problem(p, 9, "rate-limit.fallback.refillRate", "must be a rate > 0"));
}

TEST(ConfigErrors, AdminCannotShareTheProxyPort) {
    const auto p = problems_of(base + "server:\n  listen: 127.0.0.1:9000\nadmin:\n"
                                      "  listen: 127.0.0.1:9000\n");
    EXPECT_TRUE(has_problem(p, 6, "admin.listen", "must differ from server.listen"));

    // A wildcard takes the port on the other's address too.
    for (const auto& [server, admin] : {std::pair{":9000", "127.0.0.1:9000"},
                                        std::pair{"127.0.0.1:9000", "0.0.0.0:9000"},
                                        std::pair{"\"[::]:9000\"", "127.0.0.1:9000"},
                                        std::pair{"\"[::1]:9000\"", "\"[::]:9000\""}}) {
        const auto q = problems_of(base + "server:\n  listen: " + server +
                                   "\nadmin:\n  listen: " + admin + "\n");
        EXPECT_TRUE(has_problem(q, 6, "admin.listen", "must differ from server.listen"))
            << server << " " << admin;
    }
    // Different hosts of one family, 0.0.0.0 beside an IPv6 address, and port 0 do not clash.
    for (const auto& [server, admin] : {std::pair{"127.0.0.1:9000", "127.0.0.2:9000"},
                                        std::pair{":9000", "\"[::1]:9000\""},
                                        std::pair{"127.0.0.1:0", "127.0.0.1:0"}}) {
        EXPECT_NO_THROW(
            load(base + "server:\n  listen: " + server + "\nadmin:\n  listen: " + admin + "\n"))
            << server << " " << admin;
    }
}

// With admin.listen left to its default, the line to point at is server.listen's.
TEST(ConfigErrors, AProxyPortOnTheDefaultAdminPortNamesServerListen) {
    const auto p = problems_of(base + "server:\n  listen: 127.0.0.1:9901\n");
    EXPECT_TRUE(has_problem(p, 4, "server.listen", "must differ from admin.listen"));
    EXPECT_TRUE(has_problem(p, 4, "server.listen", "admin.enabled: false"));
    EXPECT_EQ(p.size(), 1u);
    EXPECT_NO_THROW(load(base + "server:\n  listen: 127.0.0.1:9901\nadmin:\n  enabled: false\n"));
}

// An invalid cost.request gets its own message, not also "is required": it is written. A
// number out of range is told its range; anything else, the forms a source takes.
TEST(ConfigErrors, AnInvalidCostRequestIsNotAlsoMissing) {
    for (const auto& [source, words] :
         {std::pair{"0", "an integer between 1"},
          std::pair{"body:max_tokens",
                    "a number, header:NAME or json:PATH, got 'body:max_tokens'"}}) {
        const auto p = problems_of(base + R"(rate-limit:
  fallback:
    algorithm: SLIDING_WINDOW
    limit: 5
    window: 1m
    cost: { request: )" + std::string(source) +
                                   " }\n");
        EXPECT_TRUE(has_problem(p, 8, "rate-limit.fallback.cost.request", words)) << source;
        EXPECT_EQ(p.size(), 1u) << source;
    }
}

// A limit reading a header that headers-with-underscores takes out (or refuses) would never see
// it: refused at the limit's line, under drop (the default) and reject; allowed under allow.
TEST(ConfigErrors, ALimitCannotReadAHeaderWithUnderscoresUnlessTheyAreAllowed) {
    const std::string limits = R"(rate-limit:
  fallback: { capacity: 5, flowRate: 1, key: ["header:X_Api_Key"] }
  rules:
    - name: llm
      match: { path: /v1/* }
      limits:
        - { capacity: 5, flowRate: 1 }
        - algorithm: TOKEN_BUCKET
          capacity: 100
          refillRate: 10
          cost: { request: "header:X_Tokens", default: 1 }
)";
    for (const std::string policy : {"", "server:\n  headers-with-underscores: reject\n"}) {
        const auto p = problems_of(base + policy + limits);
        const int shift = policy.empty() ? 0 : 2;
        ASSERT_EQ(p.size(), 2u) << policy;
        EXPECT_TRUE(has_problem(
            p, 4 + shift, "rate-limit.fallback", "reads header 'X_Api_Key', whose name has '_'"));
        EXPECT_TRUE(has_problem(p,
                                10 + shift,
                                "rate-limit.rules[0].limits[1]",
                                "reads header 'X_Tokens', whose name has '_': "
                                "server.headers-with-underscores is " +
                                    std::string(policy.empty() ? "drop" : "reject")));
    }
    EXPECT_NO_THROW(load(base + "server:\n  headers-with-underscores: allow\n" + limits));
    const auto p = problems_of(base + "server:\n  headers-with-underscores: ignore\n");
    EXPECT_TRUE(has_problem(p,
                            4,
                            "server.headers-with-underscores",
                            "must be one of allow, drop, reject, got 'ignore'"));
}

TEST(ConfigErrors, BadTrustedProxy) {
    const auto p =
        problems_of(base + "server:\n  trusted-proxies:\n    - 10.0.0.0/8\n    - 10.0.0.0/33\n");
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(
        has_problem(p,
                    6,
                    "server.trusted-proxies[1]",
                    "must be an address or CIDR block such as 10.0.0.0/8, got '10.0.0.0/33'"));
}

// rate-limit.redis.host is checked where it is read: a host that fails every connect would let
// the failure mode decide every request (with `open`, every limit lifted).
TEST(ConfigErrors, ARedisHostThatCannotBeReachedIsRefused) {
    const auto redis = [](const std::string& host) {
        return problems_of(base + "rate-limit:\n  store: redis\n  redis:\n    host: \"" + host +
                           "\"\n");
    };
    EXPECT_TRUE(has_problem(redis("10.0.0.5:6380"),
                            6,
                            "rate-limit.redis.host",
                            "'10.0.0.5:6380' names a port: give the host alone, and the port in "
                            "rate-limit.redis.port"));
    EXPECT_TRUE(has_problem(redis("redis://cache"),
                            6,
                            "rate-limit.redis.host",
                            "'redis://cache' is not a host name, an IP address or a unix "
                            "socket's path"));
    EXPECT_TRUE(has_problem(redis("cache_1"), 6, "rate-limit.redis.host", "is not a host name"));
    EXPECT_TRUE(has_problem(redis("/" + std::string(107, 's')),
                            6,
                            "rate-limit.redis.host",
                            "a unix socket's path is at most 107 bytes (108 given)"));
    for (const std::string good :
         {"cache", "redis.internal.example", "10.0.0.5", "::1", "fd00::5", "/run/redis.sock"}) {
        EXPECT_NO_THROW(
            load(base + "rate-limit:\n  store: redis\n  redis:\n    host: \"" + good + "\"\n"))
            << good;
    }
}

// An explicit YAML tag is refused where it stands: yaml-cpp keeps the text as written, so
// `!!binary` base64 would be the value itself, and `!!str 5` a number.
TEST(ConfigErrors, AYamlTagIsRefused) {
    const auto p =
        problems_of(base + "rate-limit:\n  fallback:\n    capacity: !!str 5\n"
                           "    flowRate: 1\n  redis:\n    password: !!binary c2VjcmV0\n");
    EXPECT_TRUE(has_problem(
        p, 5, "rate-limit.fallback.capacity", "a YAML tag is not read: write the value plainly"));
    EXPECT_TRUE(has_problem(
        p, 8, "rate-limit.redis.password", "a YAML tag is not read: write the value plainly"));
}

// YAML's merge key (`<<: *defaults`) is not applied by the YAML library: it is named as what it
// is, not answered with a known key of a similar spelling; an alias as a whole value works.
TEST(ConfigErrors, AMergeKeyIsNamedAsOne) {
    const auto p = problems_of(base + "rate-limit:\n  fallback: &d { capacity: 10, flowRate: 5 }\n"
                                      "  rules:\n    - name: a\n      match: { path: /a }\n"
                                      "      limits:\n        - <<: *d\n          mode: shape\n");
    EXPECT_TRUE(has_problem(p,
                            9,
                            "rate-limit.rules[0].limits[0].<<",
                            "a YAML merge key, which sluice does not apply: write the keys out"));
    const auto cfg = load(base + "rate-limit:\n  fallback: &d { capacity: 10, flowRate: 5 }\n"
                                 "  rules:\n    - name: a\n      match: { path: /a }\n"
                                 "      limits: [ *d ]\n");
    ASSERT_EQ(cfg.rate_limit.rules.size(), 1u);
    EXPECT_EQ(cfg.rate_limit.rules[0].limits.at(0).capacity, 10);
}

// A document whose aliases expand past the values a configuration can hold is refused before
// it is read: each alias the readers followed would be expanded again (here 1,000 rules of 100
// limits each, from 5 KB of text: one problem each, and a limit built for each, on the control
// thread during a reload). One problem, the expansion's.
TEST(ConfigErrors, AliasesExpandingPastTheValueCapStopTheLoadBeforeItIsRead) {
    std::string limits = "&M {algorithm: FIXED_WINDOW}";
    for (int i = 1; i < 100; ++i) {
        limits += ", *M";
    }
    std::string rules = "&R {name: a, match: {path: /}, limits: [" + limits + "]}";
    for (int i = 1; i < 1000; ++i) {
        rules += ", *R";
    }
    const auto p = problems_of(base + "rate-limit:\n  rules: [" + rules + "]\n");
    ASSERT_EQ(p.size(), 1u) << p.front() << "\n... and " << p.size() - 1 << " more";
    EXPECT_NE(p.front().find("values (aliases expanding?)"), std::string::npos) << p.front();
}

// A value quoted in a message has its control bytes written as \xNN: one problem stays one line.
TEST(ConfigErrors, AQuotedValueKeepsItsMessageOnOneLine) {
    const auto p = problems_of(base + "rate-limit:\n  store: \"me\\nmory\"\n");
    ASSERT_EQ(p.size(), 1u) << p.front();
    EXPECT_TRUE(has_problem(p, 4, "rate-limit.store", "'me\\x0amory'")) << p.front();
}

TEST(ConfigErrors, HttpsUpstreamIsRejected) {
    const auto p = problems_of("upstream:\n  url: https://api.example.com\n");
    EXPECT_TRUE(has_problem(p, 2, "upstream.url", "https is not supported"));
}

TEST(ConfigErrors, UpstreamUrlForms) {
    for (const std::string bad :
         {"ftp://x", "http://x/api", "http://x?q=1", "http://u@x", "http://x:0", "http://"}) {
        const auto p = problems_of("upstream:\n  url: \"" + bad + "\"\n");
        EXPECT_TRUE(has_problem(p, 2, "upstream.url", "must be http://host[:port], got '" + bad))
            << bad;
    }
    const auto cfg = load("upstream:\n  url: http://[::1]:8000\n");
    EXPECT_EQ(cfg.upstream.host, "::1");
    EXPECT_EQ(cfg.upstream.port, 8000);
}

TEST(ConfigErrors, MissingUpstream) {
    const auto empty = problems_of("");
    EXPECT_TRUE(has_problem(empty, 1, "upstream.url", "is required"));
    const auto no_url = problems_of("logging:\n  level: info\nupstream:\n  timeout: 5s\n");
    EXPECT_TRUE(has_problem(no_url, 3, "upstream.url", "is required"));
}

TEST(ConfigErrors, SyntaxErrorNamesItsLine) {
    const auto p = problems_of(base + "server:\n  listen: [127.0.0.1:8080\n  workers: 2\n");
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p[0].rfind("t.yaml:", 0), 0u) << p[0];
    EXPECT_NE(p[0].find("YAML syntax error"), std::string::npos) << p[0];
    const auto tab = problems_of("upstream:\n\turl: http://x\n");
    ASSERT_EQ(tab.size(), 1u);
    EXPECT_EQ(tab[0].rfind("t.yaml:2: YAML syntax error", 0), 0u) << tab[0];
}

// yaml-cpp 0.7.0's LoadAll never returns on these: its parser stops at the ',' and reports an
// empty document there, again and again, while LoadAll collects them until memory runs out
// (found by fuzz/config_loader_fuzz.cpp; " :\n," is the 3,840-byte finding reduced). The loader
// reads two documents at most. Without that, this test runs out of memory.
TEST(ConfigErrors, TextYamlCppCannotGetPastIsASyntaxErrorNotAnEndlessParse) {
    for (const std::string yaml : {",u",
                                   " :\n,",
                                   "# comment\n\n  ,a\n",
                                   "---\n!tag &anchor ,a",
                                   "--- ,a\n",
                                   "%YAML 1.2\n---\n,a"}) {
        const auto p = problems_of(yaml);
        ASSERT_EQ(p.size(), 1u) << yaml;
        EXPECT_NE(p[0].find("YAML syntax error: unexpected ','"), std::string::npos) << p[0];
    }
    const auto at_line = problems_of(base + "x:\n  y: 1\n ,z\n");
    ASSERT_EQ(at_line.size(), 1u);
    EXPECT_EQ(at_line[0].rfind("t.yaml:5: YAML syntax error", 0), 0u) << at_line[0];
    // After a document marker the second document is what is wrong, whatever it holds.
    const auto marker = problems_of(base + "---\n,x\n");
    ASSERT_EQ(marker.size(), 1u);
    EXPECT_EQ(marker[0].rfind("t.yaml:3: only one YAML document is allowed", 0), 0u) << marker[0];
    // A comma inside a document, or leading a line of a flow sequence, is YAML's business.
    EXPECT_NO_THROW(load(base + "server:\n  listen: \"127.0.0.1:0\"\nrate-limit:\n  fallback:\n"
                                "    algorithm: LEAKY_BUCKET\n    capacity: 5\n    flowRate: 1\n"
                                "    key: [ip\n      , endpoint]\n"));
}

TEST(ConfigErrors, TextAfterTheEndOfTheDocumentIsRejected) {
    const auto p = problems_of(base + "...\nserver:\n  workers: 2\n");
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p[0].rfind("t.yaml:4: YAML syntax error: unexpected 's' (only one YAML document", 0),
              0u)
        << p[0];
}

TEST(ConfigErrors, EveryProblemIsCollectedInLineOrder) {
    const auto p = problems_of(R"(server:
  workers: -1
  idle-timeout: soon
rate-limit:
  store: mongo
  fallback: { capacity: 0, flowRate: 0 }
  redis: { failure-mode: ajar }
logging: { level: loud }
)");
    ASSERT_EQ(p.size(), 8u);
    EXPECT_TRUE(has_problem(p, 1, "upstream.url", "is required"));
    EXPECT_TRUE(has_problem(p, 2, "server.workers", "got '-1'"));
    EXPECT_TRUE(has_problem(p, 3, "server.idle-timeout", "got 'soon'"));
    EXPECT_TRUE(has_problem(p, 5, "rate-limit.store", "must be one of memory, redis, got 'mongo'"));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.fallback.capacity", "got '0'"));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.fallback.flowRate", "got '0'"));
    EXPECT_TRUE(has_problem(p, 7, "rate-limit.redis.failure-mode", "got 'ajar'"));
    EXPECT_TRUE(has_problem(p, 8, "logging.level", "got 'loud'"));
    for (std::size_t i = 1; i < p.size(); ++i) {
        EXPECT_LE(std::stoi(p[i - 1].substr(7)), std::stoi(p[i].substr(7)));
    }
}

TEST(ConfigErrors, MissingAlgorithmParameters) {
    const auto p = problems_of(base + R"(rate-limit:
  fallback:
    algorithm: TOKEN_BUCKET
    capacity: 5
)");
    EXPECT_TRUE(has_problem(p,
                            4,
                            "rate-limit.fallback.refillRate",
                            "is required (TOKEN_BUCKET takes capacity, refillRate)"));
}

TEST(ConfigErrors, ParametersOfAnotherAlgorithm) {
    const auto p = problems_of(base + R"(rate-limit:
  fallback:
    capacity: 5
    flowRate: 1
    refillRate: 2
    window: 1m
)");
    ASSERT_EQ(p.size(), 2u);
    EXPECT_TRUE(has_problem(p,
                            7,
                            "rate-limit.fallback.refillRate",
                            "does not apply to LEAKY_BUCKET, which takes capacity, flowRate"));
    EXPECT_TRUE(has_problem(p, 8, "rate-limit.fallback.window", "does not apply to LEAKY_BUCKET"));
}

TEST(ConfigErrors, WindowAlgorithmsTakeLimitAndWindow) {
    const auto p = problems_of(base + R"(rate-limit:
  fallback: { algorithm: SLIDING_WINDOW, limit: 10, window: 0s, capacity: 3 }
)");
    EXPECT_TRUE(has_problem(p, 4, "rate-limit.fallback.window", "must be a duration > 0"));
    EXPECT_TRUE(
        has_problem(p, 4, "rate-limit.fallback.capacity", "does not apply to SLIDING_WINDOW"));
}

TEST(ConfigErrors, UnknownAlgorithm) {
    const auto p = problems_of(base + R"(rate-limit:
  fallback:
    algorithm: leaky_bucket
    capacity: 5
    flowRate: 1
)");
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(has_problem(p, 5, "rate-limit.fallback.algorithm", "did you mean 'LEAKY_BUCKET'?"));
    const auto q =
        problems_of(base + "rate-limit:\n  fallback: { algorithm: GCRA, capacity: 5 }\n");
    ASSERT_EQ(q.size(), 1u);
    EXPECT_TRUE(
        has_problem(q,
                    4,
                    "rate-limit.fallback.algorithm",
                    "must be one of LEAKY_BUCKET, TOKEN_BUCKET, FIXED_WINDOW, FIXED_COUNTER, "
                    "SLIDING_WINDOW, CONCURRENCY, got 'GCRA'"));
}

TEST(ConfigErrors, ModeAndMaxDelayBelongToShaping) {
    const auto p = problems_of(base + R"(rate-limit:
  fallback: { algorithm: TOKEN_BUCKET, capacity: 5, refillRate: 1, mode: police }
  rules:
    - name: r
      match: { path: /r }
      limits:
        - { capacity: 5, flowRate: 1, mode: police, max-delay: 1s }
        - { capacity: 5, flowRate: 1, mode: smooth }
)");
    EXPECT_TRUE(has_problem(p, 4, "rate-limit.fallback.mode", "applies only to LEAKY_BUCKET"));
    EXPECT_TRUE(has_problem(p, 9, "rate-limit.rules[0].limits[0].max-delay", "mode: shape"));
    EXPECT_TRUE(has_problem(p, 10, "rate-limit.rules[0].limits[1].mode", "got 'smooth'"));
}

TEST(ConfigErrors, MaxWaitingBelongsToAShapingConcurrencyLimit) {
    const auto p = problems_of(base + R"(rate-limit:
  rules:
    - name: r
      match: { path: /r }
      limits:
        - { capacity: 5, flowRate: 1, max-waiting: 3 }
        - { algorithm: CONCURRENCY, limit: 2, mode: police, max-waiting: 3 }
        - { algorithm: CONCURRENCY, limit: 2, max-waiting: 0 }
        - { algorithm: CONCURRENCY, limit: 2, max-waiting: many }
)");
    EXPECT_TRUE(has_problem(
        p, 8, "rate-limit.rules[0].limits[0].max-waiting", "applies only to CONCURRENCY"));
    EXPECT_TRUE(has_problem(p, 9, "rate-limit.rules[0].limits[1].max-waiting", "mode: shape"));
    EXPECT_TRUE(has_problem(p, 10, "rate-limit.rules[0].limits[2].max-waiting", "got '0'"));
    EXPECT_TRUE(has_problem(p, 11, "rate-limit.rules[0].limits[3].max-waiting", "many"));
    EXPECT_EQ(p.size(), 4u);
    const auto cfg = load(base + R"(rate-limit:
  fallback: { algorithm: CONCURRENCY, limit: 2, max-waiting: 3 }
)");
    ASSERT_TRUE(cfg.rate_limit.fallback.max_waiting.has_value());
    EXPECT_EQ(*cfg.rate_limit.fallback.max_waiting, 3);
}

TEST(ConfigErrors, FailureModeValues) {
    for (const auto& [text, mode] : {std::pair{"open", failure_mode::open},
                                     std::pair{"closed", failure_mode::closed},
                                     std::pair{"local", failure_mode::local}}) {
        const auto cfg =
            load(base + "rate-limit:\n  redis:\n    failure-mode: " + std::string(text) + "\n");
        EXPECT_EQ(cfg.rate_limit.redis.on_failure, mode) << text;
    }
    const auto p = problems_of(base + "rate-limit:\n  redis:\n    failure-mode: Closed\n");
    EXPECT_TRUE(
        has_problem(p,
                    5,
                    "rate-limit.redis.failure-mode",
                    "must be one of open, closed, local, got 'Closed'; did you mean 'closed'?"));
}

TEST(ConfigErrors, DuplicateRuleNames) {
    const auto p = problems_of(base + R"(rate-limit:
  rules:
    - name: api
      match: { path: /a }
      limits: []
    - name: api
      match: { path: /b }
      limits: []
)");
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(has_problem(
        p, 8, "rate-limit.rules[1].name", "duplicate rule name 'api' (first at line 5)"));
}

// A rule's name scopes its limits' keys (`rate-limit:<name>#<n>:...`): a rule named `fallback`
// would share the fallback's keys (and its metrics' label), and a '#' would let two names make
// one scope ("a#0" rule 0 and "a" rule 0's "a#0:").
TEST(ConfigErrors, RuleNamesThatWouldShareKeysAreRefused) {
    const auto p = problems_of(base + R"(rate-limit:
  rules:
    - name: fallback
      match: { path: /a }
      limits: []
    - name: "api#1"
      match: { path: /b }
      limits: []
    - name: )" + std::string(129, 'n') +
                               R"(
      match: { path: /c }
      limits: []
    - name: )" + std::string(128, 'n') +
                               R"(
      match: { path: /d }
      limits: []
    - name: "{api}"
      match: { path: /e }
      limits: []
    - name: "a{b"
      match: { path: /f }
      limits: []
    - name: "a}b"
      match: { path: /g }
      limits: []
)");
    ASSERT_EQ(p.size(), 6u);
    EXPECT_TRUE(has_problem(p, 5, "rate-limit.rules[0].name", "the fallback limit's own name"));
    EXPECT_TRUE(has_problem(p, 8, "rate-limit.rules[1].name", "must not contain '#'"));
    EXPECT_TRUE(has_problem(p, 11, "rate-limit.rules[2].name", "129 bytes long; at most 128"));
    // "{api}" would be the hash tag of every key of the rule; a lone '{' would take its tag up to
    // the '}' that ends `hash-tag: ip`'s. A lone '}' is refused too: one rule for both braces.
    for (const auto& [line, index] : {std::pair{17, 4}, {20, 5}, {23, 6}}) {
        EXPECT_TRUE(has_problem(p,
                                line,
                                "rate-limit.rules[" + std::to_string(index) + "].name",
                                "must not contain '{' or '}'"));
    }
}

// yaml-cpp gives an empty item (a bare '-') the mark of the token after it: the next item's line,
// or the end of the file. Each is reported at its own '-'.
TEST(ConfigErrors, AnEmptyListItemIsReportedAtItsOwnLine) {
    const auto rules = problems_of(base + R"(rate-limit:
  rules:
    - name: a
      match: { path: /a }
      limits: []
    -
    - name: b
      match: { path: /b, methods: [GET] }
      limits:
        - { capacity: 5, flowRate: 1 }
        -
)");
    ASSERT_EQ(rules.size(), 2u);
    EXPECT_TRUE(has_problem(rules, 8, "rate-limit.rules[1]", "got nothing"));
    EXPECT_TRUE(has_problem(rules, 13, "rate-limit.rules[2].limits[1]", "got nothing"));

    const auto proxies = problems_of(base + R"(server:
  trusted-proxies:
    - 10.0.0.0/8
    -   # none here
    - 192.168.0.0/16
)");
    ASSERT_EQ(proxies.size(), 1u);
    EXPECT_TRUE(has_problem(proxies, 6, "server.trusted-proxies[1]", "got nothing"));

    // The other lists: Redis nodes, methods, key parts; each empty item is the last of its list.
    const auto others = problems_of(base + R"(rate-limit:
  redis:
    cluster:
      - 10.0.0.5:6379
      -

  rules:
    - name: a
      match:
        path: /a
        methods:
          - GET
          -
      limits:
        - capacity: 5
          flowRate: 1
          key:
            - ip
            -
)");
    ASSERT_EQ(others.size(), 3u);
    EXPECT_TRUE(has_problem(others, 7, "rate-limit.redis.cluster[1]", "got nothing"));
    EXPECT_TRUE(has_problem(others, 15, "rate-limit.rules[0].match.methods[1]", "got nothing"));
    EXPECT_TRUE(has_problem(others, 21, "rate-limit.rules[0].limits[0].key[1]", "got nothing"));
}

TEST(ConfigErrors, DuplicateKeysInOneMapping) {
    const auto p = problems_of(base + "rate-limit:\n  fallback:\n    capacity: 5\n    flowRate: 1\n"
                                      "    capacity: 500\n");
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(has_problem(p, 7, "rate-limit.fallback.capacity", "appears twice"));
}

TEST(ConfigErrors, RuleShapeProblems) {
    const auto p = problems_of(base + R"(rate-limit:
  rules:
    - name: a
      match: { path: v1/x, methods: [post] }
      limit: []
    - match: { path: /b, methods: [GET] }
      limits:
        - { capacity: 1, flowRate: 1, key: [ip, global] }
        - { capacity: 1, flowRate: 1, key: [ip, "header:", endpiont] }
        - 7
)");
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.rules[0].match.path", "must start with '/'"));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.rules[0].match.methods[0]", "did you mean 'POST'?"));
    EXPECT_TRUE(has_problem(p, 7, "rate-limit.rules[0].limit", "did you mean 'limits'?"));
    EXPECT_TRUE(has_problem(p, 5, "rate-limit.rules[0].limits", "is required"));
    EXPECT_TRUE(has_problem(p, 8, "rate-limit.rules[1].name", "is required"));
    EXPECT_TRUE(
        has_problem(p, 10, "rate-limit.rules[1].limits[0].key", "'global' must be the only part"));
    EXPECT_TRUE(
        has_problem(p, 11, "rate-limit.rules[1].limits[1].key[1]", "must name an HTTP header"));
    EXPECT_TRUE(
        has_problem(p, 11, "rate-limit.rules[1].limits[1].key[2]", "did you mean 'endpoint'?"));
    EXPECT_TRUE(has_problem(p, 12, "rate-limit.rules[1].limits[2]", "must be a mapping"));
}

TEST(ConfigErrors, OutOfRangeValues) {
    const auto p = problems_of(base + R"(rate-limit:
  ipv6-prefix: 0
  max-held: 0
  redis: { port: 65536, db: -1, host: "" }
)");
    EXPECT_TRUE(has_problem(p, 4, "rate-limit.ipv6-prefix", "between 1 and 128, got '0'"));
    EXPECT_TRUE(has_problem(p, 5, "rate-limit.max-held", "got '0'"));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.redis.port", "between 1 and 65535, got '65536'"));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.redis.db", "got '-1'"));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.redis.host", "must be a non-empty string"));
}

TEST(ConfigErrors, BodyTimeoutAndMaxConnectionsMustBePositive) {
    const auto p = problems_of(R"(upstream:
  url: http://127.0.0.1:9000
  max-connections: 0
server:
  body-timeout: 0
)");
    EXPECT_TRUE(has_problem(p, 3, "upstream.max-connections", "got '0'"));
    EXPECT_TRUE(has_problem(p, 5, "server.body-timeout", "got '0'"));
}

// A resolve interval of 0 would look the upstream's name up on every connect.
TEST(ConfigErrors, ResolveIntervalMustBeAPositiveDuration) {
    const auto p = problems_of(R"(upstream:
  url: http://backend:9000
  resolve-interval: 0
)");
    EXPECT_TRUE(has_problem(p, 3, "upstream.resolve-interval", "duration > 0"));
    EXPECT_TRUE(has_problem(p, 3, "upstream.resolve-interval", "got '0'"));
    const auto q = problems_of(R"(upstream:
  url: http://backend:9000
  resolve-interval: soon
)");
    EXPECT_TRUE(has_problem(q, 3, "upstream.resolve-interval", "got 'soon'"));
}

TEST(ConfigErrors, SecondDocumentIsRejected) {
    const auto p = problems_of(base + "---\nupstream:\n  url: http://127.0.0.1:9001\n");
    ASSERT_EQ(p.size(), 1u);
    EXPECT_NE(p[0].find("only one YAML document"), std::string::npos) << p[0];
}

TEST(ConfigErrors, PatternThatNormalizationChangesNeverMatches) {
    const auto p = problems_of(base + R"(rate-limit:
  rules:
    - name: a
      match: { path: "/v1//x/../y" }
      limits: []
)");
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.rules[0].match.path", "write '/v1/y'"));
}

TEST(ConfigErrors, BlankLimitsIsNotAnExemption) {
    const auto p = problems_of(base + R"(rate-limit:
  rules:
    - name: a
      match: { path: /a }
      limits:
)");
    EXPECT_TRUE(has_problem(p, 7, "rate-limit.rules[0].limits", "got nothing"));
}

TEST(ConfigErrors, EmptyValueIsNotADefault) {
    const auto p = problems_of(base + "rate-limit:\n  redis:\n    ttl:\n");
    EXPECT_TRUE(has_problem(p, 5, "rate-limit.redis.ttl", "got nothing"));
}

// Issue 11 item 16: a rate so small that a full bucket takes longer than the stores can count
// would silently stop limiting; the message names the smallest rate accepted.
TEST(ConfigErrors, RateTooSmallForItsCapacity) {
    const auto p = problems_of(base + R"(rate-limit:
  fallback:
    capacity: 50
    flowRate: 0.0000000000000001
  rules:
    - name: r
      match: { path: /a }
      limits:
        - { algorithm: TOKEN_BUCKET, capacity: 1000, refillRate: 0.0000001 }
)");
    ASSERT_EQ(p.size(), 2u);
    EXPECT_TRUE(has_problem(
        p, 6, "rate-limit.fallback.flowRate", "must be at least 0.0000000157 with capacity 50"));
    EXPECT_TRUE(has_problem(p,
                            11,
                            "rate-limit.rules[0].limits[0].refillRate",
                            "must be at least 0.000000313 with capacity 1000"));
    // The smallest accepted value loads.
    const auto cfg = load(base + "rate-limit:\n  fallback:\n    capacity: 50\n"
                                 "    flowRate: 0.0000000157\n");
    EXPECT_EQ(cfg.rate_limit.fallback.flow_rate, 0.0000000157);
}

// Issue 11 item 17: empty or truncated values. A null or empty value is an error wherever the
// reference does not give it a meaning; each names its key and its line.

/// A rule at line 4 whose `match` (line 6) is `match_text`, exempt from limiting.
std::string rule_matching(const std::string& match_text) {
    return base + "rate-limit:\n  rules:\n    - name: a\n      match: " + match_text +
           "\n      limits: []\n";
}

TEST(ConfigErrors, MethodsWithNothingIsNotAnyMethod) {
    const auto p = problems_of(rule_matching("\n        path: /admin/*\n        methods:"));
    EXPECT_TRUE(has_problem(p, 8, "rate-limit.rules[0].match.methods", "got nothing"));
}

TEST(ConfigErrors, EmptyMethodsListIsNotAnyMethod) {
    const auto p = problems_of(rule_matching("{ path: /admin/*, methods: [] }"));
    EXPECT_TRUE(
        has_problem(p, 6, "rate-limit.rules[0].match.methods", "must not be empty; leave it out"));
}

TEST(ConfigErrors, TruncatedMethodsOnAnExemptionExemptsNothing) {
    const auto p = problems_of(rule_matching("{path: /admin/*, methods: }"));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.rules[0].match.methods", "got nothing"));
}

TEST(ConfigErrors, NumbersAreNotMethods) {
    const auto p = problems_of(rule_matching("{ path: /a, methods: [1, 2] }"));
    EXPECT_TRUE(has_problem(p,
                            6,
                            "rate-limit.rules[0].match.methods[0]",
                            "must be an HTTP method such as GET, got '1'"));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.rules[0].match.methods[1]", "got '2'"));
}

TEST(ConfigErrors, KeyWithNothingIsAnError) {
    const auto p = problems_of(
        base + "rate-limit:\n  fallback:\n    capacity: 5\n    flowRate: 1\n    key:\n");
    EXPECT_TRUE(has_problem(p, 7, "rate-limit.fallback.key", "got nothing"));
}

TEST(ConfigErrors, AKeyHasAtMostEightParts) {
    // Nine header parts; eight are fine.
    std::string nine = "[ip";
    for (int i = 1; i < 9; ++i) {
        nine += ", \"header:x-" + std::to_string(i) + "\"";
    }
    const auto p =
        problems_of(base + "rate-limit:\n  fallback:\n    capacity: 5\n    flowRate: 1\n" +
                    "    key: " + nine + "]\n");
    EXPECT_TRUE(has_problem(p, 7, "rate-limit.fallback.key", "has 9 parts; at most 8"));
    const auto eight = nine.substr(0, nine.rfind(','));
    const auto loaded = load(base + "rate-limit:\n  fallback:\n    capacity: 5\n    flowRate: 1\n" +
                             "    key: " + eight + "]\n");
    EXPECT_EQ(loaded.rate_limit.fallback.key.size(), 8u);
}

TEST(ConfigErrors, TrustedProxiesWithNothingIsAnError) {
    const auto p = problems_of(base + "server:\n  trusted-proxies:\n");
    EXPECT_TRUE(has_problem(p, 4, "server.trusted-proxies", "must be a list, got nothing"));
}

TEST(ConfigErrors, RulesWithNothingIsAnError) {
    const auto p = problems_of(base + "rate-limit:\n  rules:\n");
    EXPECT_TRUE(has_problem(p, 4, "rate-limit.rules", "must be a list, got nothing"));
}

TEST(ConfigErrors, NullSectionIsAnError) {
    const auto p = problems_of(base + "admin: null\nlogging: ~\nserver:\n");
    EXPECT_TRUE(has_problem(p, 3, "admin", "must be a mapping, got nothing"));
    EXPECT_TRUE(has_problem(p, 4, "logging", "must be a mapping, got nothing"));
    EXPECT_TRUE(has_problem(p, 5, "server", "must be a mapping, got nothing"));
}

TEST(ConfigErrors, SectionNameWithoutColonAtTheEndIsNotDropped) {
    for (const std::string end : {"", "\n"}) {
        const auto p = problems_of(base + "logging" + end);
        EXPECT_TRUE(has_problem(p, 3, "logging", "must be a mapping, got nothing")) << end.size();
    }
}

TEST(ConfigErrors, UnterminatedQuoteAtTheEndIsAnError) {
    for (const std::string end : {"\n", "\n\n", "\nlogging:\n  level: info\n"}) {
        const auto p = problems_of(base + "rate-limit:\n  redis:\n    password: \"abc" + end);
        EXPECT_TRUE(has_problem(p, 5, "rate-limit.redis.password", "no closing quote"))
            << end.size();
    }
    const auto single = problems_of(base + "admin:\n  listen: '127.0.0.1:1\n");
    EXPECT_TRUE(has_problem(single, 4, "admin.listen", "no closing quote"));
    // A quoted value may span lines, and may hold escaped quotes.
    const auto cfg = load(base + "rate-limit:\n  redis:\n    password: \"a\\\"b\n      c\"\n"
                                 "    username: 'it''s'\n");
    EXPECT_EQ(cfg.rate_limit.redis.password, "a\"b c");
    EXPECT_EQ(cfg.rate_limit.redis.username, "it's");
    // Quoted items of a flow list, the last one at the end of the file.
    const auto flow = load(base + "server:\n  trusted-proxies: [\"127.0.0.1/32\", '10.0.0.0/8']");
    EXPECT_EQ(flow.server.trusted_proxies.size(), 2u);
}

TEST(ConfigErrors, QuotedStringIsNotANumber) {
    const auto p = problems_of(base + "rate-limit:\n  max-held: '10'\n  fallback:\n"
                                      "    capacity: \"5\"\n    flowRate: \"1\"\n"
                                      "logging:\n  access-log: \"false\"\n");
    EXPECT_TRUE(has_problem(p, 4, "rate-limit.max-held", "got a quoted string '10'"));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.fallback.capacity", "got a quoted string '5'"));
    EXPECT_TRUE(has_problem(p, 7, "rate-limit.fallback.flowRate", "got a quoted string '1'"));
    EXPECT_TRUE(has_problem(p, 9, "logging.access-log", "got a quoted string 'false'"));
}

TEST(ConfigErrors, UpstreamUrlWithoutAHostName) {
    for (const std::string bad : {"http://-1", "HTTP://", "http://a-.b", "http://x.-y:80"}) {
        const auto p = problems_of("upstream:\n  url: \"" + bad + "\"\n");
        EXPECT_TRUE(has_problem(p, 2, "upstream.url", "must be http://host[:port], got '" + bad))
            << bad;
    }
    EXPECT_EQ(load("upstream:\n  url: HTTP://a-b.example\n").upstream.host, "a-b.example");
}

TEST(ConfigErrors, RuleNameWithNulOrInvalidUtf8) {
    const auto nul = problems_of(rule_matching("{ path: /a }") + "    - name: \"b\\0c\"\n"
                                                                 "      match: { path: /b }\n"
                                                                 "      limits: []\n");
    EXPECT_TRUE(has_problem(nul, 8, "rate-limit.rules[1].name", "must not contain NUL"));
    const auto raw_nul =
        problems_of(base + "rate-limit:\n  rules:\n    - name: b" + std::string(1, '\0') +
                    "c\n      match: { path: /b }\n"
                    "      limits: []\n");
    EXPECT_FALSE(raw_nul.empty());
    for (const std::string bad : {"b\xff", "\xc3", "\xed\xa0\x80", "\xc0\xaf"}) {
        const auto p = problems_of(base + "rate-limit:\n  rules:\n    - name: " + bad +
                                   "\n      match: { path: /b }\n      limits: []\n");
        EXPECT_TRUE(has_problem(p, 5, "rate-limit.rules[0].name", "must be valid UTF-8"));
    }
    EXPECT_EQ(load(rule_matching("{ path: /a }")).rate_limit.rules[0].name, "a");
    const auto utf8 = load(base + "rate-limit:\n  rules:\n    - name: caf\xc3\xa9\n"
                                  "      match: { path: /b }\n      limits: []\n");
    EXPECT_EQ(utf8.rate_limit.rules[0].name, "caf\xc3\xa9");
}

// Issue 11 item 21: the memory store's cap.
TEST(ConfigErrors, MemoryMaxKeys) {
    EXPECT_EQ(load(base).rate_limit.memory.max_keys, 375'000u);
    EXPECT_EQ(load(base + "rate-limit:\n  memory:\n    max-keys: 10\n").rate_limit.memory.max_keys,
              10u);
    const auto p = problems_of(base + "rate-limit:\n  memory:\n    max-keys: 0\n  redis:\n");
    EXPECT_TRUE(
        has_problem(p, 5, "rate-limit.memory.max-keys", "must be an integer >= 1, got '0'"));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.redis", "must be a mapping, got nothing"));
}

} // namespace
} // namespace sluice::config::test
