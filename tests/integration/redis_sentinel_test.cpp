// SPDX-License-Identifier: Apache-2.0
// The Redis store behind Sentinel end to end (issue 16, slice 6): the real binary in front of a
// recording upstream, a primary, its replica and three Sentinels (tests/support/redis_sentinel).
// sluice finds the primary, enforces there, follows SENTINEL FAILOVER and a killed primary under
// traffic within the 10 s with the failure mode meanwhile and no request waiting past
// its timeout, and never uses a restarted old primary that still calls itself master.

#include "integration_util.hpp"
#include "support/limited_sluice.hpp"
#include "support/redis_sentinel.hpp"
#include "support/resp_client.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <sys/wait.h>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using clock_type = std::chrono::steady_clock;

/// Requests a key admits per window; the window is an hour, so that no probe straddles two.
constexpr std::int64_t window_limit = 3;
constexpr auto redis_timeout = 200ms;
/// A request waits for its decision at most `timeout`: the client's per-command deadline
/// covers a command held during a connection's set-up too, and a retarget ends the commands
/// pending on the old primary at once. 1 s on top covers scheduling on a loaded two-core machine
/// (RedisOutageTest's bound, for the same reason).
constexpr auto latency_bound = redis_timeout + 1s;
/// The bound for following a failover.
constexpr auto follow_bound = 10s;

std::string sentinel_yaml(const std::string& upstream_url,
                          const std::vector<config::endpoint_address>& sentinels,
                          const std::string& failure_mode,
                          const std::string& master = redis_sentinel::master_name) {
    std::string nodes;
    for (const auto& s : sentinels) {
        nodes += (nodes.empty() ? "" : ", ") + config::format_address(s);
    }
    return fmt::format("server:\n"
                       "  listen: \"127.0.0.1:0\"\n"
                       "  workers: 2\n"
                       "upstream:\n"
                       "  url: \"{}\"\n"
                       "rate-limit:\n"
                       "  store: redis\n"
                       // A CONCURRENCY limit that may make requests wait: the freed-slot
                       // subscriber runs, and must follow the primary too.
                       "  rules:\n"
                       "    - name: slots\n"
                       "      match: {{ path: /slots }}\n"
                       "      limits:\n"
                       "        - {{ algorithm: CONCURRENCY, limit: 1, key: [global] }}\n"
                       "  fallback:\n"
                       "    algorithm: FIXED_WINDOW\n"
                       "    limit: {}\n"
                       "    window: 3600s\n"
                       "  redis:\n"
                       "    sentinel:\n"
                       "      master: {}\n"
                       "      nodes: [{}]\n"
                       "    timeout: {}ms\n"
                       "    connect-timeout: 500ms\n"
                       "    failure-mode: {}\n"
                       "logging:\n"
                       "  level: info\n"
                       "admin:\n"
                       "  listen: \"127.0.0.1:0\"\n",
                       upstream_url,
                       window_limit,
                       master,
                       nodes,
                       redis_timeout.count(),
                       failure_mode);
}

/**
 * One round of probes: `probes` connections (spread over the workers by the kernel), each
 * sending window_limit + 2 requests to its own fresh path. True when each saw exactly
 * window_limit 200s and then 429s, its key is on the server at `primary`, and not on the one at
 * `not_on` (when given): the limit is enforced on that primary and only there.
 */
bool enforced_on(std::uint16_t port,
                 std::uint16_t primary,
                 std::optional<std::uint16_t> not_on,
                 const std::string& round,
                 int probes = 4) {
    try {
        resp_client on_primary(primary);
        std::optional<resp_client> elsewhere;
        if (not_on) {
            elsewhere.emplace(*not_on);
        }
        for (int p = 0; p < probes; ++p) {
            const std::string path = "/probe-" + round + "-" + std::to_string(p);
            http_connection connection(port, 5s);
            for (std::int64_t i = 0; i < window_limit + 2; ++i) {
                connection.send("GET", path);
                const auto status = connection.read_response().status;
                if (status != (i < window_limit ? 200u : 429u)) {
                    return false;
                }
            }
            if (!on_primary.exists(page_key(path)) ||
                (elsewhere && elsewhere->exists(page_key(path)))) {
                return false;
            }
        }
        return true;
    } catch (const std::exception&) {
        return false; // a connection reset, a server not up: try again
    }
}

