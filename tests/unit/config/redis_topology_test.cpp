// SPDX-License-Identifier: Apache-2.0
// rate-limit.redis: one server (`host`), a Redis Cluster (`cluster`) or Sentinel (`sentinel`),
// exactly one of them, and each mistake named by its key and line (docs/redis-cluster.md).
#include "config_test_util.hpp"

#include <gtest/gtest.h>

namespace sluice::config::test {
namespace {

/// `base` plus a redis section whose lines start at line 5 ("rate-limit:" 3, "redis:" 4).
std::string with_redis(std::string_view lines) {
    return base + "rate-limit:\n  redis:\n" + std::string(lines);
}

TEST(RedisTopology, HostIsTheDefault) {
    const auto cfg = load(base);
    EXPECT_EQ(cfg.rate_limit.redis.topology, redis_topology::single);
    EXPECT_TRUE(cfg.rate_limit.redis.cluster.empty());
    EXPECT_EQ(cfg.rate_limit.redis.hash_tag, hash_tag_mode::none);
}

TEST(RedisTopology, ClusterSeedsTakePort6379WhenLeftOut) {
    const auto cfg = load(with_redis("    cluster: [10.0.0.5:7000, Redis-2, \"[::1]:7001\"]\n"
                                     "    hash-tag: ip\n"));
    const auto& r = cfg.rate_limit.redis;
    EXPECT_EQ(r.topology, redis_topology::cluster);
    ASSERT_EQ(r.cluster.size(), 3u);
    EXPECT_EQ(r.cluster[0], (endpoint_address{"10.0.0.5", 7000}));
    EXPECT_EQ(r.cluster[1], (endpoint_address{"redis-2", 6379}));
    EXPECT_EQ(r.cluster[2], (endpoint_address{"::1", 7001}));
    EXPECT_EQ(r.hash_tag, hash_tag_mode::ip);
}

TEST(RedisTopology, SentinelNodesTakePort26379WhenLeftOut) {
    const auto cfg = load(with_redis("    sentinel:\n"
                                     "      master: sluice\n"
                                     "      nodes: [10.0.0.7:26380, 10.0.0.8]\n"
                                     "      password: s3\n"
                                     "    password: data\n"));
    const auto& r = cfg.rate_limit.redis;
    EXPECT_EQ(r.topology, redis_topology::sentinel);
    EXPECT_EQ(r.sentinel.master, "sluice");
    ASSERT_EQ(r.sentinel.nodes.size(), 2u);
    EXPECT_EQ(r.sentinel.nodes[0], (endpoint_address{"10.0.0.7", 26380}));
    EXPECT_EQ(r.sentinel.nodes[1], (endpoint_address{"10.0.0.8", 26379}));
    EXPECT_EQ(r.sentinel.password, "s3");
    EXPECT_EQ(r.password, "data");
}

TEST(RedisTopology, OnlyOneOfHostClusterAndSentinel) {
    const auto p = problems_of(with_redis("    host: 10.0.0.1\n"
                                          "    cluster: [10.0.0.5:6379]\n"
                                          "    sentinel: { master: m, nodes: [10.0.0.7] }\n"));
    EXPECT_TRUE(has_problem(p,
                            6,
                            "rate-limit.redis.cluster",
                            "only one of host, cluster and sentinel may be set (host is set at "
                            "line 5)"));
    EXPECT_TRUE(has_problem(p, 7, "rate-limit.redis.sentinel", "(host is set at line 5)"));
}

TEST(RedisTopology, EmptyNodeListsAreRefused) {
    for (const std::string empty : {"[]", "", "null"}) {
        auto p = problems_of(with_redis("    cluster: " + empty + "\n"));
        EXPECT_TRUE(has_problem(
            p, 5, "rate-limit.redis.cluster", "must list at least one node, e.g. [10.0.0.5:6379]"))
            << empty;
        p = problems_of(with_redis("    sentinel:\n      master: m\n      nodes: " + empty + "\n"));
        EXPECT_TRUE(has_problem(p,
                                7,
                                "rate-limit.redis.sentinel.nodes",
                                "must list at least one node, e.g. [10.0.0.7:26379]"))
            << empty;
    }
}

TEST(RedisTopology, MalformedAddressesNameTheirElementAndLine) {
    const auto p = problems_of(with_redis("    cluster:\n"
                                          "      - 10.0.0.5:6379\n"
                                          "      - \"10.0.0.6:\"\n"
                                          "      - 10.0.0.5:6379\n"
                                          "      - 10.0.0.7:70000\n"
                                          "      - /run/redis.sock\n"
                                          "      - ::1\n"
                                          "      - { host: x }\n"));
    EXPECT_TRUE(has_problem(p,
                            7,
                            "rate-limit.redis.cluster[1]",
                            "'10.0.0.6:' is not host[:port]: the port is missing"));
    EXPECT_TRUE(has_problem(p, 8, "rate-limit.redis.cluster[2]", "10.0.0.5:6379 is listed twice"));
    EXPECT_TRUE(has_problem(p, 9, "rate-limit.redis.cluster[3]", "between 1 and 65535"));
    EXPECT_TRUE(has_problem(p, 10, "rate-limit.redis.cluster[4]", "a unix socket is not allowed"));
    EXPECT_TRUE(has_problem(p, 11, "rate-limit.redis.cluster[5]", "needs brackets"));
    EXPECT_TRUE(has_problem(p, 12, "rate-limit.redis.cluster[6]", "must be host[:port]"));
    EXPECT_EQ(p.size(), 6u);
}

TEST(RedisTopology, KeysThatBelongToAnotherTopologyAreRefused) {
    auto p = problems_of(with_redis("    cluster: [10.0.0.5]\n    port: 6380\n    db: 2\n"));
    EXPECT_TRUE(has_problem(
        p, 6, "rate-limit.redis.port", "belongs to host; write each node's port in its address"));
    EXPECT_TRUE(has_problem(p, 7, "rate-limit.redis.db", "Redis Cluster has only database 0"));

    p = problems_of(with_redis("    host: 10.0.0.1\n    hash-tag: ip\n"));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.redis.hash-tag", "ip applies only with cluster"));
    // The default written out is no problem, whatever the topology.
    EXPECT_EQ(
        load(with_redis("    host: 10.0.0.1\n    hash-tag: none\n")).rate_limit.redis.hash_tag,
        hash_tag_mode::none);
    p = problems_of(with_redis("    cluster: [10.0.0.5]\n    hash-tag: client\n"));
    EXPECT_TRUE(has_problem(p, 6, "rate-limit.redis.hash-tag", "one of none, ip"));

    // A database other than 0 is Sentinel's to use, and db 0 is Cluster's one.
    EXPECT_EQ(load(with_redis("    cluster: [10.0.0.5]\n    db: 0\n")).rate_limit.redis.db, 0);
    EXPECT_EQ(load(with_redis("    sentinel: { master: m, nodes: [a] }\n    db: 3\n"))
                  .rate_limit.redis.db,
              3);
}

TEST(RedisTopology, SentinelNeedsAMasterNameAndNodes) {
    auto p = problems_of(with_redis("    sentinel:\n      password: x\n"));
    EXPECT_TRUE(has_problem(p, 5, "rate-limit.redis.sentinel.master", "is required"));
    EXPECT_TRUE(has_problem(p, 5, "rate-limit.redis.sentinel.nodes", "is required"));
    for (const std::string bad : {"\"\"", "\"my master\""}) {
        p = problems_of(with_redis("    sentinel:\n      master: " + bad + "\n      nodes: [a]\n"));
        EXPECT_TRUE(has_problem(
            p, 6, "rate-limit.redis.sentinel.master", "must not be empty or hold spaces"))
            << bad;
    }
    p = problems_of(
        with_redis("    sentinel:\n      master: m\n      nodes: [a]\n      colour: x\n"));
    EXPECT_TRUE(has_problem(p, 8, "rate-limit.redis.sentinel.colour", "unknown key"));
    p = problems_of(with_redis("    sentinel:\n"));
    EXPECT_TRUE(has_problem(p, 5, "rate-limit.redis.sentinel", "must be a mapping"));
}

} // namespace
} // namespace sluice::config::test
