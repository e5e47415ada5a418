// SPDX-License-Identifier: Apache-2.0
// Operating sluice (issue 6): /metrics in the Prometheus text format with counters that follow
// the traffic, /healthz and /readyz (also across a Redis outage), SIGHUP reloads under load
// (valid and invalid files), SIGTERM draining held and in-flight requests, and JSON logs.

#include "integration_util.hpp"
#include "support/admin_client.hpp"
#include "support/limit_probe.hpp"
#include "support/limited_sluice.hpp"
#include "support/redis_server.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

std::string make_yaml(const recording_upstream& upstream,
                      const std::string& rate_limit,
                      const std::string& logging = "  level: info\n") {
    return compose_yaml(upstream.url(), rate_limit, "", logging);
}

// Capacity 2 per key, one slot every 100 s: the third request of a key is refused.
constexpr const char* two_per_key = "  fallback: { capacity: 2, flowRate: 0.01, mode: police }\n";

/// Parses `text` with prometheus_client's parser; the script's output, and its exit code.
command_result parse_with_prometheus_client(const std::string& text) {
    temp_dir dir;
    const std::string file = dir.write_file("metrics.txt", text);
    constexpr const char* script = R"(import sys
from prometheus_client.parser import text_string_to_metric_families
families = list(text_string_to_metric_families(open(sys.argv[1]).read()))
names = {s.name for f in families for s in f.samples}
for need in ["sluice_connections_open", "sluice_held_requests",
             "sluice_upstream_responses_total", "sluice_upstream_latency_seconds_bucket"]:
    if need not in names:
        print("missing", need)
        sys.exit(2)
print("families", len(families), "samples", sum(len(f.samples) for f in families))
)";
    return run_python(script, {file});
}

/// The decision counter of `rule` as sluice renders it.
std::string requests_series(const std::string& decision, const std::string& rule = "fallback") {
    return fmt::format(R"(sluice_requests_total{{decision="{}",rule="{}"}})", decision, rule);
}

TEST(OperationsMetrics, ParseWithPrometheusClientAndFollowTheTraffic) {
    recording_upstream upstream;
    sluice_process sluice(make_yaml(upstream, two_per_key));
    const auto admin = admin_port(sluice);

    // The harness connected once to see sluice listening; wait until that connection has been
    // counted and closed, then count from there.
    bool met = false;
    const std::string idle = wait_for_metrics(
        admin,
        [](const std::string& t) {
            return metric_or_zero(t, "sluice_connections_total") >= 1 &&
                   metric_value(t, "sluice_connections_open") == 0;
        },
        10s,
        met);
    ASSERT_TRUE(met) << idle;
    const command_result idle_parse = parse_with_prometheus_client(idle);
    ASSERT_EQ(idle_parse.exit_code, 0) << idle_parse.output << "\n" << idle;
    const auto connections_before = metric_value(idle, "sluice_connections_total");
    ASSERT_TRUE(connections_before) << idle;
    EXPECT_EQ(metric_value(idle, R"(sluice_upstream_responses_total{code="2xx"})"), 0);

    auto first = std::make_unique<http_connection>(sluice.port());
    auto second = std::make_unique<http_connection>(sluice.port());
    for (const unsigned expected : {200u, 200u, 429u}) {
        first->send("GET", "/m");
        EXPECT_EQ(first->read_response().status, expected);
    }
    second->send("GET", "/other");
    EXPECT_EQ(second->read_response().status, 200u);

    const std::string busy = wait_for_metrics(
        admin,
        [](const std::string& t) {
            return metric_or_zero(t, requests_series("allowed")) == 3 &&
                   metric_or_zero(t, requests_series("rejected")) == 1 &&
                   metric_or_zero(t, R"(sluice_upstream_responses_total{code="2xx"})") == 3 &&
                   metric_or_zero(t, "sluice_connections_open") == 2;
        },
        10s,
        met);
    EXPECT_TRUE(met) << busy;
    EXPECT_EQ(metric_value(busy, "sluice_connections_total"), *connections_before + 2);
    EXPECT_EQ(metric_value(busy, "sluice_upstream_latency_seconds_count"), 3);
    EXPECT_EQ(metric_value(busy, R"(sluice_upstream_latency_seconds_bucket{le="+Inf"})"), 3);
    EXPECT_EQ(metric_value(busy, requests_series("dry_run_rejected")), 0);
    EXPECT_EQ(metric_value(busy, "sluice_held_requests"), 0);
    const command_result busy_parse = parse_with_prometheus_client(busy);
    EXPECT_EQ(busy_parse.exit_code, 0) << busy_parse.output << "\n" << busy;

    first.reset();
    second.reset();
    const std::string after = wait_for_metrics(
        admin,
        [](const std::string& t) { return metric_or_zero(t, "sluice_connections_open") == 0; },
        10s,
        met);
    EXPECT_TRUE(met) << "connections_open did not return to 0:\n" << after;
    EXPECT_EQ(metric_value(after, "sluice_connections_total"), *connections_before + 2);
}

