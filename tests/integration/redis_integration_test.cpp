// SPDX-License-Identifier: Apache-2.0
// The Redis store end to end: the real binary in front of a recording upstream, deciding through
// a private redis-server. The page's worked example, one bucket shared by two instances, the
// hash and TTL the page describes, every failure mode across a Redis crash and restart, and a
// script cache flushed under traffic.

#include "integration_util.hpp"
#include "support/arrivals.hpp"
#include "support/limited_sluice.hpp"
#include "support/redis_server.hpp"
#include "support/resp_client.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using clock_type = std::chrono::steady_clock;

/// A redis-server, a recording upstream, and a config preset pointing at both.
class RedisStoreTest : public testing::Test {
protected:
    void SetUp() override {
        if (!redis_server::available()) {
            GTEST_SKIP() << "redis-server is not installed";
        }
        redis_ = std::make_unique<redis_server>();
    }

    limited_config config(std::int64_t capacity, double flow_rate, const std::string& mode) const {
        limited_config c;
        c.upstream_url = upstream_.url();
        c.store = "redis";
        c.redis_port = redis_->port();
        c.capacity = capacity;
        c.flow_rate = flow_rate;
        c.mode = mode;
        return c;
    }

    /// With failure-mode closed, /readyz answers 200 once every worker has its Redis connection.
    static void wait_ready(const sluice_process& sluice) {
        const auto admin = admin_port(sluice);
        ASSERT_TRUE(eventually([admin] { return get(admin, "/readyz").status == 200; }, 10s))
            << sluice.log_text();
    }

    std::unique_ptr<redis_server> redis_;
    recording_upstream upstream_;
};

// The page's worked example, police mode, decided in Redis: 30 at t=0 are admitted, and 50 more
// right after admit exactly 20.
TEST_F(RedisStoreTest, WorkedExamplePoliceMode) {
    sluice_process sluice(config(50, 5, "police").yaml());
    wait_ready(sluice);

    std::vector<std::unique_ptr<http_connection>> connections;
    for (int i = 0; i < 80; ++i) {
        connections.push_back(std::make_unique<http_connection>(sluice.port()));
    }
    const auto start = clock_type::now();
    const auto burst = [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) {
            connections[i]->send("GET", "/work");
        }
        std::vector<unsigned> statuses;
        for (std::size_t i = begin; i < end; ++i) {
            statuses.push_back(connections[i]->read_response().status);
        }
        return statuses;
    };
    const auto first = burst(0, 30);
    const auto second = burst(30, 80);
    const auto span = clock_type::now() - start;

    // One slot leaks every 200 ms. Every decision falls inside `span` (after the first write,
    // before the last read), so at most span / 200 ms slots leak meanwhile: exactly 20 when the
    // run took under 200 ms, as it normally does.
    const auto leaked_at_most = slots_in(span, 200ms);
    EXPECT_EQ(std::count(first.begin(), first.end(), 200u), 30);
    const auto admitted = std::count(second.begin(), second.end(), 200u);
    const auto rejected = std::count(second.begin(), second.end(), 429u);
    EXPECT_GE(admitted, 20);
    EXPECT_LE(admitted, 20 + leaked_at_most);
    EXPECT_EQ(admitted + rejected, 50);
    const auto forwarded = static_cast<std::size_t>(30 + admitted);
    ASSERT_TRUE(upstream_.wait_for_count(forwarded, 10s));
    ASSERT_TRUE(upstream_.wait_quiet(5s));
    EXPECT_EQ(upstream_.requests().size(), forwarded);

    // The state is the page's hash: 50 queued (less what leaked), and it is Redis that holds it.
    resp_client cli(redis_->port());
    const auto fields = cli.hgetall(page_key("/work"));
    ASSERT_EQ(fields.size(), 2u) << "HGETALL " << page_key("/work");
    RecordProperty("span_ms",
                   static_cast<int>(std::chrono::duration_cast<milliseconds>(span).count()));
}

