// SPDX-License-Identifier: Apache-2.0
// redis::cluster_client against a real Redis Cluster of 3 primaries and 3 replicas started by
// the test (tests/support/redis_cluster): routing by slot, MOVED after a reshard, ASK during a
// migration, seeds that are gone.
#include "sluice/redis/cluster_client.hpp"
#include "sluice/redis/command_writer.hpp"
#include "support/redis_cluster.hpp"
#include "support/resp_client.hpp"
#include "support/run_coro.hpp"
#include "support/temp_dir.hpp"

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace sluice::redis {
namespace {

using namespace std::chrono_literals;
using result = std::tuple<error_code, reply>;

std::string resp(const std::vector<std::string>& args) {
    std::string out;
    command_writer w(out, args.size());
    for (const auto& a : args) {
        w.arg(std::string_view(a));
    }
    return out;
}

/// The first key "<prefix><n>" that hashes to `slot`.
std::string key_in_slot(std::uint16_t slot, const std::string& prefix = "k") {
    for (int n = 0;; ++n) {
        auto key = prefix + std::to_string(n);
        if (key_slot(key) == slot) {
            return key;
        }
    }
}

class ClusterClient : public ::testing::Test {
protected:
    void SetUp() override {
        if (!test::redis_cluster::available()) {
            GTEST_SKIP() << "redis-server or redis-cli is not on PATH";
        }
        cluster_.emplace();
    }

    std::unique_ptr<cluster_client> make_client(std::vector<config::endpoint_address> seeds) {
        cluster_options o;
        o.seeds = std::move(seeds);
        o.node.command_timeout = 2s;
        o.node.reconnect_min = 20ms;
        o.node.reconnect_max = 200ms;
        auto c = std::make_unique<cluster_client>(executor{ioc_.get_executor()}, std::move(o));
        c->start();
        return c;
    }

    bool wait_healthy(cluster_client& c) {
        return test::run_until(
            ioc_, [&] { return c.healthy(); }, 15s);
    }

    result run(cluster_client& c, const std::string& key, const std::vector<std::string>& args) {
        return test::run_coro(ioc_, c.async_formatted(key_slot(key), resp(args)));
    }

    /// The value of `key` read straight from node `i` (ASKING first: it may be importing it).
    std::string read_on(std::size_t i, const std::string& key) {
        test::resp_client direct(cluster_->node(i).port());
        direct.command({"ASKING"});
        return direct.command({"GET", key}).text;
    }

    /// The lowest slot node `i` owns, by the client's map.
    std::uint16_t first_slot_of(const cluster_client& c, std::size_t i) {
        const auto map = c.map();
        for (std::uint16_t s = 0; s < cluster_slots; ++s) {
            if (const auto* owner = map->owner_of(s);
                owner && owner->port == cluster_->node(i).port()) {
                return s;
            }
        }
        ADD_FAILURE() << "node " << i << " owns no slot";
        return 0;
    }

    net::io_context ioc_;
    std::optional<test::redis_cluster> cluster_;
};

TEST_F(ClusterClient, RoutesEachCommandToItsSlotsPrimary) {
    // One seed is enough: it gives the whole map.
    auto c = make_client({cluster_->addresses().front()});
    ASSERT_TRUE(wait_healthy(*c));
    ASSERT_TRUE(c->map());
    EXPECT_EQ(c->map()->covered(), cluster_slots);
    EXPECT_EQ(c->map()->primaries.size(), 3u);

    std::vector<std::size_t> owners_seen;
    for (int i = 0; i < 30; ++i) {
        const auto key = "user:" + std::to_string(i);
        auto [ec, r] = run(*c, key, {"SET", key, "v" + std::to_string(i)});
        ASSERT_FALSE(ec) << key << ": " << ec.message() << " " << r.str;
        const auto owner = cluster_->owner_of(key_slot(key));
        ASSERT_TRUE(owner);
        EXPECT_EQ(read_on(*owner, key), "v" + std::to_string(i)) << key;
        if (std::find(owners_seen.begin(), owners_seen.end(), *owner) == owners_seen.end()) {
            owners_seen.push_back(*owner);
        }
    }
    EXPECT_EQ(owners_seen.size(), 3u) << "30 keys should reach all three primaries";
    // Routed by the map: Redis never had to redirect one.
    EXPECT_EQ(c->counters().moved.load(), 0u);
    EXPECT_EQ(c->counters().ask.load(), 0u);
}

TEST_F(ClusterClient, FollowsMovedAfterAReshardAndLearnsTheNewMap) {
    auto c = make_client(cluster_->addresses());
    ASSERT_TRUE(wait_healthy(*c));
    const auto primaries = cluster_->primaries();
    ASSERT_EQ(primaries.size(), 3u);
    const auto from = primaries[0];
    const auto to = primaries[1];
    // The reshard takes the source's lowest slots first.
    const auto moved_slot = first_slot_of(*c, from);
    cluster_->move_slots(from, to, 10);
    ASSERT_EQ(cluster_->owner_of(moved_slot), to) << "slot " << moved_slot;

    // The worker's map still says `from`: the command is redirected once and succeeds.
    const auto key = key_in_slot(moved_slot);
    auto [ec, r] = run(*c, key, {"SET", key, "after-reshard"});
    ASSERT_FALSE(ec) << ec.message() << " " << r.str;
    EXPECT_EQ(read_on(to, key), "after-reshard");
    EXPECT_GE(c->counters().moved.load(), 1u);

    // The refresh that MOVED asked for brings the whole move in: a neighbour is routed directly.
    ASSERT_TRUE(test::run_until(
        ioc_,
        [&] {
            const auto map = c->map();
            return map && map->owner_of(moved_slot + 9) != nullptr &&
                   map->owner_of(moved_slot + 9)->port == cluster_->node(to).port();
        },
        5s));
    const auto moved_before = c->counters().moved.load();
    const auto neighbour = key_in_slot(static_cast<std::uint16_t>(moved_slot + 9));
    auto [ec2, r2] = run(*c, neighbour, {"SET", neighbour, "direct"});
    ASSERT_FALSE(ec2) << ec2.message() << " " << r2.str;
    EXPECT_EQ(c->counters().moved.load(), moved_before);
    EXPECT_GE(c->counters().refreshes_changed.load(), 2u); // the first map, then the reshard's
}

TEST_F(ClusterClient, FollowsAskWhileASlotMigrates) {
    auto c = make_client(cluster_->addresses());
    ASSERT_TRUE(wait_healthy(*c));
    const auto primaries = cluster_->primaries();
    const auto source = primaries[0];
    const auto target = primaries[1];
    const auto slot = first_slot_of(*c, source);
    // Half a migration, as `redis-cli --cluster reshard` leaves it while it moves keys.
    test::resp_client on_target(cluster_->node(target).port());
    test::resp_client on_source(cluster_->node(source).port());
    const auto s = std::to_string(slot);
    ASSERT_EQ(
        on_target.command({"CLUSTER", "SETSLOT", s, "IMPORTING", cluster_->node_id(source)}).text,
        "OK");
    ASSERT_EQ(
        on_source.command({"CLUSTER", "SETSLOT", s, "MIGRATING", cluster_->node_id(target)}).text,
        "OK");

    // A key the source does not hold is asked for on the target.
    const auto key = key_in_slot(slot, "migrating:");
    auto [ec, r] = run(*c, key, {"SET", key, "asked"});
    ASSERT_FALSE(ec) << ec.message() << " " << r.str;
    EXPECT_EQ(c->counters().ask.load(), 1u);
    EXPECT_EQ(read_on(target, key), "asked");
    // ASK changes no map: the slot is still the source's.
    EXPECT_EQ(c->map()->owner_of(slot)->port, cluster_->node(source).port());
}

TEST_F(ClusterClient, ASeedThatIsGoneIsSkipped) {
    auto seeds = cluster_->addresses();
    seeds.insert(seeds.begin(), config::endpoint_address{"127.0.0.1", test::free_port()});
    auto c = make_client(seeds);
    ASSERT_TRUE(wait_healthy(*c));
    const auto key = std::string("after-a-dead-seed");
    auto [ec, r] = run(*c, key, {"SET", key, "1"});
    EXPECT_FALSE(ec) << ec.message() << " " << r.str;
}

// A map read is allowed connect-timeout, not the per-decision timeout: the first one, held on
// each seed through a set-up (here a connect command of 300 ms) that outlasts the 50 ms timeout,
// gives the map. It timed out on every seed, and the map came only from the next read.
TEST_F(ClusterClient, TheFirstMapReadIsAllowedTheConnectTimeout) {
    cluster_options o;
    o.seeds = cluster_->addresses();
    o.node.command_timeout = 50ms;
    o.node.connect_timeout = 5s;
    cluster_client c(executor{ioc_.get_executor()}, o);
    // Busy for 300 ms, on any node: no key, so no slot to be redirected for.
    c.add_connect_command({"EVAL",
                           "local t = redis.call('TIME') "
                           "local start = t[1] * 1000000 + t[2] "
                           "repeat t = redis.call('TIME') "
                           "until t[1] * 1000000 + t[2] - start >= 300000 "
                           "return 1",
                           "0"});
    c.start();
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return c.map() != nullptr; }, 10s));
    EXPECT_EQ(c.counters().refreshes_failed.load(), 0u);
    EXPECT_EQ(c.counters().refreshes_changed.load(), 1u);
}

TEST_F(ClusterClient, WithoutAMapCommandsFailAtOnce) {
    cluster_options o;
    o.seeds = {config::endpoint_address{"127.0.0.1", test::free_port()}};
    o.node.command_timeout = 2s;
    cluster_client c(executor{ioc_.get_executor()}, o);
    c.start();
    const auto started = std::chrono::steady_clock::now();
    auto [ec, r] = test::run_coro(ioc_, c.async_formatted(0, resp({"PING"})));
    EXPECT_EQ(ec, errc::redis_unavailable);
    // At once, not after the command timeout: the failure mode applies without waiting.
    EXPECT_LT(std::chrono::steady_clock::now() - started, 1s);
    EXPECT_FALSE(c.healthy());
}

} // namespace
} // namespace sluice::redis