// Keep-alive connections opened together, as a load balancer's pool or wrk opens them, end up
// within two of each other on the workers (the first free worker accepts, and hands a connection
// to one with two fewer), each counted where it is served until it closes.
TEST(OperationsMetrics, ConnectionsOpenedTogetherAreSpreadOverTheWorkers) {
    recording_upstream upstream;
    sluice_process sluice(
        compose_yaml(upstream.url(), roomy_fallback_yaml(1000000), "  workers: 2\n"));
    const auto admin = admin_port(sluice);
    std::vector<std::unique_ptr<http_connection>> connections;
    for (int i = 0; i < 10; ++i) {
        connections.push_back(std::make_unique<http_connection>(sluice.port()));
    }
    for (auto& c : connections) {
        c->send("GET", "/spread");
        EXPECT_EQ(c->read_response().status, 200u);
    }
    const auto on = [](const std::string& t, int worker) {
        return metric_or_zero(
            t, fmt::format(R"(sluice_worker_connections_open{{worker="{}"}})", worker));
    };
    bool met = false;
    const std::string open = wait_for_metrics(
        admin,
        [&](const std::string& t) {
            return on(t, 0) + on(t, 1) == 10 && metric_or_zero(t, "sluice_connections_open") == 10;
        },
        10s,
        met);
    ASSERT_TRUE(met) << open;
    EXPECT_LE(std::abs(on(open, 0) - on(open, 1)), 2) << open;
    EXPECT_FALSE(metric_value(open, R"(sluice_worker_connections_open{worker="2"})")) << open;
    // Every connection still serves, wherever it went.
    for (auto& c : connections) {
        c->send("GET", "/again");
        EXPECT_EQ(c->read_response().status, 200u);
    }
    connections.clear();
    const std::string closed = wait_for_metrics(
        admin, [&](const std::string& t) { return on(t, 0) == 0 && on(t, 1) == 0; }, 10s, met);
    EXPECT_TRUE(met) << closed;
}

TEST(OperationsAdmin, HealthzReadyzAndUnknownPaths) {
    recording_upstream upstream;
    sluice_process sluice(make_yaml(upstream, two_per_key));
    const auto admin = admin_port(sluice);
    const http_response health = get(admin, "/healthz");
    EXPECT_EQ(health.status, 200u);
    EXPECT_EQ(get(admin, "/readyz").status, 200u);
    EXPECT_EQ(get(admin, "/nope").status, 404u);
    EXPECT_EQ(request(admin, "POST", "/metrics").status, 405u);
    // The admin port serves no proxy traffic.
    EXPECT_EQ(upstream.stats().headers_received, 0u);
}

// The admin listener answers what it cannot serve with a 4xx, as the proxy does, rather than
// closing unanswered: a request that is no HTTP, a header over 8 KiB, a body (no endpoint takes
// one; a POST's 405 names the methods). Each answer reaches the client whole, though it sent
// bytes the listener did not read.
TEST(OperationsAdmin, WhatItCannotServeGetsA4xx) {
    recording_upstream upstream;
    sluice_process sluice(make_yaml(upstream, two_per_key));
    const auto admin = admin_port(sluice);
    const auto answer_to = [admin](const std::string& bytes) {
        http_connection connection(admin, 5s);
        connection.send_raw(bytes);
        return connection.read_response();
    };
    EXPECT_EQ(answer_to("GET /healthz HTTP/1.1\r\nHost: a\r\nBad Field: x\r\n\r\n").status, 400u);
    EXPECT_EQ(answer_to("GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(9000, 'b') +
                        "\r\n\r\n")
                  .status,
              431u);
    const auto post =
        answer_to("POST /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello");
    EXPECT_EQ(post.status, 405u);
    EXPECT_EQ(post.header("Allow"), "GET, HEAD");
    EXPECT_EQ(answer_to("GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc").status,
              400u);
    EXPECT_EQ(answer_to("GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n").status, 200u);
}

