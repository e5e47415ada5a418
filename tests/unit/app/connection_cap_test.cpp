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

} // namespace
} // namespace sluice::app
