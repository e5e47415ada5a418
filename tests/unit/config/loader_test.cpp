// SPDX-License-Identifier: Apache-2.0
// Valid configurations: the shipped files, defaults, and every key read into its field.
#include "config_test_util.hpp"
#include "support/build_paths.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace sluice::config::test {
namespace {

using namespace std::chrono_literals;

const std::string config_dir = sluice::test::source_dir() + "/config/";

/// The settings every documented default must equal (the rules aside).
void expect_defaults(const config& cfg) {
    const server_settings server;
    EXPECT_EQ(cfg.server.listen.host, "127.0.0.1");
    EXPECT_EQ(cfg.server.listen.port, 8080);
    EXPECT_TRUE(cfg.server.trusted_proxies.empty());
    EXPECT_EQ(cfg.server.workers, 0u);
    EXPECT_EQ(cfg.server.max_header_bytes, 16u * 1024);
    EXPECT_EQ(cfg.server.max_uri_bytes, 8u * 1024);
    EXPECT_EQ(cfg.server.headers_with_underscores, underscore_headers::drop);
    EXPECT_EQ(cfg.server.max_chunk_header_bytes, 4u * 1024);
    EXPECT_EQ(cfg.server.max_trailer_bytes, 16u * 1024);
    EXPECT_EQ(cfg.server.max_body_bytes, 0u);
    EXPECT_EQ(cfg.server.request_buffer_bytes, 16u * 1024);
    EXPECT_EQ(cfg.server.idle_timeout, 60s);
    EXPECT_EQ(cfg.server.header_timeout, 10s);
    EXPECT_EQ(cfg.server.body_timeout, 60s);
    EXPECT_EQ(cfg.server.drain_timeout, 30s);

    EXPECT_EQ(cfg.upstream.url, "http://127.0.0.1:9000");
    EXPECT_EQ(cfg.upstream.host, "127.0.0.1");
    EXPECT_EQ(cfg.upstream.port, 9000);
    EXPECT_EQ(cfg.upstream.connect_timeout, 2s);
    EXPECT_EQ(cfg.upstream.timeout, 30s);
    EXPECT_EQ(cfg.upstream.max_idle, 64u);
    EXPECT_EQ(cfg.upstream.max_connections, 256u);
    EXPECT_EQ(cfg.upstream.idle_timeout, 60s);
    EXPECT_EQ(cfg.upstream.resolve_interval, 30s);
    EXPECT_EQ(cfg.upstream.max_header_bytes, 64u * 1024);

    const auto& rl = cfg.rate_limit;
    EXPECT_EQ(rl.store, store_kind::memory);
    EXPECT_EQ(rl.max_held, 10'000);
    EXPECT_FALSE(rl.x_ratelimit_headers);
    EXPECT_EQ(rl.ipv6_prefix, 64);
    EXPECT_EQ(rl.fallback.algo, algorithm::leaky_bucket);
    EXPECT_EQ(rl.fallback.capacity, 50);
    EXPECT_EQ(rl.fallback.flow_rate, 5.0);
    EXPECT_EQ(rl.fallback.mode, shaping_mode::shape);
    EXPECT_FALSE(rl.fallback.max_delay.has_value());
    EXPECT_FALSE(rl.fallback.dry_run);
    ASSERT_EQ(rl.fallback.key.size(), 2u);
    EXPECT_EQ(rl.fallback.key[0].what, key_part::kind::ip);
    EXPECT_EQ(rl.fallback.key[1].what, key_part::kind::endpoint);

    EXPECT_EQ(rl.redis.host, "127.0.0.1");
    EXPECT_EQ(rl.redis.port, 6379);
    EXPECT_EQ(rl.redis.username, "");
    EXPECT_EQ(rl.redis.password, "");
    EXPECT_EQ(rl.redis.db, 0);
    EXPECT_EQ(rl.redis.ttl, 60s);
    EXPECT_EQ(rl.redis.timeout, 50ms);
    EXPECT_EQ(rl.redis.connect_timeout, 1s);
    EXPECT_EQ(rl.redis.on_failure, failure_mode::open);

    EXPECT_EQ(cfg.logging.level, "info");
    EXPECT_EQ(cfg.logging.format, logging_settings::format_kind::text);
    EXPECT_TRUE(cfg.logging.access_log);
    EXPECT_EQ(cfg.admin.listen.host, "127.0.0.1");
    EXPECT_EQ(cfg.admin.listen.port, 9901);
    EXPECT_TRUE(cfg.admin.enabled);
}

TEST(ConfigLoader, ExampleFileLoadsWithDocumentedDefaults) {
    const auto path = config_dir + "sluice.yaml";
    const auto cfg = load_file(path);
    EXPECT_EQ(cfg.source, path);
    expect_defaults(cfg);
    EXPECT_TRUE(cfg.warnings.empty()) << cfg.warnings.front();

    const auto& rules = cfg.rate_limit.rules;
    ASSERT_EQ(rules.size(), 3u);
    EXPECT_EQ(rules[0].name, "completions");
    EXPECT_EQ(rules[0].path, "/v1/completions");
    EXPECT_EQ(rules[0].kind, rule::match_kind::exact);
    EXPECT_EQ(rules[0].methods, std::vector<std::string>{"POST"});
    ASSERT_EQ(rules[0].limits.size(), 2u);
    EXPECT_EQ(rules[0].limits[0].capacity, 10);
    EXPECT_EQ(rules[0].limits[0].flow_rate, 2.0);
    EXPECT_EQ(rules[0].limits[0].max_delay, std::optional<milliseconds>(10s));
    EXPECT_EQ(rules[0].limits[1].capacity, 100);
    ASSERT_EQ(rules[0].limits[1].key.size(), 1u);
    EXPECT_EQ(rules[0].limits[1].key[0].what, key_part::kind::endpoint);

    EXPECT_EQ(rules[1].kind, rule::match_kind::prefix);
    EXPECT_TRUE(rules[1].methods.empty());
    ASSERT_EQ(rules[1].limits.size(), 2u);
    EXPECT_EQ(rules[1].limits[0].algo, algorithm::token_bucket);
    EXPECT_EQ(rules[1].limits[0].refill_rate, 5.0);
    ASSERT_EQ(rules[1].limits[0].key.size(), 1u);
    EXPECT_EQ(rules[1].limits[0].key[0].what, key_part::kind::header);
    EXPECT_EQ(rules[1].limits[0].key[0].header, "X-Api-Key");
    EXPECT_EQ(rules[1].limits[1].algo, algorithm::sliding_window);
    EXPECT_EQ(rules[1].limits[1].limit_count, 100);
    EXPECT_EQ(rules[1].limits[1].window, 1min);

    EXPECT_EQ(rules[2].name, "health");
    EXPECT_TRUE(rules[2].limits.empty());
}

TEST(ConfigLoader, ExampleFileSwitchedToRedisFitsItsTtl) {
    std::ifstream in(config_dir + "sluice.yaml");
    std::ostringstream text;
    text << in.rdbuf();
    auto yaml = text.str();
    const auto at = yaml.find("store: memory");
    ASSERT_NE(at, std::string::npos);
    yaml.replace(at, 13, "store: redis ");
    const auto cfg = load(yaml);
    EXPECT_EQ(cfg.rate_limit.store, store_kind::redis);
    EXPECT_TRUE(cfg.warnings.empty()) << cfg.warnings.front();
}

TEST(ConfigLoader, MinimalFileTakesEveryDefault) {
    const auto cfg = load_file(config_dir + "minimal.yaml");
    expect_defaults(cfg);
    EXPECT_TRUE(cfg.rate_limit.rules.empty());
    EXPECT_TRUE(cfg.warnings.empty());
}

TEST(ConfigLoader, MissingFileNamesThePath) {
    try {
        load_file("/nonexistent/sluice.yaml");
        FAIL() << "loaded a missing file";
    } catch (const config_error& e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent/sluice.yaml: cannot open"),
                  std::string::npos)
            << e.what();
    }
}

// Only a regular file is read: a FIFO named by mistake neither blocks the start (or a reload, on
// the control thread) waiting for a writer, nor is /dev/zero read without end.
TEST(ConfigLoader, OnlyARegularFileIsRead) {
    const auto dir =
        std::filesystem::temp_directory_path() / ("sluice-fifo-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto fifo = (dir / "sluice.yaml").string();
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
    for (const std::string& path : {fifo, std::string("/dev/zero")}) {
        try {
            load_file(path);
            ADD_FAILURE() << "loaded " << path;
        } catch (const config_error& e) {
            EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos)
                << e.what();
        }
    }
    std::filesystem::remove_all(dir);
}

// A directory (a ConfigMap's mount, say) is named as one, not read as an empty file missing
// every required key.
TEST(ConfigLoader, ADirectoryIsNamedAsOne) {
    try {
        load_file(config_dir);
        FAIL() << "loaded a directory";
    } catch (const config_error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(config_dir + ": is a directory"), std::string::npos) << what;
        EXPECT_EQ(what.find("is required"), std::string::npos) << what;
    }
}

