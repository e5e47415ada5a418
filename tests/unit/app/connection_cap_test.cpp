// SPDX-License-Identifier: Apache-2.0
#include "app/connection_cap.hpp"

#include <gtest/gtest.h>

namespace sluice::app {
namespace {

// What the client connections may not take: each worker's upstream connections and its Redis
// connections, and the process's own. A Cluster's connections (one a primary, and up to 16 more)
// were left to the process's 256, which 16 workers of a 6-primary cluster pass (352).
TEST(ConnectionCap, EachWorkersRedisConnectionsAreSetAside) {
    config::config cfg;
    cfg.upstream.max_connections = 100;
    EXPECT_EQ(descriptors_set_aside(cfg, 4), 4 * 100 + reserved_descriptors) << "memory store";
    cfg.rate_limit.store = config::store_kind::redis;
    EXPECT_EQ(descriptors_set_aside(cfg, 4), 4 * 101 + reserved_descriptors);
    cfg.rate_limit.redis.topology = config::redis_topology::cluster;
    EXPECT_EQ(descriptors_set_aside(cfg, 16),
              16 * (100 + cluster_connections_per_worker) + reserved_descriptors);
}

// Derived, the cap is what the descriptor limit leaves, and moves with upstream.max-connections
// (a reload recomputes it); set, it stays, and passing the limit with what is set aside is told.
TEST(ConnectionCap, ADerivedCapFollowsWhatIsSetAsideAndASetOneIsChecked) {
    config::config cfg;
    cfg.upstream.max_connections = 256;
    EXPECT_EQ(connection_cap_under(cfg, 2, 10'000), 10'000 - 2 * 256 - reserved_descriptors);
    cfg.upstream.max_connections = 4'000;
    EXPECT_EQ(connection_cap_under(cfg, 2, 10'000), 10'000 - 2 * 4'000 - reserved_descriptors);
    cfg.upstream.max_connections = 5'000;
    EXPECT_EQ(connection_cap_under(cfg, 2, 10'000), min_connection_cap) << "nothing left";
    EXPECT_FALSE(cap_exceeds_descriptors(cfg, 2, 10'000)) << "derived: never told";

    cfg.upstream.max_connections = 256;
    cfg.server.max_connections = 9'000;
    EXPECT_EQ(connection_cap_under(cfg, 2, 10'000), 9'000u);
    EXPECT_FALSE(cap_exceeds_descriptors(cfg, 2, 10'000)) << "9,000 + 768 fit in 10,000";
    cfg.server.max_connections = 9'233;
    EXPECT_TRUE(cap_exceeds_descriptors(cfg, 2, 10'000));
    cfg.upstream.max_connections = 6'000;
    EXPECT_TRUE(cap_exceeds_descriptors(cfg, 2, 10'000)) << "set aside alone passes it";
}

} // namespace
} // namespace sluice::app
