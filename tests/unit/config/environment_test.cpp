// SPDX-License-Identifier: Apache-2.0
// Environment variable references in values: ${NAME}, ${NAME:-default}, $$, and their errors.
// The environment is a map handed to the loader: no test touches the process environment.
#include "config/environment_detail.hpp"
#include "config_test_util.hpp"

#include <gtest/gtest.h>

#include <map>

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