// admin.listen takes a host name, as server.listen does (the configuration check let it through,
// and the start failed with "Invalid argument").
TEST(OperationsAdmin, ListensOnAHostName) {
    recording_upstream upstream;
    auto yaml = make_yaml(upstream, two_per_key);
    const auto at = yaml.find("127.0.0.1:0\"", yaml.find("admin:"));
    ASSERT_NE(at, std::string::npos) << yaml;
    yaml.replace(at, std::string("127.0.0.1:0").size(), "localhost:0");
    sluice_process sluice(yaml);
    EXPECT_TRUE(sluice.wait_for_log("admin listening on localhost:", 5s)) << sluice.log_text();
}

/// A liveness probe on the admin port: GET /healthz gets 200, not a closed connection.
void expect_probe_answered(std::uint16_t admin, const sluice_process& sluice) {
    http_connection health(admin, 5s);
    health.send("GET", "/healthz");
    error_code ec;
    const auto response = health.try_read_response(ec);
    ASSERT_TRUE(response.has_value()) << ec.message() << "\n" << sluice.log_text();
    EXPECT_EQ(response->status, 200u);
}

// A client holding as many idle connections as the admin listener serves at once (64) does not
// keep the kubelet's liveness probe out: the probe takes the place of the connection that has
// waited longest for its request (it was refused at once, and three refused probes restart the
// pod), and is answered well within the 2 s an idle connection may wait.
TEST(OperationsAdmin, HealthzIsAnsweredWhileIdleConnectionsFillTheCap) {
    recording_upstream upstream;
    sluice_process sluice(make_yaml(upstream, two_per_key));
    const auto admin = admin_port(sluice);
    std::vector<std::unique_ptr<http_connection>> idle;
    for (int i = 0; i < 64; ++i) {
        idle.push_back(std::make_unique<http_connection>(admin, 5s));
    }
    for (int probe = 0; probe < 3; ++probe) {
        SCOPED_TRACE("probe " + std::to_string(probe));
        const auto start = std::chrono::steady_clock::now();
        expect_probe_answered(admin, sluice);
        EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
    }
}

// Nor does a client whose 64 connections have all asked and do not close after their answers
// (each lingers up to 1 s while the listener waits for its close, as one that does not read a
// large /metrics waits out its write): the probe takes the place of the one that has been
// answering longest (it was closed at once).
TEST(OperationsAdmin, HealthzIsAnsweredWhileAnsweredConnectionsFillTheCap) {
    recording_upstream upstream;
    sluice_process sluice(make_yaml(upstream, two_per_key));
    const auto admin = admin_port(sluice);
    std::vector<std::unique_ptr<http_connection>> asked;
    for (int i = 0; i < 64; ++i) {
        asked.push_back(std::make_unique<http_connection>(admin, 5s));
        asked.back()->send("GET", "/healthz");
        EXPECT_EQ(asked.back()->read_response().status, 200u); // and the connection stays open
    }
    expect_probe_answered(admin, sluice);
}