/// Subscribers of the freed-slot channel on the server at `port` (-1 when it cannot tell).
long long slot_subscribers(std::uint16_t port) {
    try {
        resp_client cli(port);
        const auto r = cli.command({"PUBSUB", "NUMSUB", "sluice:slot-freed:0"});
        return r.elements.size() == 2 ? r.elements[1].integer : -1;
    } catch (const std::exception&) {
        return -1;
    }
}

/// How many script calls the server on `port` has run (0 when it ran none).
std::int64_t script_calls(std::uint16_t port) {
    resp_client cli(port);
    return script_calls_in(cli.command({"INFO", "commandstats"}).text);
}

class RedisSentinelTest : public testing::Test {
protected:
    void SetUp() override {
        if (!redis_sentinel::available()) {
            GTEST_SKIP() << "redis-server is not installed";
        }
        deployment_ = std::make_unique<redis_sentinel>();
    }

    std::string yaml(const std::string& failure_mode = "closed",
                     const std::string& master = redis_sentinel::master_name) const {
        return sentinel_yaml(
            upstream_.url(), deployment_->sentinel_addresses(), failure_mode, master);
    }

    /// With failure-mode closed, /readyz answers 200 once the primary is known and every worker
    /// is connected to it.
    static void wait_ready(const sluice_process& sluice) {
        const auto admin = admin_port(sluice);
        ASSERT_TRUE(eventually([admin] { return get(admin, "/readyz").status == 200; }, 15s))
            << sluice.log_text();
    }

    std::uint16_t data_port(std::size_t i) { return deployment_->node(i).port(); }

    /**
     * Traffic on /flow while `disturb` fails the primary over (by `SENTINEL failover` or a kill):
     * sluice follows within 10 s, every request is answered with 200, 429 or (closed) a 503 with
     * Retry-After, none waits past the bound, and afterwards the limit holds on the new primary
     * and not on the old (when `old_answers`: it is still up). Returns the exchanges for more
     * checks.
     */
    std::vector<exchange> follow_under_traffic(sluice_process& sluice,
                                               const std::function<void()>& disturb,
                                               bool old_answers,
                                               clock_type::time_point& disturbed,
                                               clock_type::time_point& followed) {
        int round = 0;
        EXPECT_TRUE(eventually(
            [&] {
                return enforced_on(sluice.port(), data_port(0), {}, "a" + std::to_string(++round));
            },
            10s))
            << "never enforced on the primary at start-up\n"
            << sluice.log_text();

        traffic clients({sluice.port(), sluice.port()}, "/flow", 20ms);
        const auto start = clock_type::now();
        EXPECT_TRUE(eventually([&] { return clients.completed_since(start) >= 10; }, 10s));

        disturbed = clock_type::now();
        disturb();
        const auto promoted = deployment_->wait_switched(0);
        EXPECT_EQ(promoted, 1u);
        const bool follows = eventually(
            [&] {
                return enforced_on(sluice.port(),
                                   data_port(1),
                                   old_answers ? std::optional(data_port(0)) : std::nullopt,
                                   "b" + std::to_string(++round));
            },
            std::chrono::duration_cast<milliseconds>(follow_bound -
                                                     (clock_type::now() - disturbed)),
            20ms);
        followed = clock_type::now();
        // A little traffic after following too, decided on the new primary.
        const auto after = clock_type::now();
        EXPECT_TRUE(eventually([&] { return clients.completed_since(after) >= 10; }, 10s));
        const auto results = clients.stop();
        EXPECT_TRUE(follows) << "not enforced on the new primary within 10 s\n"
                             << sluice.log_text();

        milliseconds slowest{0};
        long long unexpected = 0;
        for (const auto& e : results) {
            slowest = std::max(slowest, e.latency());
            const bool allowed = e.status == 200 || e.status == 429 ||
                                 (e.status == 503 && !e.retry_after.value_or("").empty());
            unexpected += allowed ? 0 : 1;
        }
        EXPECT_EQ(unexpected, 0) << statuses_of(results);
        EXPECT_LE(slowest, latency_bound) << "a request waited past the timeout";
        RecordProperty("slowest_ms", static_cast<int>(slowest.count()));
        RecordProperty("followed_after_ms",
                       static_cast<int>(
                           std::chrono::duration_cast<milliseconds>(followed - disturbed).count()));
        std::printf("followed %lld ms after the disturbance; slowest request %lld ms\n",
                    static_cast<long long>(
                        std::chrono::duration_cast<milliseconds>(followed - disturbed).count()),
                    static_cast<long long>(slowest.count()));

        // The freed-slot subscriber moved too.
        EXPECT_TRUE(eventually(
            [&] {
                return slot_subscribers(data_port(1)) == 1 &&
                       (!old_answers || slot_subscribers(data_port(0)) == 0);
            },
            5s))
            << "the freed-slot subscriber did not move to the new primary";
        const auto metrics = scrape_metrics(admin_port(sluice));
        EXPECT_EQ(metric_or_zero(metrics, "sluice_redis_failovers_total"), 1.0) << metrics;
        EXPECT_TRUE(sluice.wait_for_log(
            fmt::format("moved from 127.0.0.1:{} to 127.0.0.1:{}", data_port(0), data_port(1)), 1s))
            << sluice.log_text();
        return results;
    }

