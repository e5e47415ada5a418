// SPDX-License-Identifier: Apache-2.0
#include "app/connection_cap.hpp"

#include "sluice/redis/cluster_client.hpp"

#include <algorithm>
#include <sys/resource.h>

namespace sluice::app {

static_assert(cluster_connections_per_worker ==
                  redis::max_cluster_primaries + redis::default_max_other_nodes,
              "the descriptors set aside must cover every connection a worker's cluster client "
              "may hold");

std::uint64_t descriptors_set_aside(const config::config& cfg, std::size_t workers) noexcept {
    std::uint64_t redis = 0;
    if (cfg.rate_limit.store == config::store_kind::redis) {
        redis = cfg.rate_limit.redis.topology == config::redis_topology::cluster
                    ? cluster_connections_per_worker
                    : 1;
    }
    return static_cast<std::uint64_t>(workers) * (cfg.upstream.max_connections + redis) +
           reserved_descriptors;
}

std::uint64_t connection_cap(const config::config& cfg,
                             std::size_t workers,
                             std::uint64_t& descriptor_limit,
                             std::uint64_t& raised_from) {
    raised_from = 0;
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
        if (limit.rlim_cur < limit.rlim_max && limit.rlim_max != RLIM_INFINITY) {
            const auto before = limit.rlim_cur;
            limit.rlim_cur = limit.rlim_max;
            if (::setrlimit(RLIMIT_NOFILE, &limit) == 0) {
                raised_from = before;
            } else {
                limit.rlim_cur = before;
            }
        }
        descriptor_limit = limit.rlim_cur;
    } else {
        descriptor_limit = 1024;
    }
    return connection_cap_under(cfg, workers, descriptor_limit);
}

std::uint64_t connection_cap_under(const config::config& cfg,
                                   std::size_t workers,
                                   std::uint64_t descriptor_limit) {
    if (cfg.server.max_connections > 0) {
        return cfg.server.max_connections;
    }
    const auto reserve = descriptors_set_aside(cfg, workers);
    return descriptor_limit > reserve + min_connection_cap ? descriptor_limit - reserve
                                                           : min_connection_cap;
}

bool cap_exceeds_descriptors(const config::config& cfg,
                             std::size_t workers,
                             std::uint64_t descriptor_limit) noexcept {
    const auto reserve = descriptors_set_aside(cfg, workers);
    return cfg.server.max_connections > 0 &&
           (reserve >= descriptor_limit || cfg.server.max_connections > descriptor_limit - reserve);
}

} // namespace sluice::app
