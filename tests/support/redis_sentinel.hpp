// SPDX-License-Identifier: Apache-2.0
#pragma once

// A private Redis Sentinel deployment for tests: a primary, a replica and three Sentinels, each a
// `redis_server` on a free port of 127.0.0.1 (the Sentinels `redis-server <conf> --sentinel`,
// each with its own writable config), monitoring the name `sluice` with quorum 2,
// `down-after-milliseconds 1000` and `failover-timeout 3000`: a killed primary's replica is
// promoted within about 2.3 s (docs/redis-cluster.md, "Measured here").

#include "sluice/config/config.hpp"
#include "support/redis_server.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::test {

class redis_sentinel {
public:
    /// The name the Sentinels monitor.
    static constexpr const char* master_name = "sluice";

    /// True when `redis-server` is on PATH; tests skip otherwise.
    static bool available();

    /**
     * Starts the primary (data node 0), its replica (data node 1) and the Sentinels, and waits
     * until the replica's link is up and every Sentinel sees the replica and the other
     * Sentinels. Throws std::runtime_error (naming what it waited for) after 15 s.
     */
    explicit redis_sentinel(std::size_t sentinels = 3);

    redis_sentinel(const redis_sentinel&) = delete;
    redis_sentinel& operator=(const redis_sentinel&) = delete;

    /// A data node: 0 was the primary at start, 1 its replica.
    redis_server& node(std::size_t i) { return *nodes_.at(i); }

    redis_server& sentinel(std::size_t i) { return *sentinels_.at(i); }

    std::size_t sentinel_count() const { return sentinels_.size(); }

    std::vector<config::endpoint_address> sentinel_addresses() const;

    /// `rate-limit.redis` through the Sentinels (data nodes without a password).
    config::redis_settings settings() const;

    /// The data node Sentinel `i` names as the primary now, or nullopt (no answer, unknown).
    std::optional<std::size_t> primary(std::size_t i = 0);

    /// `SENTINEL failover` on Sentinel 0; throws unless it accepted it.
    void failover();

    /**
     * Waits until every live Sentinel names a primary other than data node `old_primary`, and
     * that node answers ROLE `master`; returns its index. Throws after `limit`.
     */
    std::size_t wait_switched(std::size_t old_primary,
                              std::chrono::milliseconds limit = std::chrono::seconds(15));

    /// Waits until data node `i` answers ROLE with `role` ("master", "slave"); false after
    /// `limit`.
    bool wait_role(std::size_t i, const std::string& role, std::chrono::milliseconds limit);

    /// Waits until the replica of the current primary has its link up and every live Sentinel
    /// sees it and the others; throws std::runtime_error naming what was missing after `limit`.
    void wait_healthy(std::chrono::milliseconds limit = std::chrono::seconds(15));

private:
    std::vector<std::unique_ptr<redis_server>> nodes_;
    std::vector<std::unique_ptr<redis_server>> sentinels_;
};

} // namespace sluice::test
