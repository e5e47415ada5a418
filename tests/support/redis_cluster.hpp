// SPDX-License-Identifier: Apache-2.0
#pragma once

// A private Redis Cluster for tests: primaries and replicas, each a `redis_server` on free ports
// of 127.0.0.1 (data and bus), joined with `redis-cli --cluster create`, with a short node
// timeout so that a killed primary's replica takes over within about 2.5 s (docs/redis-cluster.md,
// "Measured here"). It can move slots between primaries as an operator resharding would.

#include "sluice/config/config.hpp"
#include "support/redis_server.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::test {

class redis_cluster {
public:
    struct options {
        std::size_t primaries = 3;
        std::size_t replicas_per_primary = 1;
    };

    /// True when both `redis-server` and `redis-cli` are on PATH; tests skip otherwise.
    static bool available();

    /**
     * Starts every node, creates the cluster and waits until every node reports
     * `cluster_state:ok` and every replica's link to its primary is up. Throws
     * std::runtime_error (naming what it waited for) when that takes more than 15 s.
     */
    redis_cluster()
        : redis_cluster(options{}) {}

    explicit redis_cluster(options opts);

    redis_cluster(const redis_cluster&) = delete;
    redis_cluster& operator=(const redis_cluster&) = delete;

    std::size_t size() const { return nodes_.size(); }

    redis_server& node(std::size_t i) { return *nodes_.at(i); }

    /// Every node's address: what a client may be given as seeds.
    std::vector<config::endpoint_address> addresses() const;

    /// `rate-limit.redis` reaching this cluster through `seeds` (all nodes when empty).
    config::redis_settings settings(std::vector<config::endpoint_address> seeds = {}) const;

    /// The node whose port is `port`, or nullopt.
    std::optional<std::size_t> index_of(std::uint16_t port) const;

    /// The index of the node that owns `slot` now, as a live node's CLUSTER SLOTS tells.
    std::optional<std::size_t> owner_of(std::uint16_t slot);

    /// Indexes of the nodes that are primaries now and own slots.
    std::vector<std::size_t> primaries();

    /// The node's id (CLUSTER MYID).
    std::string node_id(std::size_t i);

    /// Moves `count` slots from primary `from` to primary `to` with `redis-cli --cluster
    /// reshard` (keys included), and waits until the cluster agrees again. Throws on failure.
    void move_slots(std::size_t from, std::size_t to, int count);

    /// Waits (up to `limit`) until every live node says `cluster_state:ok` and every live
    /// replica's link is up; throws std::runtime_error naming what was still missing.
    void wait_healthy(std::chrono::milliseconds limit = std::chrono::seconds(15));

private:
    std::vector<std::unique_ptr<redis_server>> nodes_;
};

} // namespace sluice::test
