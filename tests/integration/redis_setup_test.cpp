// SPDX-License-Identifier: Apache-2.0
// A Redis that accepts connections but refuses their set-up (issue 12), on the real binary with
// two workers: a wrong password is reported once as an authentication failure, with nothing sent
// after the refused AUTH (no SCRIPT LOAD); an ACL user denied scripts gets its SCRIPT LOAD refusal
// reported once. Either way sluice reconnects no faster than its backoff allows (counted by Redis
// itself), and logs each distinct error at most once per 10 s.

#include "integration_util.hpp"
#include "sluice/redis/backoff.hpp"
#include "sluice/redis/client.hpp"
#include "support/limit_probe.hpp"
#include "support/redis_server.hpp"
#include "support/resp_client.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>
#include <thread>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

constexpr int workers = 2;
/// How long the reconnections are counted.
constexpr milliseconds window{3000};
/// The interval at which a distinct error may be logged again.
constexpr milliseconds log_interval{10'000};

/// A config with two workers on the Redis store at 127.0.0.1:`port` with `credentials` (YAML
/// lines under `redis:`), failing open so that the proxy keeps serving meanwhile.
std::string
refused_yaml(const std::string& upstream_url, std::uint16_t port, const std::string& credentials) {
    return compose_yaml(upstream_url,
                        fmt::format("  fallback: {{ capacity: 1000000, flowRate: 100000 }}\n"
                                    "  store: redis\n"
                                    "  redis:\n"
                                    "    host: 127.0.0.1\n"
                                    "    port: {}\n"
                                    "    failure-mode: open\n"
                                    "{}",
                                    port,
                                    credentials),
                        fmt::format("  workers: {}\n", workers));
}

/// INFO stats' total_connections_received.
long long connections_received(resp_client& cli) {
    return test::info_count(cli.command({"INFO", "stats"}).text, "total_connections_received:");
}

/// The log lines that contain `text`.
int lines_with(const std::string& log, const std::string& text) {
    std::istringstream in(log);
    int count = 0;
    for (std::string line; std::getline(in, line);) {
        count += line.find(text) != std::string::npos ? 1 : 0;
    }
    return count;
}

/**
 * Counts the connections Redis receives over `window` (through `cli`, connected already so that
 * its own connection is not counted) and checks them against the most the workers' backoff
 * allows, derived from the client's default schedule. Returns the time the count took.
 */
milliseconds expect_reconnects_within_backoff(resp_client& cli) {
    const auto start = steady::now();
    const auto before = connections_received(cli);
    // The measurement interval itself: nothing to wait for, the count is what happens in it.
    std::this_thread::sleep_for(window);
    const auto after = connections_received(cli);
    const auto measured = std::chrono::ceil<milliseconds>(steady::now() - start);
    const redis::client_options defaults;
    const auto most = workers * redis::most_attempts_within(
                                    measured, defaults.reconnect_min, defaults.reconnect_max);
    const auto made = after - before;
    EXPECT_GE(made, 1) << "sluice stopped retrying";
    EXPECT_LE(made, most) << made << " connections in " << measured.count()
                          << " ms: faster than the backoff allows";
    testing::Test::RecordProperty("connections_in_window", static_cast<int>(made));
    testing::Test::RecordProperty("most_allowed", static_cast<int>(most));
    return measured;
}

class RedisStoreTestSetUp : public testing::Test {
protected:
    void SetUp() override {
        if (!redis_server::available()) {
            GTEST_SKIP() << "redis-server is not installed";
        }
    }

    recording_upstream upstream_;
};

TEST_F(RedisStoreTestSetUp, WrongPasswordIsReportedOnceAndRetriedOnTheBackoff) {
    const std::string right = "the-right-password";
    const std::string wrong = "wrong-password-x7q";
    redis_server redis({.requirepass = right});
    sluice_process sluice(
        refused_yaml(upstream_.url(), redis.port(), fmt::format("    password: {}\n", wrong)));
    const std::string line = "redis: authentication failed for user default";
    ASSERT_TRUE(sluice.wait_for_log(line, 10s)) << sluice.log_text();
    const auto first_seen = steady::now();

    resp_client cli(redis.port());
    ASSERT_EQ(cli.command({"AUTH", right}).text, "OK");
    expect_reconnects_within_backoff(cli);

    // The proxy still serves, failing open.
    EXPECT_EQ(get(sluice.port(), "/open").status, 200u);

    const auto log = sluice.log_text();
    const auto elapsed = steady::now() - first_seen;
    // Once, plus one line with the repeat count per full interval since.
    EXPECT_GE(lines_with(log, line), 1) << log;
    EXPECT_LE(lines_with(log, line), 1 + elapsed / log_interval) << log;
    EXPECT_EQ(lines_with(log, "redis: "), lines_with(log, line)) << "other Redis lines:\n" << log;
    EXPECT_EQ(log.find("SCRIPT LOAD"), std::string::npos) << "sent after the refused AUTH:\n"
                                                          << log;
    EXPECT_EQ(log.find(wrong), std::string::npos) << "the password is in the log";
}

TEST_F(RedisStoreTestSetUp, UserDeniedScriptsIsReportedOnceAndRetriedOnTheBackoff) {
    redis_server redis;
    resp_client cli(redis.port());
    // Allowed to connect and to run anything but scripts: SCRIPT LOAD is refused (NOPERM).
    const auto created = cli.command(
        {"ACL", "SETUSER", "limiter", "on", ">limiter-pw", "~*", "+@all", "-@scripting"});
    ASSERT_EQ(created.text, "OK") << created.describe();
    sluice_process sluice(refused_yaml(
        upstream_.url(), redis.port(), "    username: limiter\n    password: limiter-pw\n"));
    const std::string line = "redis: SCRIPT LOAD failed on 127.0.0.1:";
    ASSERT_TRUE(sluice.wait_for_log(line, 10s)) << sluice.log_text();
    const auto first_seen = steady::now();

    expect_reconnects_within_backoff(cli);

    const auto log = sluice.log_text();
    const auto elapsed = steady::now() - first_seen;
    EXPECT_LE(lines_with(log, line), 1 + elapsed / log_interval) << log;
    EXPECT_NE(log.find("NOPERM"), std::string::npos) << "Redis's reason is not in the log:\n"
                                                     << log;
    EXPECT_EQ(lines_with(log, "redis: "), lines_with(log, line)) << "other Redis lines:\n" << log;
    EXPECT_EQ(log.find("limiter-pw"), std::string::npos) << "the password is in the log";
}

} // namespace
} // namespace sluice::test