TEST(ConfigLoader, ReadsEveryKey) {
    const auto cfg = load(R"(server:
  listen: "[::1]:0"
  trusted-proxies: [10.0.0.0/8, 192.168.1.7]
  workers: 3
  max-header-size: 32k
  max-uri-length: 1MiB
  headers-with-underscores: reject
  max-chunk-header-size: 100
  max-trailer-size: 64KiB
  max-body-size: 2G
  request-buffer-size: 1MiB
  idle-timeout: 1.5
  header-timeout: 500ms
  body-timeout: 2m
  drain-timeout: 0
upstream:
  url: http://backend.internal/
  connect-timeout: 5m
  timeout: 1h
  max-idle-connections: 0
  max-connections: 9
  idle-timeout: 30s
  resolve-interval: 5s
  max-header-size: 128KiB
rate-limit:
  store: redis
  max-held: 7
  x-ratelimit-headers: yes
  ipv6-prefix: 128
  fallback: { algorithm: FIXED_COUNTER, limit: 10, window: 30s, dry-run: true, key: [global] }
  redis:
    host: /run/redis.sock
    port: 6380
    username: sluice
    password: "s3cret"
    db: 2
    ttl: 5m
    timeout: 20ms
    connect-timeout: 2s
    failure-mode: local
logging:
  level: debug
  format: json
  access-log: off
admin:
  listen: 0.0.0.0:9100
  enabled: false
)");
    EXPECT_EQ(cfg.server.listen.host, "::1");
    EXPECT_EQ(cfg.server.listen.port, 0);
    ASSERT_EQ(cfg.server.trusted_proxies.size(), 2u);
    EXPECT_EQ(cfg.server.trusted_proxies[0].prefix, 8);
    EXPECT_EQ(cfg.server.trusted_proxies[1].prefix, 32);
    EXPECT_EQ(cfg.server.workers, 3u);
    EXPECT_EQ(cfg.server.max_header_bytes, 32u * 1024); // k is 1024, as in nginx
    EXPECT_EQ(cfg.server.max_uri_bytes, 1024u * 1024);
    EXPECT_EQ(cfg.server.headers_with_underscores, underscore_headers::reject);
    EXPECT_EQ(cfg.server.max_chunk_header_bytes, 100u);
    EXPECT_EQ(cfg.server.max_trailer_bytes, 64u * 1024);
    EXPECT_EQ(cfg.server.max_body_bytes, 2ull << 30); // G is 2^30
    EXPECT_EQ(cfg.server.request_buffer_bytes, 1u << 20);
    EXPECT_EQ(cfg.server.idle_timeout, 1500ms);
    EXPECT_EQ(cfg.server.header_timeout, 500ms);
    EXPECT_EQ(cfg.server.body_timeout, 2min);
    EXPECT_EQ(cfg.server.drain_timeout, 0ms);
    EXPECT_EQ(cfg.upstream.host, "backend.internal");
    EXPECT_EQ(cfg.upstream.port, 80);
    EXPECT_EQ(cfg.upstream.connect_timeout, 5min);
    EXPECT_EQ(cfg.upstream.timeout, 1h);
    EXPECT_EQ(cfg.upstream.max_idle, 0u);
    EXPECT_EQ(cfg.upstream.max_connections, 9u);
    EXPECT_EQ(cfg.upstream.idle_timeout, 30s);
    EXPECT_EQ(cfg.upstream.resolve_interval, 5s);
    EXPECT_EQ(cfg.upstream.max_header_bytes, 128u * 1024);
    const auto& rl = cfg.rate_limit;
    EXPECT_EQ(rl.store, store_kind::redis);
    EXPECT_EQ(rl.max_held, 7);
    EXPECT_TRUE(rl.x_ratelimit_headers);
    EXPECT_EQ(rl.ipv6_prefix, 128);
    EXPECT_EQ(rl.fallback.algo, algorithm::fixed_window);
    EXPECT_EQ(rl.fallback.limit_count, 10);
    EXPECT_EQ(rl.fallback.window, 30s);
    EXPECT_TRUE(rl.fallback.dry_run);
    EXPECT_EQ(rl.fallback.line, 30);
    ASSERT_EQ(rl.fallback.key.size(), 1u);
    EXPECT_EQ(rl.fallback.key[0].what, key_part::kind::global);
    EXPECT_EQ(rl.redis.host, "/run/redis.sock");
    EXPECT_EQ(rl.redis.port, 6380);
    EXPECT_EQ(rl.redis.username, "sluice");
    EXPECT_EQ(rl.redis.password, "s3cret");
    EXPECT_EQ(rl.redis.db, 2);
    EXPECT_EQ(rl.redis.ttl, 5min);
    EXPECT_EQ(rl.redis.timeout, 20ms);
    EXPECT_EQ(rl.redis.connect_timeout, 2s);
    EXPECT_EQ(rl.redis.on_failure, failure_mode::local);
    EXPECT_EQ(cfg.logging.level, "debug");
    EXPECT_EQ(cfg.logging.format, logging_settings::format_kind::json);
    EXPECT_FALSE(cfg.logging.access_log);
    EXPECT_EQ(cfg.admin.listen.host, "0.0.0.0");
    EXPECT_EQ(cfg.admin.listen.port, 9100);
    EXPECT_FALSE(cfg.admin.enabled);
}