    std::unique_ptr<redis_sentinel> deployment_;
    recording_upstream upstream_;
};

// sluice on Sentinel starts, says where it found its store, and enforces a FIXED_WINDOW on the
// primary: N admitted, then 429, the key on the primary.
TEST_F(RedisSentinelTest, EnforcesALimitOnThePrimary) {
    sluice_process sluice(yaml());
    wait_ready(sluice);
    EXPECT_TRUE(sluice.wait_for_log(fmt::format("store redis sentinel 'sluice' via 127.0.0.1:{} "
                                                "(+2)",
                                                deployment_->sentinel(0).port()),
                                    1s))
        << sluice.log_text();
    EXPECT_TRUE(sluice.wait_for_log(
        fmt::format("the primary of 'sluice' is 127.0.0.1:{}", data_port(0)), 1s))
        << sluice.log_text();

    http_connection connection(sluice.port(), 5s);
    std::vector<unsigned> statuses;
    for (std::int64_t i = 0; i < window_limit + 2; ++i) {
        connection.send("GET", "/fixed");
        statuses.push_back(connection.read_response().status);
    }
    EXPECT_EQ(statuses, (std::vector<unsigned>{200, 200, 200, 429, 429}));
    resp_client primary(data_port(0));
    EXPECT_TRUE(primary.exists(page_key("/fixed")));
    EXPECT_TRUE(eventually([&] { return slot_subscribers(data_port(0)) == 1; }, 5s))
        << "no freed-slot subscriber on the primary";
    EXPECT_TRUE(enforced_on(sluice.port(), data_port(0), {}, "more"));
    const auto metrics = scrape_metrics(admin_port(sluice));
    EXPECT_EQ(metric_or_zero(metrics, "sluice_redis_failovers_total"), 0.0);

    // The watcher's connections end with the drain: the process exits as on one Redis.
    sluice.send_signal(SIGTERM);
    const auto status = sluice.wait_exit(5s);
    ASSERT_TRUE(status) << "still running 5 s after SIGTERM\n" << sluice.log_text();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << sluice.log_text();
}

