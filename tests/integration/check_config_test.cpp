// SPDX-License-Identifier: Apache-2.0
// `sluice --check-config`: validates a config without serving, names the bad key and its line.

#include "integration_util.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

/// The 1-based line of the first line of `text` containing `needle`.
int line_of(const std::string& text, const std::string& needle) {
    const auto at = text.find(needle);
    return at == std::string::npos
               ? 0
               : 1 + static_cast<int>(std::count(text.begin(), text.begin() + at, '\n'));
}

/// Whether one line of `output` reads like "FILE:LINE: ... KEY ..." (config_error's format).
bool names_key_at_line(const std::string& output, const std::string& key, int line) {
    std::istringstream lines(output);
    const std::string mark = ":" + std::to_string(line) + ":";
    for (std::string text; std::getline(lines, text);) {
        const auto at = text.find(mark);
        if (at != std::string::npos && text.find(key, at) != std::string::npos) {
            return true;
        }
    }
    return false;
}

command_result check_config(const temp_dir& dir, const std::string& yaml) {
    const std::string path = dir.write_file("check.yaml", yaml);
    return run_command(sluice_binary(), {"--check-config", "--config", path}, 10s);
}

sluice_config valid_config() {
    sluice_config config;
    config.upstream_url = "http://127.0.0.1:9";
    return config;
}

