// SPDX-License-Identifier: Apache-2.0
// The Redis store on a Redis Cluster end to end (issue 16): the real binary, twice, in front of a
// recording upstream, deciding through a cluster of 3 primaries and 3 replicas that the test
// builds. One budget per key whichever instance decides, over keys on all three primaries; a
// request whose limits' keys live on two slots is charged on all or none.

#include "integration_util.hpp"
#include "sluice/redis/cluster_slots.hpp"
#include "support/limit_probe.hpp"
#include "support/limited_sluice.hpp"
#include "support/redis_cluster.hpp"
#include "support/resp_client.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

class RedisClusterStore : public testing::Test {
protected:
    void SetUp() override {
        if (!redis_cluster::available()) {
            GTEST_SKIP() << "redis-server or redis-cli is not installed";
        }
        cluster_ = std::make_unique<redis_cluster>();
    }

    /// The `store: redis` lines for the cluster, its first node as the only seed: the others are
    /// learned. Closed, so that an error shows as a 503 rather than as an admitted request.
    std::string store_yaml() const {
        const auto seed = cluster_->addresses().front();
        return fmt::format("  store: redis\n"
                           "  redis:\n"
                           "    cluster: [{}:{}]\n"
                           "    ttl: 2h\n"
                           "    timeout: 500ms\n"
                           "    failure-mode: closed\n",
                           seed.host,
                           seed.port);
    }

    /// With failure-mode closed, /readyz answers 200 once every worker has the whole map and a
    /// connection to every primary.
    static void wait_ready(const sluice_process& sluice) {
        const auto admin = admin_port(sluice);
        ASSERT_TRUE(eventually([admin] { return get(admin, "/readyz").status == 200; }, 15s))
            << sluice.log_text();
    }

    /// Every key of every primary, with the node holding it.
    std::map<std::string, std::size_t> keys_by_node() {
        std::map<std::string, std::size_t> out;
        for (const auto i : cluster_->primaries()) {
            resp_client c(cluster_->node(i).port());
            for (const auto& k : c.command({"KEYS", "rate-limit:*"}).elements) {
                out[k.text] = i;
            }
        }
        return out;
    }

    std::unique_ptr<redis_cluster> cluster_;
    recording_upstream upstream_;
};

TEST_F(RedisClusterStore, TwoInstancesShareOneBudgetPerKeyOnEveryPrimary) {
    constexpr int limit = 5;
    const auto yaml = compose_yaml(
        upstream_.url(),
        store_yaml() + fmt::format("  fallback: {{ algorithm: FIXED_WINDOW, limit: {}, window: 1h "
                                   "}}\n",
                                   limit));
    sluice_process a(yaml);
    sluice_process b(yaml);
    wait_ready(a);
    wait_ready(b);

    // Paths whose keys (the page's rate-limit:<ip>:<endpoint>) live on every primary, two each.
    std::vector<std::string> paths;
    std::map<std::size_t, int> per_primary;
    for (int n = 0; paths.size() < 6 && n < 1000; ++n) {
        const auto path = "/p" + std::to_string(n);
        const auto owner = cluster_->owner_of(redis::key_slot("rate-limit:127.0.0.1:" + path));
        ASSERT_TRUE(owner);
        if (per_primary[*owner] < 2) {
            ++per_primary[*owner];
            paths.push_back(path);
        }
    }
    ASSERT_EQ(paths.size(), 6u);

    for (const auto& path : paths) {
        int admitted = 0;
        std::set<unsigned> statuses;
        for (int i = 0; i < 2 * limit; ++i) {
            const auto status = get(i % 2 == 0 ? a.port() : b.port(), path).status;
            statuses.insert(status);
            admitted += status == 200 ? 1 : 0;
        }
        // One window of `limit` per key, whichever instance asked: never one per instance.
        EXPECT_EQ(admitted, limit) << path;
        EXPECT_EQ(statuses, (std::set<unsigned>{200, 429})) << path;
    }
    const auto keys = keys_by_node();
    for (const auto& path : paths) {
        const auto key = "rate-limit:127.0.0.1:" + path;
        ASSERT_TRUE(keys.count(key)) << key;
        EXPECT_EQ(keys.at(key), cluster_->owner_of(redis::key_slot(key))) << key;
        resp_client owner(cluster_->node(keys.at(key)).port());
        EXPECT_EQ(owner.command({"HGET", key, "count"}).text, std::to_string(limit)) << key;
    }
}

// A per-client limit beside a global one: their keys hash to different slots, so each request
// is two tentative parts. One refused by its per-client limit must leave the global count as it
// was, or the global budget would run out on requests that were never served.
TEST_F(RedisClusterStore, ARequestOnTwoSlotsIsChargedOnAllItsLimitsOrNone) {
    const std::string rules = R"(  rules:
    - name: both
      match: { path: /both }
      limits:
        - { algorithm: FIXED_WINDOW, limit: 2, window: 1h, key: [header:X-User] }
        - { algorithm: FIXED_WINDOW, limit: 5, window: 1h, key: [global] }
)";
    sluice_process sluice(compose_yaml(upstream_.url(), store_yaml() + rules));
    wait_ready(sluice);
    const auto as = [port = sluice.port()](const std::string& user) {
        return get(port, "/both", {{"X-User", user}});
    };

    EXPECT_EQ(as("a").status, 200u);
    // The two keys really are on two slots: otherwise this test proves nothing about the split.
    const auto keys = keys_by_node();
    ASSERT_EQ(keys.size(), 2u);
    std::set<std::uint16_t> slots;
    for (const auto& [key, node] : keys) {
        slots.insert(redis::key_slot(key));
    }
    ASSERT_EQ(slots.size(), 2u) << keys.begin()->first << " and " << keys.rbegin()->first;

    EXPECT_EQ(as("a").status, 200u); // global: 2 of 5
    for (int i = 0; i < 3; ++i) {
        // a's own limit refuses; its global charge is given back each time.
        EXPECT_EQ(as("a").status, 429u);
    }
    // Three more fit in the global budget (2 + 3 = 5), then it refuses.
    EXPECT_EQ(as("b").status, 200u);
    EXPECT_EQ(as("b").status, 200u);
    EXPECT_EQ(as("c").status, 200u);
    const auto refused = view_of(as("c"));
    EXPECT_EQ(refused.status, 429u);
    // The global limit (the rule's second) refuses, not c's own.
    EXPECT_NE(refused.body.find("\"limit_index\":1"), std::string::npos) << refused.body;
    ASSERT_TRUE(upstream_.wait_quiet(5s));
    EXPECT_EQ(upstream_.requests().size(), 5u); // 2 for a, 2 for b, 1 for c
}

} // namespace
} // namespace sluice::test
