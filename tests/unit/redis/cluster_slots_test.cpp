// SPDX-License-Identifier: Apache-2.0
#include "reply_builders.hpp"
#include "sluice/redis/cluster_slots.hpp"
#include "support/redis_server.hpp"
#include "support/resp_client.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace sluice::redis {
namespace {

using test::array_reply;
using test::integer_reply;
using test::string_reply;

TEST(ClusterSlots, Crc16IsTheSpecificationsXmodem) {
    EXPECT_EQ(crc16("123456789"), 0x31C3);
    EXPECT_EQ(crc16(""), 0);
}

// Slots `CLUSTER KEYSLOT` gave on Redis 7.0.15 (docs/redis-cluster.md).
TEST(ClusterSlots, KeySlotsAreTheOnesRedisGives) {
    EXPECT_EQ(key_slot("a"), 15495);
    EXPECT_EQ(key_slot("b"), 3300);
    EXPECT_EQ(key_slot("t10648"), 100);
    EXPECT_EQ(key_slot("rate-limit:1.2.3.4:/api"), 12685);
    EXPECT_EQ(key_slot("{1.2.3.4}:x"), 1781);
    EXPECT_EQ(key_slot("1.2.3.4"), 1781);
    EXPECT_EQ(key_slot("sluice:slot-freed"), 14336);
}

TEST(ClusterSlots, TheFirstNonEmptyHashTagDecides) {
    EXPECT_EQ(hashed_part("{user1000}.following"), "user1000");
    EXPECT_EQ(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
    EXPECT_EQ(hashed_part("foo{}{bar}"), "foo{}{bar}") << "an empty tag: the whole key";
    EXPECT_EQ(hashed_part("foo{{bar}}zap"), "{bar");
    EXPECT_EQ(hashed_part("foo{bar}{zap}"), "bar");
    EXPECT_EQ(hashed_part("no braces"), "no braces");
    EXPECT_EQ(hashed_part("open{only"), "open{only");
    EXPECT_EQ(hashed_part("}{x}"), "x");
}

// The whole rule against a real cluster-enabled redis-server, over keys full of braces.
TEST(ClusterSlots, AgreeWithClusterKeyslotOverRandomKeys) {
    if (!test::redis_server::available()) {
        GTEST_SKIP() << "redis-server is not on PATH";
    }
    test::redis_server::options opts;
    opts.cluster_enabled = true;
    test::redis_server server(opts);
    test::resp_client redis(server.port());
    std::mt19937 random(7);
    const std::string alphabet = "ab{}:/.-1";
    for (int i = 0; i < 500; ++i) {
        std::string key;
        const auto length = 1 + random() % 12;
        for (std::size_t j = 0; j < length; ++j) {
            key += alphabet[random() % alphabet.size()];
        }
        const auto answer = redis.command({"CLUSTER", "KEYSLOT", key});
        ASSERT_EQ(answer.integer, key_slot(key)) << key << ": " << answer.describe();
    }
}

reply node(std::string host, std::int64_t port, std::string id = "") {
    return array_reply(
        {string_reply(std::move(host)), integer_reply(port), string_reply(std::move(id))});
}

reply range(std::int64_t start, std::int64_t end, std::vector<reply> nodes) {
    std::vector<reply> e{integer_reply(start), integer_reply(end)};
    e.insert(e.end(), nodes.begin(), nodes.end());
    return array_reply(std::move(e));
}

TEST(ClusterSlots, AMapOfThreePrimariesCoversEverySlot) {
    const auto r =
        array_reply({range(0, 5460, {node("10.0.0.1", 7000, "a"), node("10.0.0.4", 7003)}),
                     range(5461, 10922, {node("10.0.0.2", 7001, "b")}),
                     range(10923, 16383, {node("", 7002, "c"), node("10.0.0.6", 7005)})});
    const auto result = parse_cluster_slots(r, "10.0.0.9");
    ASSERT_TRUE(result.map) << result.error;
    const auto& map = *result.map;
    EXPECT_EQ(map.covered(), cluster_slots);
    ASSERT_EQ(map.primaries.size(), 3u);
    EXPECT_EQ(*map.owner_of(0), (cluster_node{"10.0.0.1", 7000, "a"}));
    EXPECT_EQ(map.owner_of(5461)->port, 7001);
    EXPECT_EQ(map.owner_of(16383)->host, "10.0.0.9") << "an empty host is the node asked";
    EXPECT_EQ(map.owner_of(16384), nullptr);
}

TEST(ClusterSlots, APrimaryWithSeveralRangesIsOneNodeAndGapsHaveNoOwner) {
    const auto r = array_reply({range(0, 99, {node("10.0.0.1", 7000)}),
                                range(200, 299, {node("10.0.0.1", 7000)}),
                                range(100, 100, {node("10.0.0.2", 7001)})});
    const auto result = parse_cluster_slots(r, "x");
    ASSERT_TRUE(result.map) << result.error;
    EXPECT_EQ(result.map->primaries.size(), 2u);
    EXPECT_EQ(result.map->covered(), 201u);
    EXPECT_EQ(result.map->owner_of(150), nullptr);
    EXPECT_EQ(result.map->owner_of(250)->port, 7000);
}

TEST(ClusterSlots, MalformedRepliesAreRefusedNamingTheFault) {
    reply nil;
    reply error;
    error.type = reply::kind::error;
    error.str = "ERR This instance has cluster support disabled";

    const struct {
        reply r;
        std::string_view words;
    } cases[] = {
        {error, "not an array"},
        {array_reply({integer_reply(1)}), "not [start, end, primary"},
        {array_reply({array_reply({integer_reply(0), integer_reply(1)})}),
         "not [start, end, primary"},
        {array_reply({range(-1, 5, {node("h", 1)})}), "outside 0..16383"},
        {array_reply({range(0, 16384, {node("h", 1)})}), "outside 0..16383"},
        {array_reply({range(9, 5, {node("h", 1)})}), "ends before it starts"},
        {array_reply({range(0, 10, {node("h", 1)}), range(10, 20, {node("g", 2)})}),
         "share slot 10"},
        {array_reply({range(0, 10, {node("h", 0)})}), "port is outside"},
        {array_reply({range(0, 10, {node("h", 65536)})}), "port is outside"},
        {array_reply({range(0, 10, {node("?", 7000)})}), "address is unknown"},
        {array_reply({range(0, 10, {array_reply({nil, integer_reply(7000)})})}),
         "address is unknown"},
        {array_reply({range(0, 10, {array_reply({integer_reply(1), integer_reply(7000)})})}),
         "host is not a string"},
        {array_reply({range(0, 10, {node("h", 1), integer_reply(3)})}), "not [host, port"},
        // A host sluice would connect to, log and make a metric's label: a name or an address.
        {array_reply({range(0, 10, {node("h\"},{x=\"", 7000)})}), "not a host name"},
        {array_reply({range(0, 10, {node("h 1", 7000)})}), "not a host name"},
        {array_reply({range(0, 10, {node("h\n1", 7000)})}), "not a host name"},
        {array_reply({range(0, 10, {node("h/1", 7000)})}), "not a host name"},
        {array_reply({range(0, 10, {node(std::string(max_node_host + 1, 'h'), 7000)})}),
         "not a host name"},
    };

    for (const auto& c : cases) {
        const auto result = parse_cluster_slots(c.r, "asked");
        EXPECT_FALSE(result.map) << c.r.describe();
        EXPECT_NE(result.error.find(c.words), std::string::npos)
            << c.r.describe() << ": " << result.error;
    }
    // A replica whose address is unknown is no fault: only primaries are routed to.
    EXPECT_TRUE(
        parse_cluster_slots(array_reply({range(0, 10, {node("h", 1), node("?", 2)})}), "a").map);
}

/// A map of `primaries` primaries, one slot each (127.0.0.1, ports 7000 on), the last owning the
/// rest.
reply map_of(std::size_t primaries) {
    std::vector<reply> ranges;
    for (std::size_t i = 0; i < primaries; ++i) {
        const auto start = static_cast<std::int64_t>(i);
        const auto end = i + 1 == primaries ? std::int64_t{cluster_slots - 1} : start;
        ranges.push_back(
            range(start, end, {node("127.0.0.1", 7000 + static_cast<std::int64_t>(i))}));
    }
    return array_reply(std::move(ranges));
}

// A worker connects to every primary of its map, and the descriptors set aside for it reckon
// max_cluster_primaries: a map naming more is refused, naming how many it names. Up to 16384
// were taken (a connection each, per worker).
TEST(ClusterSlots, AMapNamingMorePrimariesThanTheCapIsRefused) {
    const auto at_cap = parse_cluster_slots(map_of(max_cluster_primaries), "a");
    ASSERT_TRUE(at_cap.map) << at_cap.error;
    EXPECT_EQ(at_cap.map->primaries.size(), max_cluster_primaries);
    EXPECT_EQ(at_cap.map->covered(), cluster_slots);

    for (const std::size_t primaries : {max_cluster_primaries + 1, cluster_slots}) {
        const auto over = parse_cluster_slots(map_of(primaries), "a");
        EXPECT_FALSE(over.map) << primaries;
        EXPECT_EQ(over.error,
                  fmt::format("it names {} primaries, more than the {} a worker connects to",
                              primaries,
                              max_cluster_primaries));
    }
    // Many ranges of few primaries are no fault: a fragmented map of three.
    std::vector<reply> ranges;
    for (std::int64_t slot = 0; slot < 3000; ++slot) {
        ranges.push_back(range(slot, slot, {node("127.0.0.1", 7000 + slot % 3)}));
    }
    const auto fragmented = parse_cluster_slots(array_reply(std::move(ranges)), "a");
    ASSERT_TRUE(fragmented.map) << fragmented.error;
    EXPECT_EQ(fragmented.map->primaries.size(), 3u);
}

TEST(ClusterSlots, NodeHostsAreNamesOrAddresses) {
    for (const std::string& host : {std::string("10.0.0.5"),
                                    std::string("::1"),
                                    std::string("fe80::1:2"),
                                    std::string("::ffff:10.0.0.5"),
                                    std::string("redis-0.redis.default.svc.cluster.local"),
                                    std::string("node_1"),
                                    std::string(max_node_host, 'h')}) {
        EXPECT_TRUE(is_node_host(host)) << host;
        const auto map = parse_cluster_slots(array_reply({range(0, 10, {node(host, 7000)})}), "a");
        ASSERT_TRUE(map.map) << host << ": " << map.error;
        EXPECT_EQ(map.map->primaries.front().host, host);
        const auto moved = parse_redirection("MOVED 12 " + host + ":7000", "asked");
        ASSERT_TRUE(moved) << host;
        EXPECT_EQ(moved->host, host);
    }
    for (const std::string& host : {std::string(""),
                                    std::string("h\"1"),
                                    std::string("h\n1"),
                                    std::string("h\x01"),
                                    std::string("h/1"),
                                    std::string("[::1]"),
                                    std::string("h\xc3\xa9"),
                                    std::string(max_node_host + 1, 'h')}) {
        EXPECT_FALSE(is_node_host(host)) << host;
    }
}

TEST(ClusterSlots, RedirectionsReadAsRedisWritesThem) {
    const auto moved = parse_redirection("MOVED 3999 127.0.0.1:6381", "asked");
    ASSERT_TRUE(moved);
    EXPECT_EQ(moved->type, redirection::kind::moved);
    EXPECT_EQ(moved->slot, 3999);
    EXPECT_EQ(moved->host, "127.0.0.1");
    EXPECT_EQ(moved->port, 6381);

    const auto ask = parse_redirection("ASK 16383 ::1:7000", "asked");
    ASSERT_TRUE(ask);
    EXPECT_EQ(ask->type, redirection::kind::ask);
    EXPECT_EQ(ask->slot, 16383);
    EXPECT_EQ(ask->host, "::1");
    EXPECT_EQ(ask->port, 7000);

    // A node that does not know its own address announces none: it is the one asked.
    const auto unnamed = parse_redirection("MOVED 0 :7002", "10.0.0.5");
    ASSERT_TRUE(unnamed);
    EXPECT_EQ(unnamed->host, "10.0.0.5");

    const auto again =
        parse_redirection("TRYAGAIN Multiple keys request during rehashing of slot", "asked");
    ASSERT_TRUE(again);
    EXPECT_EQ(again->type, redirection::kind::tryagain);

    for (const std::string_view other : {"ERR unknown command",
                                         "MOVED",
                                         "MOVED 16384 h:1",
                                         "MOVED -1 h:1",
                                         "MOVED 12 h",
                                         "MOVED 12 h:0",
                                         "MOVED 12 h:65536",
                                         "MOVED 12 h:7000 extra",
                                         "MOVED 12 h\"}:7000",
                                         "MOVED 12 h\n1:7000",
                                         "ASK 12 h/1:7000",
                                         "MOVED 12 [::1]:7000",
                                         "ASK x h:1",
                                         "MOVED  h:1",
                                         "CLUSTERDOWN The cluster is down",
                                         "NOSCRIPT No matching script"}) {
        EXPECT_FALSE(parse_redirection(other, "asked")) << other;
    }
}

} // namespace
} // namespace sluice::redis