// HEAD gets the fields GET would (Content-Length included) and no body (one was sent after the
// header, which a client reads as the start of its next response).
TEST(OperationsAdmin, HeadSendsTheHeaderWithoutTheBody) {
    recording_upstream upstream;
    sluice_process sluice(make_yaml(upstream, two_per_key));
    const auto admin = admin_port(sluice);
    for (const char* path : {"/metrics", "/healthz", "/nope"}) {
        const http_response got = get(admin, path);
        fd_stream stream = fd_stream::connect_loopback(admin);
        stream.write_all(format_request("HEAD", path));
        std::string bytes;
        ASSERT_TRUE(stream.wait_closed(5s, &bytes)) << path;
        const auto head_end = bytes.find("\r\n\r\n");
        ASSERT_NE(head_end, std::string::npos) << path << ": " << bytes;
        EXPECT_EQ(bytes.size(), head_end + 4) << path << ": a body follows the header";
        EXPECT_EQ(bytes.substr(0, bytes.find("\r\n")),
                  fmt::format("HTTP/1.1 {} {}", got.status, got.reason))
            << path;
        // What GET sends for /metrics may change between two scrapes (gauges move): any length
        // but 0 will do there.
        const auto length = bytes.find("Content-Length: ");
        ASSERT_NE(length, std::string::npos) << bytes;
        const auto value = std::stoull(bytes.substr(length + 16));
        if (std::string_view(path) == "/metrics") {
            EXPECT_GT(value, 0u);
        } else {
            EXPECT_EQ(value, got.body.size()) << path;
        }
    }
}

TEST(OperationsAdmin, ReadyzFollowsRedisUnderFailureModeClosed) {
    if (!redis_server::available()) {
        GTEST_SKIP() << "no redis-server";
    }
    redis_server redis;
    recording_upstream upstream;
    const std::string rate_limit = fmt::format("  store: redis\n"
                                               "  redis:\n"
                                               "    host: 127.0.0.1\n"
                                               "    port: {}\n"
                                               "    ttl: 1h\n"
                                               "    timeout: 500ms\n"
                                               "    connect-timeout: 500ms\n"
                                               "    failure-mode: closed\n",
                                               redis.port()) +
                                   roomy_fallback_yaml(1000);
    sluice_process sluice(make_yaml(upstream, rate_limit));
    const auto admin = admin_port(sluice);

    EXPECT_EQ(wait_for_admin_status(admin, "/readyz", 200, 10s), 200u);
    EXPECT_EQ(get(sluice.port(), "/r").status, 200u);

    redis.stop();
    EXPECT_EQ(wait_for_admin_status(admin, "/readyz", 503, 10s), 503u);
    EXPECT_EQ(get(sluice.port(), "/r").status, 503u) << "failure-mode closed";
    EXPECT_EQ(get(admin, "/healthz").status, 200u) << "alive, just not ready";

    redis.restart();
    EXPECT_EQ(wait_for_admin_status(admin, "/readyz", 200, 30s), 200u);
    EXPECT_EQ(get(sluice.port(), "/r").status, 200u);
}

/// Requests sent back to back on keep-alive connections (a new one every 20 requests) by
/// `threads` threads, until destroyed. Counts every answer that is not 200 and every
/// connection error as a failure, and remembers the RateLimit-Policy quotas it saw.
class load_generator {
public:
    load_generator(std::uint16_t port, std::string target, int threads)
        : port_(port)
        , target_(std::move(target)) {
        for (int i = 0; i < threads; ++i) {
            threads_.emplace_back([this] { run(); });
        }
    }

    ~load_generator() { stop(); }

    load_generator(const load_generator&) = delete;
    load_generator& operator=(const load_generator&) = delete;

    void stop() {
        stop_ = true;
        for (auto& t : threads_) {
            if (t.joinable()) {
                t.join();
            }
        }
    }

    long long ok() const { return ok_.load(); }

    long long failed() const { return failed_.load(); }

    long long last_quota() const { return last_quota_.load(); }

    std::string first_failure() const {
        std::lock_guard lock(mutex_);
        return first_failure_;
    }

    /// Waits until `more` further requests succeeded; false on timeout.
    bool wait_for_more(long long more, std::chrono::milliseconds timeout) const {
        const long long target = ok() + more;
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (ok() < target) {
            if (std::chrono::steady_clock::now() >= deadline) {
                return false;
            }
            std::this_thread::sleep_for(5ms);
        }
        return true;
    }

private:
    void fail(const std::string& why) {
        ++failed_;
        std::lock_guard lock(mutex_);
        if (first_failure_.empty()) {
            first_failure_ = why;
        }
    }