// Two sluice instances on one Redis, clients hammering both at once: together they are admitted
// as one bucket admits, not two.
TEST_F(RedisStoreTest, TwoInstancesShareOneBucket) {
    constexpr std::int64_t capacity = 20;
    constexpr double flow_rate = 10; // one slot every 100 ms
    const auto cfg = config(capacity, flow_rate, "police");
    sluice_process a(cfg.yaml());
    sluice_process b(cfg.yaml());
    wait_ready(a);
    wait_ready(b);

    // Two client threads per instance, each sending every 5 ms: a slot that leaks is taken again
    // within a few ms, so the bucket stays saturated for the whole run.
    traffic clients({a.port(), a.port(), b.port(), b.port()}, "/shared", 5ms);
    const auto start = clock_type::now();
    ASSERT_TRUE(eventually([&] { return clients.completed_since(start) >= 1200; }, 30s));
    const auto results = clients.stop();

    long long admitted = 0;
    long long other = 0;
    auto first_sent = results.front().sent;
    auto last_sent = first_sent;
    auto first_received = results.front().received;
    auto last_received = first_received;
    std::set<std::pair<std::uint16_t, unsigned>> seen; // (instance, status)
    for (const auto& e : results) {
        admitted += e.status == 200 ? 1 : 0;
        other += (e.status == 200 || e.status == 429) ? 0 : 1;
        first_sent = std::min(first_sent, e.sent);
        last_sent = std::max(last_sent, e.sent);
        first_received = std::min(first_received, e.received);
        last_received = std::max(last_received, e.received);
        seen.insert({e.port, e.status});
    }
    EXPECT_EQ(other, 0) << statuses_of(results);

    // One bucket admits `capacity` at once, then one per leaked slot. Every decision lies in
    // [first_sent, last_received], so at most floor(elapsed x flowRate) slots leak (+1 for the
    // ms rounding of Redis TIME at both ends). Saturated, every slot that leaks before the last
    // send is refilled: at least floor((last_sent - first_received) x flowRate) of them, less
    // the one in progress at each end.
    const double elapsed_s = std::chrono::duration<double>(last_received - first_sent).count();
    const double saturated_s = std::chrono::duration<double>(last_sent - first_received).count();
    const auto upper = capacity + static_cast<long long>(std::floor(elapsed_s * flow_rate)) + 1;
    const auto lower = capacity + static_cast<long long>(std::floor(saturated_s * flow_rate)) - 2;
    EXPECT_LE(admitted, upper) << "elapsed " << elapsed_s << " s";
    EXPECT_GE(admitted, lower) << "elapsed " << elapsed_s << " s";
    // Both instances took part: each admitted some and rejected some.
    for (const auto port : {a.port(), b.port()}) {
        EXPECT_TRUE(seen.count({port, 200u})) << "instance on port " << port;
        EXPECT_TRUE(seen.count({port, 429u})) << "instance on port " << port;
    }
    RecordProperty("admitted", static_cast<int>(admitted));
    RecordProperty("requests", static_cast<int>(results.size()));
}

