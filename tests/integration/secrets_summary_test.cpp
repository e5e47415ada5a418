// SPDX-License-Identifier: Apache-2.0
// What sluice says about its configuration: the start-up summary names the Redis address, the
// trusted proxies and the fallback's max-delay, and neither the summary nor --check-config ever
// prints the Redis password (read from password-file or written inline).

#include "integration_util.hpp"
#include "support/limited_sluice.hpp"
#include "support/redis_server.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <string>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

const std::string secret = "Zq7-never-print-me";

std::string redis_yaml(const std::string& upstream,
                       std::uint16_t redis_port,
                       const std::string& password_line) {
    return fmt::format(R"(server:
  listen: 127.0.0.1:0
  trusted-proxies: [10.0.0.0/8, 192.168.1.7]
upstream:
  url: {}
rate-limit:
  store: redis
  fallback: {{ algorithm: LEAKY_BUCKET, capacity: 10, flowRate: 5r/s, mode: shape, max-delay: 1500ms }}
  redis:
    host: 127.0.0.1
    failure-mode: closed
    port: {}
    {}
logging:
  level: info
)",
                       upstream,
                       redis_port,
                       password_line);
}

TEST(SecretsSummary, StartupSummaryNamesRedisProxiesAndMaxDelayButNotThePassword) {
    if (!redis_server::available()) {
        GTEST_SKIP() << "redis-server is not installed";
    }
    redis_server::options options;
    options.requirepass = secret;
    redis_server redis(options);
    recording_upstream upstream;
    temp_dir dir;
    const auto file = dir.write_file("redis-password", secret + "\n");

    sluice_process sluice(redis_yaml(upstream.url(), redis.port(), "password-file: " + file));
    const std::string log = sluice.log_text();
    const auto start = log.find("sluice starting:");
    ASSERT_NE(start, std::string::npos) << log;
    const auto summary = log.substr(start, log.find('\n', start) - start);
    EXPECT_NE(summary.find(fmt::format("store redis 127.0.0.1:{}", redis.port())),
              std::string::npos)
        << summary;
    EXPECT_NE(summary.find("trusted proxies [10.0.0.0/8 192.168.1.7"), std::string::npos)
        << summary;
    EXPECT_NE(summary.find("max-delay=1500ms"), std::string::npos) << summary;
    EXPECT_EQ(log.find("never-print-me"), std::string::npos) << log;

    // The password from the file reached Redis: under failure-mode closed a request is
    // forwarded only once a worker has authenticated, and answered 503 before.
    EXPECT_TRUE(eventually(
        [&] {
            http_connection client(sluice.port());
            client.send("GET", "/x");
            return client.read_response().status == 200;
        },
        10s))
        << sluice.log_text();
    EXPECT_EQ(sluice.log_text().find("never-print-me"), std::string::npos);
}

TEST(SecretsSummary, ReloadWithAChangedPasswordFileIsRefused) {
    if (!redis_server::available()) {
        GTEST_SKIP() << "redis-server is not installed";
    }
    redis_server::options options;
    options.requirepass = secret;
    redis_server redis(options);
    recording_upstream upstream;
    temp_dir dir;
    const auto file = dir.write_file("redis-password", secret + "\n");
    sluice_process sluice(redis_yaml(upstream.url(), redis.port(), "password-file: " + file));

    // The file is read again on reload; the connections were made with the old password, so a
    // new one needs a restart, exactly as a changed `password` does.
    dir.write_file("redis-password", "rotated-never-print-me\n");
    sluice.send_signal(SIGHUP);
    ASSERT_TRUE(sluice.wait_for_log("reload refused", 10s)) << sluice.log_text();
    const auto log = sluice.log_text();
    const auto running_yaml = redis_yaml(upstream.url(), redis.port(), "password-file: " + file);
    EXPECT_NE(log.find("changing rate-limit.redis.password-file (" +
                       where_in(sluice.config_path(), running_yaml, "password-file:") +
                       ") needs a restart"),
              std::string::npos)
        << log;
    EXPECT_EQ(log.find("never-print-me"), std::string::npos) << log;
    EXPECT_EQ(log.find("configuration reloaded"), std::string::npos) << log;

    // Back to the running password: the reload applies.
    dir.write_file("redis-password", secret + "\n");
    sluice.send_signal(SIGHUP);
    EXPECT_TRUE(sluice.wait_for_log("configuration reloaded", 10s)) << sluice.log_text();
}

TEST(SecretsSummary, CheckConfigNeverPrintsThePassword) {
    temp_dir dir;
    const std::vector<std::string> password_lines{
        "password: " + secret,                                       // valid: "configuration ok"
        "password: " + secret + "\n    port: x",                     // another key is wrong
        "password: " + secret + "${",                                // a malformed reference
        "password: " + secret + "${SLUICE_TEST_UNSET_VARIABLE}",     // an unset variable
        "password: [" + secret + "]",                                // the wrong type
        "pasword: " + secret,                                        // a misspelt key
        "password: " + secret + "\n    password-file: /nonexistent", // both set
    };
    for (const auto& line : password_lines) {
        const auto path =
            dir.write_file("check.yaml", redis_yaml("http://127.0.0.1:9", 6379, line));
        const auto result = run_command(sluice_binary(), {"--check-config", "--config", path}, 10s);
        ASSERT_FALSE(result.timed_out);
        EXPECT_EQ(result.output.find("never-print-me"), std::string::npos) << line << ":\n"
                                                                           << result.output;
        EXPECT_TRUE(result.output.find("configuration ok") != std::string::npos ||
                    result.output.find("check.yaml:") != std::string::npos)
            << result.output;
    }
}

} // namespace
} // namespace sluice::test