    void run() {
        while (!stop_) {
            try {
                http_connection connection(port_, 10s);
                for (int i = 0; i < 20 && !stop_; ++i) {
                    connection.send("GET", target_);
                    const http_response response = connection.read_response();
                    if (response.status != 200) {
                        fail("status " + std::to_string(response.status));
                    } else {
                        ++ok_;
                    }
                    const auto policy =
                        parse_sf_item(response.header("RateLimit-Policy").value_or(""));
                    if (policy && policy->integer("q")) {
                        last_quota_ = *policy->integer("q");
                    }
                    if (!response.keep_alive) {
                        break;
                    }
                }
            } catch (const std::exception& e) {
                fail(std::string("connection error: ") + e.what());
            }
        }
    }

    std::uint16_t port_;
    std::string target_;
    std::atomic<bool> stop_{false};
    std::atomic<long long> ok_{0};
    std::atomic<long long> failed_{0};
    std::atomic<long long> last_quota_{0};
    mutable std::mutex mutex_;
    std::string first_failure_;
    std::vector<std::thread> threads_;
};

/// The q of a fresh request's RateLimit-Policy (0 if none).
long long quota_of(std::uint16_t port, const std::string& target) {
    const auto policy = parse_sf_item(get(port, target).header("RateLimit-Policy").value_or(""));
    return policy ? policy->integer("q").value_or(0) : 0;
}

