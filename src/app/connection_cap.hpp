// SPDX-License-Identifier: Apache-2.0
#pragma once

// How many client connections sluice holds at once (server.max-connections), and the descriptor
// limit it comes from (connection_cap.cpp).

#include "sluice/config/config.hpp"

#include <cstddef>
#include <cstdint>

namespace sluice::app {

/// Descriptors kept for everything but client connections, beyond the upstream's and the
/// workers' Redis connections: the freed-slot subscriber and the Sentinels, the admin listener's
/// 64, the listening sockets, logs, DNS lookups.
inline constexpr std::uint64_t reserved_descriptors = 256;

/// Redis connections one worker may hold with `cluster`: one to each primary of its map, at
/// most 48 (a map naming more is refused: redis::max_cluster_primaries), and up to 16 to nodes
/// outside the map (cluster_client's max_other_nodes: ASK targets, seeds, primaries a MOVED
/// names). connection_cap.cpp checks the sum.
inline constexpr std::uint64_t cluster_connections_per_worker = 64;

/**
 * The descriptors set aside for all but client connections: for each worker its
 * `upstream.max-connections` and its Redis connections (1, or cluster_connections_per_worker;
 * none on the memory store), and `reserved_descriptors` for the process.
 */
std::uint64_t descriptors_set_aside(const config::config& cfg, std::size_t workers) noexcept;

/// The fewest client connections a derived cap allows, however low the descriptor limit.
inline constexpr std::uint64_t min_connection_cap = 16;

/**
 * The client connections `cfg` allows at once under `descriptor_limit`: `server.max-connections`
 * when set, otherwise what the limit leaves once `descriptors_set_aside` are (at least
 * `min_connection_cap`). A reload that changes `upstream.max-connections` changes it.
 */
std::uint64_t connection_cap_under(const config::config& cfg,
                                   std::size_t workers,
                                   std::uint64_t descriptor_limit);

/// Whether an explicit `server.max-connections` and what `descriptors_set_aside` reaches past
/// `descriptor_limit`: at the cap, connects would then fail (EMFILE) rather than close an idle
/// client connection.
bool cap_exceeds_descriptors(const config::config& cfg,
                             std::size_t workers,
                             std::uint64_t descriptor_limit) noexcept;

/**
 * The client connections sluice holds at once: `server.max-connections` when set; otherwise
 * what the descriptor limit leaves once `descriptors_set_aside` are (at least
 * `min_connection_cap`), so that a flood of
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
