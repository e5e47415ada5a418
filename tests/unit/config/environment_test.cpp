// SPDX-License-Identifier: Apache-2.0
// Environment variable references in values: ${NAME}, ${NAME:-default}, $$, and their errors.
// The environment is a map handed to the loader: no test touches the process environment.
#include "config/environment_detail.hpp"
#include "config_test_util.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <vector>

namespace sluice::config::test {
namespace {

using namespace std::chrono_literals;

environment fake(std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
        const auto it = vars.find(name);
        return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
}

TEST(ConfigEnvironment, SubstitutesText) {
    const auto env = fake({{"A", "x"}, {"EMPTY", ""}, {"B_2", "y z"}});
    const auto expand = [&](std::string_view text) {
        auto r = detail::substitute_environment(text, env);
        return r.value ? *r.value : "error: " + r.error;
    };
    EXPECT_EQ(expand("${A}"), "x");
    EXPECT_EQ(expand("a${A}b${B_2}c"), "axby zc");
    EXPECT_EQ(expand("${UNSET:-d}"), "d");
    EXPECT_EQ(expand("${EMPTY:-d}"), "d"); // as in sh: empty counts as unset for ':-'
    EXPECT_EQ(expand("${EMPTY}"), "");
    EXPECT_EQ(expand("${A:-d}"), "x");
    EXPECT_EQ(expand("${UNSET:-}"), "");
    EXPECT_EQ(expand("${UNSET:-a:b # c}"), "a:b # c");
    EXPECT_EQ(expand("$${A}"), "${A}");
    EXPECT_EQ(expand("$$$$"), "$$");
    EXPECT_EQ(expand("a$b$"), "a$b$"); // a '$' before anything else stays
    EXPECT_EQ(expand("no references"), "no references");
}

TEST(ConfigEnvironment, ValueIsNotRescanned) {
    // A value holding "${B}" is the value, not another reference.
    const auto r = detail::substitute_environment("${A}", fake({{"A", "${B}$$"}}));
    ASSERT_TRUE(r.value) << r.error;
    EXPECT_EQ(*r.value, "${B}$$");
}

TEST(ConfigEnvironment, MalformedReferencesAreErrors) {
    const auto env = fake({});
    for (const std::string bad : {"${", "${A", "x${}", "${1X}", "${A-B}", "${A B}", "${:-x}"}) {
        const auto r = detail::substitute_environment(bad, env);
        EXPECT_FALSE(r.value) << bad;
        EXPECT_NE(r.error.find("malformed environment variable reference"), std::string::npos)
            << bad << ": " << r.error;
    }
    const auto unset = detail::substitute_environment("${NOPE}", env);
    ASSERT_FALSE(unset.value);
    EXPECT_NE(unset.error.find("environment variable 'NOPE' is not set"), std::string::npos);
}

TEST(ConfigEnvironment, LongResultIsAnError) {
    const std::string big(detail::max_substituted_bytes / 2 + 1, 'x');
    const auto env = fake({{"BIG", big}});
    EXPECT_TRUE(detail::substitute_environment("${BIG}", env).value);
    const auto r = detail::substitute_environment("${BIG}${BIG}", env);
    ASSERT_FALSE(r.value);
    EXPECT_NE(r.error.find("is longer than 65536 bytes"), std::string::npos) << r.error;
}

TEST(ConfigEnvironment, ValuesOfEveryTypeAreSubstitutedBeforeReading) {
    const auto env = fake({{"UPSTREAM", "http://10.0.0.1:9000"},
                           {"PORT", "6380"},
                           {"PW", "p#ss: word"},
                           {"TIMEOUT", "2m30s"},
                           {"RATE", "600r/m"},
                           {"HEADERS", "yes"},
                           {"PROXY", "10.0.0.0/8"}});
    const auto cfg = load(R"(server:
  trusted-proxies: ["${PROXY}"]
  idle-timeout: ${TIMEOUT}
upstream:
  url: ${UPSTREAM}
rate-limit:
  x-ratelimit-headers: "${HEADERS}"
  fallback: { algorithm: LEAKY_BUCKET, capacity: "${CAP:-7}", flowRate: "${RATE}" }
  redis:
    port: ${PORT}
    password: ${PW}
    host: ${HOST:-redis.internal}
)",
                          env);
    EXPECT_EQ(cfg.upstream.host, "10.0.0.1");
    EXPECT_EQ(cfg.server.idle_timeout, 150s);
    ASSERT_EQ(cfg.server.trusted_proxies.size(), 1u);
    EXPECT_EQ(cfg.server.trusted_proxies[0].to_string(), "10.0.0.0/8");
    EXPECT_TRUE(cfg.rate_limit.x_ratelimit_headers);
    EXPECT_EQ(cfg.rate_limit.fallback.capacity, 7);
    EXPECT_EQ(cfg.rate_limit.fallback.flow_rate, 10.0);
    EXPECT_EQ(cfg.rate_limit.redis.port, 6380);
    EXPECT_EQ(cfg.rate_limit.redis.password, "p#ss: word");
    EXPECT_EQ(cfg.rate_limit.redis.host, "redis.internal");
}

TEST(ConfigEnvironment, DollarDollarIsALiteralDollar) {
    const auto cfg = load(base + "rate-limit:\n  redis:\n    password: a$$b$c\n", fake({}));
    EXPECT_EQ(cfg.rate_limit.redis.password, "a$b$c");
}

TEST(ConfigEnvironment, AnAliasedValueIsSubstitutedOnce) {
    const auto cfg = load(base + "rate-limit:\n  redis:\n    password: &h \"$${X}\"\n"
                                 "    username: *h\n",
                          fake({{"X", "wrong"}}));
    EXPECT_EQ(cfg.rate_limit.redis.password, "${X}");
    EXPECT_EQ(cfg.rate_limit.redis.username, "${X}");
}

// A substituted value that does not fit its key is not quoted back: a secret put in the wrong
// key (a password where the port belongs) would be logged with the refusal.
TEST(ConfigEnvironment, AValueFromTheEnvironmentIsNeverQuotedInAMessage) {
    const auto p = problems_of(base + "rate-limit:\n  redis:\n    port: ${REDIS_PASSWORD}\n",
                               fake({{"REDIS_PASSWORD", "hunter2"}}));
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(has_problem(
        p, 5, "rate-limit.redis.port", "got the value of an environment variable (not shown)"));
    EXPECT_EQ(p.front().find("hunter2"), std::string::npos) << p.front();
}

// Every message about a value that does not parse, not only the "got ..." of a wrong type: a
// password put where a URL, an address, a path or a key part belongs is refused with its key and
// line, and no part of it (not the host, not the path, not a suggestion made from it) is shown.
TEST(ConfigEnvironment, NoMessageQuotesAnyPartOfAValueFromTheEnvironment) {
    struct example {
        std::string yaml;
        std::string secret; // the value of ${S}
        int line;
        std::string key;
    };

    const std::string redis = base + "rate-limit:\n  redis:\n";
    const std::string rule = base + "rate-limit:\n  rules:\n    - name: r\n      match: ";
    const std::string fallback = base + "rate-limit:\n  fallback: { capacity: 5, flowRate: 1, ";
    const std::vector<example> examples{
        {"upstream:\n  url: ${S}\n", "http://user:hunter2@x", 2, "upstream.url"},
        {"upstream:\n  url: ${S}\n", "http://hunter2_x:80", 2, "upstream.url"},
        {"upstream:\n  url: ${S}\n", "http://x/hunter2", 2, "upstream.url"},
        {base + "server:\n  listen: ${S}\n", "hunter2_x:8080", 4, "server.listen"},
        {base + "server:\n  listen: ${S}\n", "[hunter2]:8080", 4, "server.listen"},
        {redis + "    host: ${S}\n", "redis://:hunter2@db", 5, "rate-limit.redis.host"},
        {redis + "    host: ${S}\n", "hunter2:6380", 5, "rate-limit.redis.host"},
        {redis + "    cluster:\n      - 10.0.0.5\n      - ${S}\n",
         "hunter2_:7000",
         7,
         "rate-limit.redis.cluster[1]"},
        {redis + "    cluster:\n      - hunter2\n      - ${S}\n",
         "hunter2",
         7,
         "rate-limit.redis.cluster[1]"},
        {redis + "    sentinel:\n      master: m\n      nodes: [\"${S}\"]\n",
         "redis://hunter2",
         7,
         "rate-limit.redis.sentinel.nodes[0]"},
        {redis + "    password-file: ${S}\n",
         "/no/such/hunter2",
         5,
         "rate-limit.redis.password-file"},
        {rule + "{ path: \"${S}\" }\n      limits: []\n",
         "hunter2",
         6,
         "rate-limit.rules[0].match.path"},
        {rule + "{ path: \"${S}\" }\n      limits: []\n",
         "/a hunter2",
         6,
         "rate-limit.rules[0].match.path"},
        {rule + "{ path: \"${S}\" }\n      limits: []\n",
         "/a//hunter2",
         6,
         "rate-limit.rules[0].match.path"},
        {rule + "{ path: /a, methods: [\"${S}\"] }\n      limits: []\n",
         "hunter2",
         6,
         "rate-limit.rules[0].match.methods[0]"},
        // The second rule takes the first's name, written in the file.
        {base + "rate-limit:\n  rules:\n    - name: r-hunter2\n      match: { path: /a }\n"
                "      limits: []\n    - name: ${S}\n      match: { path: /b }\n      limits: []\n",
         "r-hunter2",
         8,
         "rate-limit.rules[1].name"},
        {fallback + "key: [\"header:${S}\"] }\n", "hunter2 x", 4, "rate-limit.fallback.key[0]"},
        {fallback + "key: [\"json:${S}\"] }\n", "hunter2..x", 4, "rate-limit.fallback.key[0]"},
        {fallback + "cost: { request: \"header:${S}\" } }\n",
         "hunter2 x",
         4,
         "rate-limit.fallback.cost.request"},
        {fallback + "cost: { request: 1, response: \"header:${S}\" } }\n",
         "hunter2 x",
         4,
         "rate-limit.fallback.cost.response"},
        {fallback + "cost: { request: 1, response: \"json:${S}\" } }\n",
         "hunter2..x",
         4,
         "rate-limit.fallback.cost.response"},
    };
    for (const auto& e : examples) {
        const auto p = problems_of(e.yaml, fake({{"S", e.secret}}));
        EXPECT_TRUE(has_problem(p, e.line, e.key, "")) << e.secret;
        for (auto line : p) {
            // In any case: a method's suggestion would be the value in upper case.
            std::transform(line.begin(), line.end(), line.begin(), [](unsigned char c) {
                return static_cast<char>(std::tolower(c));
            });
            EXPECT_EQ(line.find("hunter2"), std::string::npos) << e.secret << ": " << line;
        }
    }
}

TEST(ConfigEnvironment, KeysAreNotSubstituted) {
    const auto p = problems_of(base + "server:\n  ${K}: 1\n", fake({{"K", "workers"}}));
    EXPECT_TRUE(has_problem(p, 4, "server.${K}", "unknown key"));
}

TEST(ConfigEnvironment, UnsetVariableNamesItAndTheLineOnly) {
    const auto p = problems_of(base + "rate-limit:\n  redis:\n    port: ${REDIS_PORT}\n"
                                      "    password: x${REDIS_PW}\n",
                               fake({}));
    ASSERT_EQ(p.size(), 2u) << "one problem per value, no follow-up type error";
    EXPECT_TRUE(
        has_problem(p, 5, "rate-limit.redis.port", "environment variable 'REDIS_PORT' is not set"));
    EXPECT_TRUE(has_problem(
        p, 6, "rate-limit.redis.password", "environment variable 'REDIS_PW' is not set"));
}

TEST(ConfigEnvironment, MalformedReferenceNamesTheLine) {
    for (const std::string bad : {"${", "${}", "${1X}", "x${Y"}) {
        const auto p = problems_of(base + "upstream:\n  timeout: \"" + bad + "\"\n", fake({}));
        EXPECT_TRUE(has_problem(p, 4, "upstream.timeout", "malformed environment variable")) << bad;
    }
}

TEST(ConfigEnvironment, ResultIsCheckedAsText) {
    const auto p = problems_of(base + "rate-limit:\n  redis:\n    host: ${H}\n",
                               fake({{"H", std::string("\xff\xfe")}}));
    EXPECT_TRUE(has_problem(p, 5, "rate-limit.redis.host", "must be valid UTF-8"));
}

} // namespace
} // namespace sluice::config::test