TEST(ConfigLoader, RulesKeepTheirLinesAndPatternKinds) {
    const auto cfg = load(base + R"(rate-limit:
  rules:
    - name: a
      match: { path: /a, methods: [GET, POST] }
      limits:
        - { capacity: 3, flowRate: 0.5, mode: police }
        - algorithm: TOKEN_BUCKET
          capacity: 4
          refillRate: 0.25
    - name: b
      match: { path: /b/* }
      limits: []
    - name: c
      match: { path: "/c/*/d" }
      limits: []
)");
    const auto& rules = cfg.rate_limit.rules;
    ASSERT_EQ(rules.size(), 3u);
    EXPECT_EQ(rules[0].line, 5);
    EXPECT_EQ(rules[0].methods, (std::vector<std::string>{"GET", "POST"}));
    ASSERT_EQ(rules[0].limits.size(), 2u);
    EXPECT_EQ(rules[0].limits[0].line, 8);
    EXPECT_EQ(rules[0].limits[0].algo, algorithm::leaky_bucket);
    EXPECT_EQ(rules[0].limits[0].flow_rate, 0.5);
    EXPECT_EQ(rules[0].limits[0].mode, shaping_mode::police);
    EXPECT_EQ(rules[0].limits[1].line, 9);
    EXPECT_EQ(rules[0].limits[1].refill_rate, 0.25);
    EXPECT_EQ(rules[1].line, 12);
    EXPECT_EQ(rules[1].kind, rule::match_kind::prefix);
    EXPECT_EQ(rules[2].kind, rule::match_kind::glob);
    EXPECT_TRUE(cfg.warnings.empty());
}

// json: sources and key parts (issue 15): paths split into segments, max-body read as a size.
TEST(ConfigLoader, JsonSourcesAndKeyPartsKeepTheirPaths) {
    const auto cfg = load(base + R"(rate-limit:
  rules:
    - name: llm
      match: { path: /v1/* }
      limits:
        - algorithm: TOKEN_BUCKET
          capacity: 20000
          refillRate: 500
          key: ["header:X-Api-Key", "json:model"]
          cost:
            request: json:max_tokens
            default: 256
            response: json:usage.total_tokens
            max-body: 64KiB
)");
    ASSERT_EQ(cfg.rate_limit.rules.size(), 1u);
    const auto& l = cfg.rate_limit.rules[0].limits.at(0);
    ASSERT_EQ(l.key.size(), 2u);
    EXPECT_EQ(l.key[1].what, key_part::kind::json);
    EXPECT_EQ(l.key[1].json.text, "model");
    ASSERT_TRUE(l.cost.has_value());
    EXPECT_EQ(l.cost->request.what, cost_source::kind::json);
    EXPECT_EQ(l.cost->request.json.segments, std::vector<std::string>{"max_tokens"});
    EXPECT_EQ(l.cost->response.what, cost_source::kind::json);
    EXPECT_EQ(l.cost->response.json.segments, (std::vector<std::string>{"usage", "total_tokens"}));
    EXPECT_EQ(l.cost->max_body, 64u * 1024);
    EXPECT_EQ(l.cost->fallback, 256);
}

TEST(ConfigLoader, EmptyFallbackMeansThePageDefault) {
    for (const char* empty : {"", " {}", " null"}) {
        const auto cfg = load(base + "rate-limit:\n  fallback:" + empty + "\n");
        EXPECT_EQ(cfg.rate_limit.fallback.algo, algorithm::leaky_bucket) << empty;
        EXPECT_EQ(cfg.rate_limit.fallback.capacity, 50) << empty;
        EXPECT_EQ(cfg.rate_limit.fallback.flow_rate, 5.0) << empty;
    }
}

} // namespace
} // namespace sluice::config::test
