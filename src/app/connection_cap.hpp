// SPDX-License-Identifier: Apache-2.0
#pragma once

// How many client connections sluice holds at once (server.max-connections), and the descriptor
// limit it comes from (connection_cap.cpp).

#include "sluice/config/config.hpp"

#include <cstddef>
#include <cstdint>

namespace sluice::app {

/// Descriptors kept for everything but client connections, beyond the upstream's: Redis and
/// Sentinel connections, the admin listener's 64, the listening sockets, logs, DNS lookups.
inline constexpr std::uint64_t reserved_descriptors = 256;

/// The fewest client connections a derived cap allows, however low the descriptor limit.
inline constexpr std::uint64_t min_connection_cap = 16;

/**
 * The client connections sluice holds at once: `server.max-connections` when set; otherwise
 * what the descriptor limit leaves once `workers` x `upstream.max-connections` and
 * `reserved_descriptors` are set aside (at least `min_connection_cap`), so that a flood of
 * client connections never takes the descriptors an upstream connection, a Redis reconnect or a
 * health probe needs. Raises the soft descriptor limit to the hard one first (as nginx's
 * worker_rlimit_nofile, and Go's runtime, do): a service manager's soft 1024 would otherwise cap
 * a proxy whose hard limit allows far more. `raised_from`: the soft limit before, when raised.
 */
std::uint64_t connection_cap(const config::config& cfg,
                             std::size_t workers,
                             std::uint64_t& descriptor_limit,
                             std::uint64_t& raised_from);

} // namespace sluice::app
