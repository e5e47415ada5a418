// SPDX-License-Identifier: Apache-2.0
#pragma once

// What sluice says of a configuration in its log (config_report.cpp): the start-up summary,
// which names addresses and never credentials, and what a reload cannot change. Pure functions
// of the configuration, with no I/O.

#include "sluice/config/config.hpp"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::app {

/// One limit as the summary shows it, e.g. "LEAKY_BUCKET capacity=50 flowRate=5/s shape".
std::string describe_limit(const config::limit& l);

/// Where the Redis store goes: its address, a Cluster seed or a Sentinel; never credentials.
std::string describe_redis(const config::redis_settings& redis);

/**
 * The start-up summary, a line each: the listening address (`bound`, as text), the upstream,
 * the store, the worker count (`workers`), the fallback limit, the rules' count, max-held and
 * the trusted proxies; then one line per limit of every rule.
 */
std::vector<std::string>
summary_lines(const config::config& cfg, std::string_view bound, std::size_t workers);

/**
 * The `rate-limit.redis` keys that differ between the running configuration and `next` and
 * need a restart: the running store's connections were made with them. Empty when none does, or
 * when the running store is not Redis. (`ttl` and `failure-mode` apply on reload.) When `next`
 * differs in them and is not on Redis (`store: memory`, its redis section dropped), the store is
 * what the operator changed: "rate-limit.store" alone. Each key is named where `next`'s file
 * sets it (`config::located_key`: "rate-limit.redis.port (sluice.yaml:9)").
 */
std::string redis_restart_keys(const config::config& running, const config::config& next);

/**
 * Puts back in `next` the running values of the keys a reload leaves as they run (what was
 * built with them at start-up: the listener, the workers, the store and the admin listener),
 * so that nothing reads the file's values while the running ones are in use; returns the keys
 * whose value the file changed ("server.listen (sluice.yaml:2), rate-limit.store
 * (sluice.yaml:7)", each where `next`'s file sets it), empty when none.
 */
std::string keep_restart_only_keys(const config::config& running, config::config& next);

} // namespace sluice::app