TEST(CheckConfig, GoodConfigExitsZero) {
    temp_dir dir;
    const command_result result = check_config(dir, valid_config().yaml());
    ASSERT_FALSE(result.timed_out) << "--check-config must not start serving";
    EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST(CheckConfig, BadValueExitsNonZeroNamingKeyAndLine) {
    temp_dir dir;
    sluice_config config = valid_config();
    config.capacity = -5;
    const std::string yaml = config.yaml();
    const int line = line_of(yaml, "capacity: -5");
    ASSERT_GT(line, 0);

    const command_result result = check_config(dir, yaml);
    ASSERT_FALSE(result.timed_out);
    ASSERT_TRUE(result.exit_code) << "killed by a signal: " << result.status;
    EXPECT_NE(*result.exit_code, 0);
    EXPECT_TRUE(names_key_at_line(result.output, "rate-limit.fallback.capacity", line))
        << "expected line " << line << " and the key on one line of:\n"
        << result.output;
}

/// A limit written wrong, the key its message must name, and a word of the explanation.
struct limit_mistake {
    std::string limit; // the limit's flow mapping
    std::string key;
    std::string words;
};

// Each mistake is refused on its own, naming its key and its line.
void expect_each_refused_naming_key_and_line(const std::vector<limit_mistake>& mistakes) {
    temp_dir dir;
    for (const auto& m : mistakes) {
        SCOPED_TRACE(m.limit);
        const std::string yaml = "upstream:\n  url: http://127.0.0.1:9\nrate-limit:\n  rules:\n"
                                 "    - name: slots\n      match: { path: /v1/* }\n      limits:\n"
                                 "        - " +
                                 m.limit + "\n";
        const command_result result = check_config(dir, yaml);
        ASSERT_FALSE(result.timed_out);
        ASSERT_TRUE(result.exit_code) << "killed by a signal: " << result.status;
        EXPECT_NE(*result.exit_code, 0) << result.output;
        EXPECT_TRUE(names_key_at_line(
            result.output, "rate-limit.rules[0].limits[0]." + m.key, line_of(yaml, m.limit)))
            << result.output;
        EXPECT_NE(result.output.find(m.words), std::string::npos) << result.output;
    }
}

// CONCURRENCY's bad inputs (issue 14).
TEST(CheckConfig, ConcurrencyMistakesNameTheKeyAndLine) {
    expect_each_refused_naming_key_and_line({
        {"{ algorithm: CONCURRENCY, limit: 0 }", "limit", "an integer between 1"},
        {"{ algorithm: CONCURRENCY, limit: 4, lease: -30s }", "lease", "duration > 0"},
        {"{ algorithm: CONCURRENCY, limit: 4, lease: 200ms }", "lease", "at least 1s"},
        {"{ algorithm: CONCURRENCY, limit: 4, mode: police, max-delay: 5s }",
         "max-delay",
         "police"},
        {"{ algorithm: CONCURRENCY, limit: 4, capacity: 50 }", "capacity", "does not apply"},
        {"{ algorithm: CONCURRENCY, limit: 4, flowRate: 5 }", "flowRate", "does not apply"},
        {"{ algorithm: CONCURRENCY }", "limit", "CONCURRENCY takes limit"},
        {"{ algorithm: LEAKY_BUCKET, capacity: 5, flowRate: 1, lease: 30s }",
         "lease",
         "only to CONCURRENCY"},
    });
}

// The cost block's bad inputs (issue 15).
TEST(CheckConfig, CostMistakesNameTheKeyAndLine) {
    const std::string bucket = "algorithm: TOKEN_BUCKET, capacity: 100, refillRate: 10, ";
    expect_each_refused_naming_key_and_line({
        {"{ algorithm: CONCURRENCY, limit: 4, cost: { request: 2 } }", "cost", "a slot is a slot"},
        {"{ " + bucket + "cost: { request: body:max_tokens } }",
         "cost.request",
         "a number, header:NAME or json:PATH"},
        {"{ " + bucket + "cost: { request: json:usage..total } }",
         "cost.request",
         "a dotted path into a JSON body"},
        {"{ " + bucket + "cost: { request: 2, response: \"json:\" } }",
         "cost.response",
         "a dotted path into a JSON body"},
        {"{ " + bucket + "cost: { request: json:max_tokens, max-body: 0 } }",
         "cost.max-body",
         "between"},
        {"{ " + bucket + "key: [\"json:a.\"] }", "key[0]", "a dotted path into a JSON body"},
        {"{ " + bucket + "cost: { request: header:X-Cost, default: -5 } }",
         "cost.default",
         "an integer between 0"},
        {"{ " + bucket + "cost: { request: 0 } }", "cost.request", "an integer between 1"},
        {"{ " + bucket + "cost: { request: 2, response: 5 } }",
         "cost.response",
         "header:NAME or json:PATH"},
        {"{ " + bucket + "cost: { request: 2, on-missing: refund } }",
         "cost.on-missing",
         "only with a response source"},
        {"{ " + bucket + "cost: { request: 2, response: header:X-Usage, on-missing: drop } }",
         "cost.on-missing",
         "keep"},
        {"{ " + bucket + "cost: { default: 5 } }", "cost.request", "required"},
        {"{ " + bucket + "cost: { request: 2, colour: red } }", "cost.colour", "unknown"},
    });
}

// rate-limit.redis's topologies (issue 16): --check-config refuses two at once, an empty node
// list and a malformed address, naming the key and its line; a valid Cluster or Sentinel file
// passes it.
TEST(CheckConfig, RedisTopologyMistakesNameTheKeyAndLine) {
    temp_dir dir;
    const std::string head = "upstream:\n  url: http://127.0.0.1:9\nrate-limit:\n  store: redis\n"
                             "  redis:\n";

    const struct {
        std::string lines;
        std::string key;
        std::string needle; // the offending line
        std::string words;
    } mistakes[] = {
        {"    host: 10.0.0.1\n    cluster: [10.0.0.5:6379]\n",
         "rate-limit.redis.cluster",
         "cluster:",
         "only one of host, cluster and sentinel"},
        {"    cluster: []\n", "rate-limit.redis.cluster", "cluster:", "at least one node"},
        {"    cluster:\n      - 10.0.0.5\n      - \"10.0.0.6:\"\n",
         "rate-limit.redis.cluster[1]",
         "10.0.0.6:",
         "the port is missing"},
        {"    sentinel:\n      master: sluice\n      nodes: []\n",
         "rate-limit.redis.sentinel.nodes",
         "nodes:",
         "at least one node"},
    };

    for (const auto& m : mistakes) {
        SCOPED_TRACE(m.lines);
        const std::string yaml = head + m.lines;
        const command_result result = check_config(dir, yaml);
        ASSERT_FALSE(result.timed_out);
        ASSERT_TRUE(result.exit_code) << "killed by a signal: " << result.status;
        EXPECT_NE(*result.exit_code, 0) << result.output;
        EXPECT_TRUE(names_key_at_line(result.output, m.key, line_of(yaml, m.needle)))
            << result.output;
        EXPECT_NE(result.output.find(m.words), std::string::npos) << result.output;
    }

    // Valid Cluster and Sentinel files pass (sluice starts with both: RedisClusterStore.* and
    // RedisSentinelTest.* run them).
    for (const std::string topology :
         {"    cluster: [127.0.0.1:9]\n", "    sentinel: { master: m, nodes: [127.0.0.1:9] }\n"}) {
        SCOPED_TRACE(topology);
        const auto checked = run_command(
            sluice_binary(),
            {"--check-config", "--config", dir.write_file("topology.yaml", head + topology)},
            10s);
        ASSERT_FALSE(checked.timed_out);
        EXPECT_EQ(checked.exit_code, 0) << checked.output;
    }
}

TEST(CheckConfig, UnknownKeyExitsNonZeroNamingKeyAndLine) {
    temp_dir dir;
    std::string yaml = valid_config().yaml();
    yaml.insert(yaml.find("upstream:"), "  liste: 127.0.0.1:1\n");
    const int line = line_of(yaml, "liste:");

    const command_result result = check_config(dir, yaml);
    ASSERT_FALSE(result.timed_out);
    ASSERT_TRUE(result.exit_code) << "killed by a signal: " << result.status;
    EXPECT_NE(*result.exit_code, 0);
    EXPECT_TRUE(names_key_at_line(result.output, "server.liste", line))
        << "expected line " << line << " and the key on one line of:\n"
        << result.output;
}

} // namespace
} // namespace sluice::test