// A name the Sentinels do not monitor: no primary, so under failure-mode closed sluice is not
// ready and answers 503 at once, and says why.
TEST_F(RedisSentinelTest, NotReadyWhileNoSentinelNamesThePrimary) {
    sluice_process sluice(yaml("closed", "elsewhere"));
    const auto admin = admin_port(sluice);
    EXPECT_TRUE(sluice.wait_for_log("does not know the primary of 'elsewhere'", 5s))
        << sluice.log_text();
    EXPECT_EQ(get(admin, "/readyz").status, 503u);
    const auto response = get(sluice.port(), "/nowhere");
    EXPECT_EQ(response.status, 503u);
    EXPECT_TRUE(response.header("Retry-After")) << "a 503 of failure-mode closed";
    EXPECT_FALSE(upstream_.wait_for_count(1, 0ms));
}

// SENTINEL FAILOVER under traffic. The old primary goes on answering ROLE master (and taking
// writes) for seconds after the switch: sluice must go where the Sentinels say, so no probe key
// may appear on it.
TEST_F(RedisSentinelTest, FollowsSentinelFailoverUnderTraffic) {
    sluice_process sluice(yaml());
    wait_ready(sluice);
    clock_type::time_point disturbed;
    clock_type::time_point followed;
    follow_under_traffic(
        sluice, [&] { deployment_->failover(); }, true, disturbed, followed);
    wait_ready(sluice);
}

// kill -9 of the primary under traffic: while no primary answers, failure-mode closed answers
// 503 at once (a refused connection fails a call without waiting); then sluice follows.
TEST_F(RedisSentinelTest, FollowsAKilledPrimaryUnderTraffic) {
    sluice_process sluice(yaml());
    wait_ready(sluice);
    clock_type::time_point disturbed;
    clock_type::time_point followed;
    const auto results = follow_under_traffic(
        sluice, [&] { deployment_->node(0).stop(); }, false, disturbed, followed);
    long long in_outage_503 = 0;
    for (const auto& e : results) {
        in_outage_503 += (e.sent >= disturbed && e.received <= followed && e.status == 503) ? 1 : 0;
    }
    // The promotion alone takes over a second (down-after-milliseconds 1000): requests at 100
    // per second meet the failure mode meanwhile.
    EXPECT_GT(in_outage_503, 0) << statuses_of(results);
    wait_ready(sluice);
}

// The killed primary restarted: for seconds it answers ROLE master (it knows nothing of the
// switch), but the Sentinels name its replica. Neither the running sluice nor one started now
// uses it.
TEST_F(RedisSentinelTest, ARestartedOldPrimaryIsNotUsed) {
    sluice_process sluice(yaml());
    wait_ready(sluice);
    deployment_->node(0).stop();
    ASSERT_EQ(deployment_->wait_switched(0), 1u);
    int round = 0;
    ASSERT_TRUE(eventually(
        [&] { return enforced_on(sluice.port(), data_port(1), {}, "a" + std::to_string(++round)); },
        10s))
        << sluice.log_text();

    deployment_->node(0).restart();
    resp_client old_primary(data_port(0));
    const auto role = old_primary.command({"ROLE"});
    ASSERT_FALSE(role.elements.empty()) << role.describe();
    if (role.elements[0].text != "master") {
        GTEST_SKIP() << "the Sentinels reconfigured the old primary before the test could look";
    }

    sluice_process late(yaml());
    wait_ready(late);
    for (auto* s : {&sluice, &late}) {
        EXPECT_TRUE(enforced_on(s->port(), data_port(1), {}, "b" + std::to_string(++round)))
            << s->log_text();
    }
    // Script calls reach a replica only as their effects, so any one counted on the old primary
    // came from a sluice.
    EXPECT_EQ(script_calls(data_port(0)), 0);
    EXPECT_TRUE(sluice.wait_for_log(
        fmt::format("the primary of 'sluice' is 127.0.0.1:{}", data_port(0)), 0ms));
    EXPECT_TRUE(late.wait_for_log(
        fmt::format("the primary of 'sluice' is 127.0.0.1:{}", data_port(1)), 0ms))
        << late.log_text();
}

} // namespace
} // namespace sluice::test