TEST(OperationsReload, ValidConfigUnderLoadAppliesWithoutAFailedRequest) {
    recording_upstream upstream;
    sluice_process sluice(make_yaml(upstream, roomy_fallback_yaml(1'000'000)));
    EXPECT_EQ(quota_of(sluice.port(), "/probe"), 1'000'000);

    load_generator load(sluice.port(), "/load", 2);
    ASSERT_TRUE(load.wait_for_more(100, 10s)) << load.first_failure();

    const std::string next = make_yaml(upstream, roomy_fallback_yaml(900'000) + R"(  rules:
    - name: limited
      match: { path: /limited }
      limits: [ { capacity: 1, flowRate: 0.01, mode: police } ]
)");
    replace_file(sluice.config_path(), next);
    sluice.send_signal(SIGHUP);
    ASSERT_TRUE(sluice.wait_for_log("configuration reloaded", 10s)) << sluice.log_text();

    // Workers take the new config as they get to it: wait for a fresh request to see it.
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (quota_of(sluice.port(), "/probe") != 900'000 &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(5ms);
    }
    EXPECT_EQ(quota_of(sluice.port(), "/probe"), 900'000);
    EXPECT_EQ(get(sluice.port(), "/limited").status, 200u);
    const http_response refused = get(sluice.port(), "/limited");
    EXPECT_EQ(refused.status, 429u) << "the new rule applies";
    EXPECT_NE(refused.body.find(R"("limit":"limited")"), std::string::npos) << refused.body;

    ASSERT_TRUE(load.wait_for_more(100, 10s)) << load.first_failure();
    EXPECT_EQ(load.last_quota(), 900'000) << "the load's keep-alive connections use it too";
    load.stop();
    EXPECT_EQ(load.failed(), 0) << load.first_failure();
    EXPECT_GT(load.ok(), 200);
    EXPECT_EQ(sluice.log_text().find("reload failed"), std::string::npos);
}

// A reload that switches the store to Redis keeps the memory store it runs with, in everything
// that reads the configuration: /readyz does not wait for a Redis connection no worker makes
// (with failure-mode closed it would say not ready until a restart), and requests are still
// decided.
TEST(OperationsReload, AChangedStoreStaysAsItRunsUntilRestart) {
    recording_upstream upstream;
    const auto redis_section = [](const char* store) {
        // Nothing listens there: the memory store never connects, Redis would be down.
        return fmt::format("  store: {}\n"
                           "  redis: {{ host: 127.0.0.1, port: {}, failure-mode: closed }}\n",
                           store,
                           free_port()) +
               roomy_fallback_yaml(1000);
    };
    sluice_process sluice(make_yaml(upstream, redis_section("memory")));
    const auto admin = admin_port(sluice);
    EXPECT_EQ(get(admin, "/readyz").status, 200u);

    const auto on_redis = make_yaml(upstream, redis_section("redis"));
    replace_file(sluice.config_path(), on_redis);
    sluice.send_signal(SIGHUP);
    ASSERT_TRUE(sluice.wait_for_log("configuration reloaded", 10s)) << sluice.log_text();
    EXPECT_NE(sluice.log_text().find("rate-limit.store (" +
                                     where_in(sluice.config_path(), on_redis, "store: redis") +
                                     ") change only on restart"),
              std::string::npos)
        << sluice.log_text();
    EXPECT_EQ(get(admin, "/readyz").status, 200u) << "still the memory store";
    EXPECT_EQ(get(sluice.port(), "/r").status, 200u);
}

// The client connection cap, derived from the descriptor limit, sets aside each worker's
// upstream.max-connections: a reload that raises it lowers the cap (else the upstream's connects
// would fail with EMFILE at the cap), and says so.
TEST(OperationsReload, AChangedUpstreamMaxConnectionsMovesADerivedClientCap) {
    recording_upstream upstream;
    const auto yaml = [&](int upstream_connections) {
        auto text = compose_yaml(upstream.url(), roomy_fallback_yaml(), "  workers: 1\n");
        const std::string url_line = "  url: \"" + upstream.url() + "\"\n";
        text.insert(text.find(url_line) + url_line.size(),
                    fmt::format("  max-connections: {}\n", upstream_connections));
        return text;
    };
    sluice_process sluice(yaml(256));
    ASSERT_TRUE(sluice.wait_for_log("descriptor limit", 5s)) << sluice.log_text();
    const auto log = sluice.log_text();
    const auto at = log.find("; descriptor limit ", log.find("client connections: at most"));
    ASSERT_NE(at, std::string::npos) << log;
    const auto limit = std::stoull(log.substr(at + std::strlen("; descriptor limit ")));
    ASSERT_GT(limit, 700u + 256u + 16u) << "too few descriptors to tell";

    replace_file(sluice.config_path(), yaml(700));
    sluice.send_signal(SIGHUP);
    EXPECT_TRUE(sluice.wait_for_log(
        fmt::format("client connections: at most {} at once now", limit - 700 - 256), 10s))
        << sluice.log_text();
}

TEST(OperationsReload, InvalidConfigIsReportedAndTheOldOneStays) {
    recording_upstream upstream;
    const std::string good = make_yaml(upstream, roomy_fallback_yaml(1'000'000));
    sluice_process sluice(good);
    load_generator load(sluice.port(), "/load", 2);
    ASSERT_TRUE(load.wait_for_more(100, 10s)) << load.first_failure();

    // A typo in one key: the loader must name the file, the line and the key.
    const std::string bad =
        make_yaml(upstream, "  fallback:\n    capacity: 10\n    flowrate: 1\n    mode: police\n");
    const auto typo_at = bad.find("    flowrate:");
    const auto typo_line = 1 + std::count(bad.begin(), bad.begin() + typo_at, '\n');
    replace_file(sluice.config_path(), bad);
    sluice.send_signal(SIGHUP);
    ASSERT_TRUE(sluice.wait_for_log("reload failed", 10s)) << sluice.log_text();
    const std::string log = sluice.log_text();
    EXPECT_NE(log.find(fmt::format("sluice.yaml:{}:", typo_line)), std::string::npos) << log;
    EXPECT_NE(log.find("rate-limit.fallback.flowrate"), std::string::npos) << log;
    EXPECT_EQ(log.find("configuration reloaded"), std::string::npos) << log;

    ASSERT_TRUE(load.wait_for_more(100, 10s)) << load.first_failure();
    EXPECT_EQ(quota_of(sluice.port(), "/probe"), 1'000'000) << "the old configuration stays";
    EXPECT_EQ(load.last_quota(), 1'000'000);
    load.stop();
    EXPECT_EQ(load.failed(), 0) << load.first_failure();

    // The process is intact: a later valid file still reloads.
    replace_file(sluice.config_path(), make_yaml(upstream, roomy_fallback_yaml(777)));
    sluice.send_signal(SIGHUP);
    ASSERT_TRUE(sluice.wait_for_log("configuration reloaded", 10s)) << sluice.log_text();
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (quota_of(sluice.port(), "/probe") != 777 &&
           std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(5ms);
    }
    EXPECT_EQ(quota_of(sluice.port(), "/probe"), 777);
}

TEST(OperationsDrain, SigtermAnswersHeldAndInFlightRequestsThenExitsZero) {
    recording_upstream upstream([](const recorded_request& r) {
        response_plan plan;
        if (r.target == "/slow") {
            plan.delay = 800ms;
        }
        return plan;
    });
    // Shape: the first request of a key goes at once, the next ones 200 ms apart.
    sluice_process sluice(
        make_yaml(upstream, "  fallback: { capacity: 10, flowRate: 5, mode: shape }\n"));
    const auto admin = admin_port(sluice);

    http_connection slow(sluice.port());
    slow.send("GET", "/slow");
    ASSERT_TRUE(upstream.wait_for_stats(
        [](const upstream_stats& s) { return s.headers_received >= 1; }, 5s));

    constexpr int held = 6;
    std::vector<std::unique_ptr<http_connection>> connections;
    for (int i = 0; i < held; ++i) {
        connections.push_back(std::make_unique<http_connection>(sluice.port()));
    }
    for (auto& connection : connections) {
        connection->send("GET", "/held");
    }
    bool met = false;
    const std::string text = wait_for_metrics(
        admin,
        [](const std::string& t) { return metric_or_zero(t, "sluice_held_requests") >= 3; },
        5s,
        met);
    ASSERT_TRUE(met) << text;

    sluice.send_signal(SIGTERM);
    // New connections are refused while the held requests are still being released.
    const auto deadline = std::chrono::steady_clock::now() + 3s;
    bool refused = false;
    while (!refused && std::chrono::steady_clock::now() < deadline) {
        try {
            fd_stream::connect_loopback(sluice.port());
            std::this_thread::sleep_for(5ms);
        } catch (const boost::system::system_error& e) {
            refused = e.code() == boost::asio::error::connection_refused;
        }
    }
    EXPECT_TRUE(refused) << "sluice still accepts connections after SIGTERM";

    const http_response slow_response = slow.read_response();
    EXPECT_EQ(slow_response.status, 200u) << "the in-flight request";
    EXPECT_FALSE(slow_response.keep_alive) << "a draining sluice closes after the response";
    slow.stream().close();
    for (int i = 0; i < held; ++i) {
        auto& connection = *connections[static_cast<std::size_t>(i)];
        const http_response response = connection.read_response();
        EXPECT_EQ(response.status, 200u) << "held request " << i;
        // Close as a client does after "Connection: close", so that sluice need not linger.
        connection.stream().close();
    }
    const auto status = sluice.wait_exit(20s);
    ASSERT_TRUE(status) << "sluice did not exit after draining";
    EXPECT_TRUE(WIFEXITED(*status)) << "wait status " << *status;
    EXPECT_EQ(WEXITSTATUS(*status), 0);
    EXPECT_EQ(upstream.requests().size(), static_cast<std::size_t>(held + 1));
    EXPECT_EQ(sluice.log_text().find("drain timeout"), std::string::npos);
}

// A drain that begins while a response goes out on a keep-alive connection (its header said the
// connection stays) ends that connection once the response is over with a lingering close: the
// client's next request, sent meanwhile and unread, made the plain close a reset, which cut off
// what of the response the kernel still held and ended the connection with ECONNRESET. One
// worker; a 32 MiB response, which the socket buffers cannot hold, read only once the drain has
// begun (the listener refuses connections: the worker closed it and began the drain in one step).
TEST(OperationsDrain, AResponseGoingOutWhenTheDrainBeginsArrivesWholeThenTheConnectionEnds) {
    constexpr std::uint64_t size = 32 << 20;
    recording_upstream upstream([](const recorded_request&) {
        response_plan plan;
        plan.kind = response_plan::body_kind::pattern;
        plan.pattern_size = size;
        return plan;
    });
    sluice_process sluice(compose_yaml(upstream.url(), roomy_fallback_yaml(), "  workers: 1\n"));
    auto client = fd_stream::connect_loopback(sluice.port());
    client.write_all("GET /big HTTP/1.1\r\nHost: a\r\n\r\n");
    // The response's head, before the drain: it keeps the connection.
    std::string received;
    std::array<char, 64 * 1024> chunk;
    while (received.find("\r\n\r\n") == std::string::npos) {
        received.append(chunk.data(), client.read_some(boost::asio::buffer(chunk)));
    }
    const auto head_end = received.find("\r\n\r\n") + 4;
    ASSERT_EQ(received.find("Connection: close"), std::string::npos)
        << received.substr(0, head_end);
    std::uint64_t body = received.size() - head_end;

    sluice.send_signal(SIGTERM);
    ASSERT_TRUE(eventually(
        [&] {
            try {
                fd_stream::connect_loopback(sluice.port());
                return false;
            } catch (const boost::system::system_error& e) {
                return e.code() == boost::asio::error::connection_refused;
            }
        },
        5s));
    client.write_all("GET /next HTTP/1.1\r\nHost: a\r\n\r\n");
    error_code ec;
    while (!ec) {
        body += client.read_some(boost::asio::buffer(chunk), ec);
    }
    EXPECT_EQ(body, size) << "the response was cut off";
    EXPECT_EQ(ec, boost::asio::error::eof) << "the connection ended with " << ec.message();
    client.close();
    EXPECT_TRUE(sluice.wait_exit(10s));
}

TEST(OperationsLogging, JsonLogLinesParseWithTheAccessFields) {
    recording_upstream upstream([](const recorded_request& r) {
        response_plan plan;
        if (r.target == "/missing") {
            plan.status = 404;
        }
        return plan;
    });
    sluice_process sluice(
        make_yaml(upstream, two_per_key, "  level: info\n  format: json\n  access-log: true\n"));

    http_connection connection(sluice.port());
    for (const unsigned expected : {200u, 200u, 429u}) {
        connection.send("GET", "/a?x=1");
        EXPECT_EQ(connection.read_response().status, expected);
    }
    connection.send("POST", "/missing", {}, "body");
    EXPECT_EQ(connection.read_response().status, 404u);
    // A bad percent-encoding is refused with 400; the raw target (quote and backslash
    // included) goes into the log and must be escaped there.
    connection.send_raw("GET /bad%zz\"\\ HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(connection.read_response().status, 400u);
    connection.stream().close();

    constexpr const char* script = R"(import json, sys
need = ["client", "method", "path", "key", "decision", "status"]
bad, access = [], 0
for n, line in enumerate(open(sys.argv[1], encoding="utf-8"), 1):
    line = line.rstrip("\n")
    if not line:
        continue
    try:
        obj = json.loads(line)
    except ValueError as e:
        bad.append("line %d is not JSON (%s): %r" % (n, e, line))
        continue
    if not isinstance(obj, dict) or "level" not in obj or "time" not in obj:
        bad.append("line %d lacks time/level: %r" % (n, line))
    elif obj.get("log") == "access":
        access += 1
        missing = [k for k in need if k not in obj]
        if missing:
            bad.append("line %d lacks %s: %r" % (n, missing, line))
        else:
            print("ACCESS", json.dumps([obj[k] for k in need]))
for b in bad:
    print(b)
print("access lines:", access)
sys.exit(1 if bad else 0)
)";
    const command_result result = stop_and_check_log(sluice, script);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    const std::string& out = result.output;
    EXPECT_NE(out.find("access lines: 5"), std::string::npos) << out;
    EXPECT_NE(
        out.find(R"(ACCESS ["127.0.0.1", "GET", "/a", "rate-limit:127.0.0.1:/a", "allowed", 200])"),
        std::string::npos)
        << out;
    EXPECT_NE(
        out.find(
            R"(ACCESS ["127.0.0.1", "GET", "/a", "rate-limit:127.0.0.1:/a", "rejected", 429])"),
        std::string::npos)
        << out;
    EXPECT_NE(out.find(R"("POST", "/missing", "rate-limit:127.0.0.1:/missing", "allowed", 404])"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find(R"("GET", "/bad%zz\"\\", )"), std::string::npos) << out;
}

} // namespace
} // namespace sluice::test