// The state is exactly the page's: a hash at rate-limit:<ip>:<endpoint> with queue_size and
// last_leak_time (unix ms), expiring after rate-limit.redis.ttl.
TEST_F(RedisStoreTest, HashAndTtlAreAsThePageSays) {
    auto cfg = config(5, 0.2, "police"); // one slot every 5 s: nothing leaks during the test
    cfg.redis_ttl = "45s";               // not the default, so the TTL is provably the config's
    sluice_process sluice(cfg.yaml());
    wait_ready(sluice);

    EXPECT_EQ(get(sluice.port(), "/hash-check").status, 200u);
    EXPECT_EQ(get(sluice.port(), "/hash-check?second").status, 200u);

    resp_client cli(redis_->port());
    const std::string key = page_key("/hash-check");
    EXPECT_EQ(cli.command({"TYPE", key}).text, "hash");
    const auto keys = cli.command({"KEYS", "*"});
    ASSERT_EQ(keys.elements.size(), 1u) << keys.describe();
    EXPECT_EQ(keys.elements[0].text, key);

    auto fields = cli.hgetall(key);
    std::sort(fields.begin(), fields.end());
    ASSERT_EQ(fields.size(), 2u);
    EXPECT_EQ(fields[0].first, "last_leak_time");
    EXPECT_EQ(fields[1].first, "queue_size");
    EXPECT_EQ(fields[1].second, "2"); // two admitted, none leaked
    // The first request set last_leak_time to Redis's now (the queue was empty); the second
    // leaked nothing and left it. So it lies at most a few seconds before TIME, never after.
    const double last_leak = std::stod(fields[0].second);
    const auto now_ms = static_cast<double>(cli.time_ms());
    EXPECT_LE(last_leak, now_ms);
    EXPECT_GE(last_leak, now_ms - 5000);

    // PEXPIRE ttl on every write: 0 < PTTL <= 45 s, and it was set a moment ago.
    const auto pttl = cli.command({"PTTL", key});
    ASSERT_EQ(pttl.type, resp_value::kind::integer) << pttl.describe();
    EXPECT_GT(pttl.integer, 45'000 - 5'000);
    EXPECT_LE(pttl.integer, 45'000);
}

// SCRIPT FLUSH under traffic: sluice reloads its script (NOSCRIPT → EVAL) and no client sees an
// error, while the limit keeps working.
TEST_F(RedisStoreTest, ScriptFlushMidTrafficIsInvisible) {
    sluice_process sluice(config(5, 10, "police").yaml());
    wait_ready(sluice);
    const auto admin = admin_port(sluice);

    traffic clients({sluice.port(), sluice.port()}, "/flush", 10ms);
    const auto start = clock_type::now();
    ASSERT_TRUE(eventually([&] { return clients.completed_since(start) >= 20; }, 10s));
    resp_client cli(redis_->port());
    const auto first_flush = clock_type::now();
    for (int i = 0; i < 10; ++i) {
        const auto reply = cli.command({"SCRIPT", "FLUSH"});
        EXPECT_EQ(reply.text, "OK") << reply.describe();
        // Let some requests through between flushes (a count, not a pause).
        const auto flushed = clock_type::now();
        ASSERT_TRUE(eventually([&] { return clients.completed_since(flushed) >= 4; }, 10s));
    }
    const auto results = clients.stop();

    long long admitted = 0;
    long long rejected_after_flush = 0;
    long long other = 0;
    for (const auto& e : results) {
        admitted += e.status == 200 ? 1 : 0;
        rejected_after_flush += (e.status == 429 && e.sent >= first_flush) ? 1 : 0;
        other += (e.status == 200 || e.status == 429) ? 0 : 1;
    }
    EXPECT_EQ(other, 0) << statuses_of(results);
    EXPECT_GT(admitted, 0);
    // 200 requests per second against flowRate 10: the limit still rejects after the flushes.
    EXPECT_GT(rejected_after_flush, 0);
    const auto metrics = scrape_metrics(admin);
    RecordProperty("store_errors",
                   static_cast<int>(metric_or_zero(metrics, "sluice_store_errors_total")));
}

// ---------------------------------------------------------------------------------------------
// Redis killed under traffic, then restarted on the same port, in each failure mode.

constexpr std::int64_t outage_capacity = 5;
constexpr double outage_flow_rate = 2; // one slot every 500 ms
constexpr auto outage_slot = 500ms;
constexpr auto redis_timeout = 50ms;
// The Redis client never queues a command while disconnected: it fails at once, or after the
// command timeout when the connection dies under it. So a request waits at most the timeout;
// 1 s on top covers scheduling on a loaded two-core machine (a held decision would take far
// longer: there is no shaping in these tests).
constexpr auto latency_bound = redis_timeout + 1s;

/**
 * One round of probes: `probes` connections (spread over sluice's workers by the kernel), each
 * sending capacity + 2 requests to its own fresh endpoint. True when every probe saw a 429 and
 * no other error, and every endpoint's key is in Redis: the limit is enforced through Redis on
 * each connection's worker.
 */
bool enforced_through_redis(std::uint16_t port,
                            std::uint16_t redis_port,
                            const std::string& round,
                            int probes = 6) {
    try {
        resp_client cli(redis_port);
        for (int p = 0; p < probes; ++p) {
            const std::string path = "/probe-" + round + "-" + std::to_string(p);
            http_connection connection(port, 5s);
            bool rejected = false;
            for (std::int64_t i = 0; i < outage_capacity + 2; ++i) {
                connection.send("GET", path);
                const auto status = connection.read_response().status;
                if (status != 200 && status != 429) {
                    return false;
                }
                rejected = rejected || status == 429;
            }
            if (!rejected || !cli.exists(page_key(path))) {
                return false;
            }
        }
        return true;
    } catch (const std::exception&) {
        return false; // Redis not up yet, or a connection reset: try again
    }
}

/// The test name suffix: the parameter itself ("memory", "open", ...).
std::string param_name(const testing::TestParamInfo<std::string>& param) {
    return param.param;
}

class RedisOutageTest : public RedisStoreTest, public testing::WithParamInterface<std::string> {};

TEST_P(RedisOutageTest, KilledUnderTrafficThenRestarted) {
    const std::string mode = GetParam();
    auto cfg = config(outage_capacity, outage_flow_rate, "police");
    cfg.redis_timeout = "50ms";
    cfg.failure_mode = mode;
    sluice_process sluice(cfg.yaml());
    int round = 0;
    ASSERT_TRUE(eventually(
        [&] {
            return enforced_through_redis(sluice.port(), redis_->port(), std::to_string(++round));
        },
        15s))
        << "never enforced through Redis at start-up";

    // Two clients at 50 requests per second each against flowRate 2: mostly 429s while Redis
    // decides; the failure mode's answers while it is gone.
    traffic clients({sluice.port(), sluice.port()}, "/flow", 20ms);
    const auto start = clock_type::now();
    ASSERT_TRUE(eventually([&] { return clients.completed_since(start) >= 10; }, 10s));

    redis_->stop();
    const auto down = clock_type::now();
    // About a second of outage (100 requests at 100 per second): long enough for the Redis
    // client to go through several reconnect attempts and back off.
    ASSERT_TRUE(eventually([&] { return clients.completed_since(down) >= 100; }, 20s));

    // A burst on a fresh endpoint during the outage, one request after another.
    std::vector<unsigned> outage_statuses;
    std::vector<std::string> outage_retry_after;
    const auto burst_start = clock_type::now();
    {
        http_connection connection(sluice.port(), 5s);
        for (std::int64_t i = 0; i < outage_capacity + 3; ++i) {
            connection.send("GET", "/outage");
            const auto response = connection.read_response();
            outage_statuses.push_back(response.status);
            outage_retry_after.push_back(response.header("Retry-After").value_or(""));
        }
    }
    const auto burst_span = clock_type::now() - burst_start;

    const auto up = clock_type::now();
    redis_->restart();
    const auto restarted = clock_type::now();
    const bool back = eventually(
        [&] {
            return enforced_through_redis(sluice.port(), redis_->port(), std::to_string(++round));
        },
        20s,
        50ms);
    const auto reenforced = clock_type::now();
    const auto results = clients.stop();
    EXPECT_TRUE(back) << "limits not enforced through Redis again within 20 s of the restart";
    RecordProperty(
        "reenforced_after_ms",
        static_cast<int>(std::chrono::duration_cast<milliseconds>(reenforced - restarted).count()));

    // sluice survived all of it.
    EXPECT_FALSE(sluice.wait_exit(0ms)) << "sluice exited";

    // Every request was answered, promptly, with what the mode allows.
    const std::set<unsigned> allowed =
        mode == "closed" ? std::set<unsigned>{200, 429, 503} : std::set<unsigned>{200, 429};
    milliseconds slowest{0};
    long long unexpected = 0;
    long long in_outage = 0;
    long long outage_429 = 0;
    long long outage_wrong = 0;
    for (const auto& e : results) {
        slowest = std::max(slowest, e.latency());
        unexpected += allowed.count(e.status) ? 0 : 1;
        if (e.status == 503) {
            unexpected += e.retry_after.value_or("").empty() ? 1 : 0;
        }
        // Sent after Redis died and answered before it was started again.
        if (e.sent >= down && e.received <= up) {
            ++in_outage;
            outage_429 += e.status == 429 ? 1 : 0;
            const bool right = mode == "open"     ? e.status == 200
                               : mode == "closed" ? e.status == 503
                                                  : (e.status == 200 || e.status == 429);
            outage_wrong += right ? 0 : 1;
        }
    }
    EXPECT_EQ(unexpected, 0) << statuses_of(results);
    EXPECT_LE(slowest, latency_bound);
    EXPECT_GE(in_outage, 50);
    EXPECT_EQ(outage_wrong, 0) << statuses_of(results);

    const auto count = [&](unsigned status) {
        return std::count(outage_statuses.begin(), outage_statuses.end(), status);
    };
    const auto n = static_cast<long long>(outage_statuses.size());
    if (mode == "open") {
        // Forwarded: nothing can decide, so nothing is refused.
        EXPECT_EQ(count(200), n);
    } else if (mode == "closed") {
        EXPECT_EQ(count(503), n);
        for (const auto& value : outage_retry_after) {
            EXPECT_FALSE(value.empty()) << "503 without Retry-After";
            EXPECT_GE(std::stoll(value.empty() ? "0" : value), 1);
        }
    } else {
        // Decided in memory: capacity worth of 200s, then 429s. A slot leaks every 500 ms, so a
        // burst of length `burst_span` may admit floor(burst_span / 500 ms) more.
        EXPECT_GE(count(200), outage_capacity);
        EXPECT_LE(count(200), outage_capacity + slots_in(burst_span, outage_slot));
        EXPECT_EQ(count(200) + count(429), n);
        // The flow (100 per second against flowRate 2) was limited locally too.
        EXPECT_GT(outage_429, 0);
    }
}

INSTANTIATE_TEST_SUITE_P(FailureModes,
                         RedisOutageTest,
                         testing::Values("open", "closed", "local"),
                         param_name);

} // namespace
} // namespace sluice::test
