// SPDX-License-Identifier: Apache-2.0
// What sluice says of a configuration (src/app/config_report.cpp): the start-up summary names
// where things are and never a credential; a reload is refused or warned about by key.
#include "app/config_report.hpp"
#include "sluice/config/loader.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

namespace sluice::app {
namespace {

config::config redis_config() {
    config::config cfg;
    cfg.rate_limit.store = config::store_kind::redis;
    cfg.rate_limit.redis.host = "10.0.0.5";
    cfg.rate_limit.redis.port = 6380;
    cfg.rate_limit.redis.username = "sluice-user";
    cfg.rate_limit.redis.password = "hunter2-secret";
    return cfg;
}

TEST(ConfigReport, TheSummaryNamesTheRedisAddressAndNoCredential) {
    auto cfg = redis_config();
    config::rule rule;
    rule.name = "api";
    rule.path = "/api/*";
    config::limit window;
    window.algo = config::algorithm::fixed_window;
    window.limit_count = 100;
    window.window = std::chrono::milliseconds{60'000};
    window.dry_run = true;
    rule.limits.push_back(window);
    cfg.rate_limit.rules.push_back(rule);

    const auto lines = summary_lines(cfg, "0.0.0.0:8080", 2);

    ASSERT_EQ(lines.size(), 2u);
    EXPECT_NE(lines[0].find("listen 0.0.0.0:8080"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("store redis 10.0.0.5:6380"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("2 workers"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("fallback LEAKY_BUCKET capacity=50 flowRate=5/s shape"),
              std::string::npos)
        << lines[0];
    EXPECT_EQ(lines[1], "rule 'api' /api/*: FIXED_WINDOW limit=100 window=60000ms dry-run");
    for (const auto& line : lines) {
        EXPECT_EQ(line.find("hunter2"), std::string::npos) << line;
        EXPECT_EQ(line.find("sluice-user"), std::string::npos) << line;
    }
}

TEST(ConfigReport, TheStoreIsDescribedByItsTopology) {
    config::redis_settings redis;
    redis.host = "/run/redis.sock";
    EXPECT_EQ(describe_redis(redis), "redis /run/redis.sock");
    redis.topology = config::redis_topology::cluster;
    redis.cluster = {{"10.0.0.1", 7000}, {"10.0.0.2", 7000}, {"10.0.0.3", 7000}};
    EXPECT_EQ(describe_redis(redis), "redis cluster 10.0.0.1:7000 (+2 seeds)");
    redis.topology = config::redis_topology::sentinel;
    redis.sentinel.master = "mymaster";
    redis.sentinel.nodes = {{"10.0.0.9", 26379}};
    EXPECT_EQ(describe_redis(redis), "redis sentinel 'mymaster' via 10.0.0.9:26379");
    const auto memory = summary_lines(config::config{}, "127.0.0.1:8080", 1);
    EXPECT_NE(memory.at(0).find("store memory,"), std::string::npos) << memory.at(0);
}

TEST(ConfigReport, EveryAlgorithmIsDescribedWithItsParameters) {
    config::limit l;
    l.mode = config::shaping_mode::police;
    EXPECT_EQ(describe_limit(l), "LEAKY_BUCKET capacity=50 flowRate=5/s police");
    l.algo = config::algorithm::token_bucket;
    l.refill_rate = 2.5;
    EXPECT_EQ(describe_limit(l), "TOKEN_BUCKET capacity=50 refill=2.5/s");
    l.algo = config::algorithm::sliding_window;
    l.limit_count = 7;
    l.window = std::chrono::milliseconds{1'000};
    EXPECT_EQ(describe_limit(l), "SLIDING_WINDOW limit=7 window=1000ms");
    l.algo = config::algorithm::concurrency;
    l.mode = config::shaping_mode::shape;
    EXPECT_EQ(describe_limit(l), "CONCURRENCY limit=7 shape lease=30000ms");
    l.max_waiting = 20;
    EXPECT_EQ(describe_limit(l), "CONCURRENCY limit=7 shape max-waiting=20 lease=30000ms");
}

TEST(ConfigReport, AReloadNamesTheRedisKeysThatNeedARestart) {
    const auto running = redis_config();
    auto next = running;
    next.rate_limit.redis.ttl = running.rate_limit.redis.ttl * 2; // applied on reload
    EXPECT_EQ(redis_restart_keys(running, next), "");
    next.rate_limit.redis.port = 6381;
    next.rate_limit.redis.password = "rotated";
    EXPECT_EQ(redis_restart_keys(running, next),
              "rate-limit.redis.port, rate-limit.redis.password");
    // A secret rotated in its file: the file's key is what the operator changed.
    next.rate_limit.redis.password_file = "/run/secrets/redis";
    EXPECT_EQ(redis_restart_keys(running, next),
              "rate-limit.redis.port, rate-limit.redis.password-file");
    // The memory store made no connection with them.
    auto memory = running;
    memory.rate_limit.store = config::store_kind::memory;
    EXPECT_EQ(redis_restart_keys(memory, next), "");
}

// Running on Redis, the operator sets `store: memory` and drops the redis section: the reload
// named rate-limit.redis.host (and the others), keys the operator did not mean to change.
TEST(ConfigReport, AReloadThatLeavesRedisNamesTheStore) {
    const auto running = redis_config();
    config::config next; // store: memory, no redis section: its defaults
    EXPECT_EQ(redis_restart_keys(running, next), "rate-limit.store");
    // Leaving Redis with its settings kept: nothing refused (the store stays, with a warning).
    next.rate_limit.redis = running.rate_limit.redis;
    EXPECT_EQ(redis_restart_keys(running, next), "");
    // Staying on Redis, the keys are named as before.
    next.rate_limit.store = config::store_kind::redis;
    next.rate_limit.redis.port = 6381;
    EXPECT_EQ(redis_restart_keys(running, next), "rate-limit.redis.port");
}

TEST(ConfigReport, AReloadKeepsTheRunningListenWorkersStoreAndAdmin) {
    const config::config running;
    auto next = running;
    next.rate_limit.max_held = running.rate_limit.max_held + 1; // applied on reload
    EXPECT_EQ(keep_restart_only_keys(running, next), "");
    EXPECT_EQ(next.rate_limit.max_held, running.rate_limit.max_held + 1);

    next.server.listen.port = static_cast<std::uint16_t>(running.server.listen.port + 1);
    next.server.workers = running.server.workers + 1;
    next.rate_limit.store = config::store_kind::redis;
    next.rate_limit.memory.max_keys = running.rate_limit.memory.max_keys + 1;
    next.admin.enabled = !running.admin.enabled;
    next.admin.listen.host = "0.0.0.0";
    EXPECT_EQ(keep_restart_only_keys(running, next),
              "server.listen, server.workers, rate-limit.store, rate-limit.memory.max-keys, "
              "admin.enabled, admin.listen");
    EXPECT_EQ(next.server.listen, running.server.listen);
    EXPECT_EQ(next.server.workers, running.server.workers);
    EXPECT_EQ(next.rate_limit.store, running.rate_limit.store);
    EXPECT_EQ(next.rate_limit.memory.max_keys, running.rate_limit.memory.max_keys);
    EXPECT_EQ(next.admin.enabled, running.admin.enabled);
    EXPECT_EQ(next.admin.listen, running.admin.listen);
    EXPECT_EQ(next.rate_limit.max_held, running.rate_limit.max_held + 1) << "the rest stays";
    EXPECT_EQ(keep_restart_only_keys(running, next), "") << "nothing left to put back";
}

// A reload that changes a restart-only key names where the new file sets it, as every problem
// of a load names its line; a key the file stopped setting is said to be missing from it.
TEST(ConfigReport, AReloadNamesTheLineOfEachKeyItRefusesOrKeeps) {
    const auto on_redis = [](int port, const char* listen) {
        return fmt::format("server:\n"
                           "  listen: \"{}\"\n"
                           "upstream: {{ url: http://127.0.0.1:9000 }}\n"
                           "rate-limit:\n"
                           "  store: redis\n"
                           "  redis:\n"
                           "    host: 127.0.0.1\n"
                           "    port: {}\n",
                           listen,
                           port);
    };
    const auto running = config::load_string(on_redis(6379, "0.0.0.0:8080"), "s.yaml");
    auto next = config::load_string(on_redis(6380, "0.0.0.0:8081"), "s.yaml");
    EXPECT_EQ(redis_restart_keys(running, next), "rate-limit.redis.port (s.yaml:8)");
    EXPECT_EQ(keep_restart_only_keys(running, next), "server.listen (s.yaml:2)");

    // The file no longer names a store (memory, by default) nor its redis section.
    const auto on_memory =
        config::load_string("upstream: { url: http://127.0.0.1:9000 }\n", "s.yaml");
    EXPECT_EQ(redis_restart_keys(next, on_memory), "rate-limit.store (not in s.yaml)");
    EXPECT_EQ(config::located_key(running, "rate-limit.redis.host"),
              "rate-limit.redis.host (s.yaml:7)");
    EXPECT_EQ(config::located_key(config::config{}, "server.listen"), "server.listen")
        << "built in code: no file to point at";
}

} // namespace
} // namespace sluice::app
