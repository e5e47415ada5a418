// SPDX-License-Identifier: Apache-2.0
#pragma once

// Redis Sentinel (issue 16, docs/redis-cluster.md "Sentinel"): the primary of a monitored name is
// wherever the Sentinels say. One `sentinel_watcher` per process asks them, hears their
// `+switch-master`, and tells its owner each time the primary's address changes; the data
// clients (one per worker) check every connection with ROLE and are moved with
// `client::retarget`.

#include "sluice/config/config.hpp"
#include "sluice/io/net.hpp"
#include "sluice/redis/client.hpp"
#include "sluice/redis/reply.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::redis {

/// The primary's address in a `SENTINEL get-master-addr-by-name` reply (`[host, port]`); nullopt
/// for nil (that Sentinel does not monitor the name), any other shape, a host that is not
/// `is_node_host` (cluster_slots.hpp) or a port outside 1..65535.
std::optional<config::endpoint_address> parse_master_address(const reply& r);

/// A `+switch-master` message: "<name> <old host> <old port> <new host> <new port>".
struct master_switch {
    std::string name;
    config::endpoint_address from;
    config::endpoint_address to;
};

/// Parses a `+switch-master` payload; nullopt for anything else, hosts and ports checked as
/// `parse_master_address` checks them.
std::optional<master_switch> parse_switch_master(std::string_view payload);

/**
 * The connect check of a data node behind Sentinel: `ROLE`, whose first element must be
 * `master`. A refusal reads `redis: 10.0.0.8:6379 is a replica, not the primary of 'sluice';
 * asking the Sentinels again`.
 */
connect_check primary_role_check(std::string master);

/**
 * A data client's options behind Sentinel: the settings' credentials, database and timeouts, no
 * address yet (the watcher gives it with `client::retarget`), the ROLE check, `on_trouble`
 * (which should ask the watcher to `rediscover`) and `on_refused` (which should tell the
 * watcher `refused`).
 */
client_options
sentinel_data_options(const config::redis_settings& settings,
                      std::function<void()> on_trouble,
                      std::function<void(const config::endpoint_address&)> on_refused = {});

struct sentinel_options {
    /// The name the Sentinels monitor.
    std::string master;
    /// Asked in this order, from the one that answered last (see `sentinel_watcher`).
    std::vector<config::endpoint_address> nodes;
    /// Each Sentinel's connection (its host and port are the node's): AUTH with the Sentinels'
    /// password; an answer not in within `command_timeout` (the settings' connect-timeout)
    /// moves to the next Sentinel.
    client_options sentinel;
    /// The Sentinels are asked again this often while all is well: a `+switch-master` missed
    /// while the subscription was down is caught up with.
    milliseconds recheck_interval{5'000};
    /// At most one round of asking per this much, however many workers report trouble.
    milliseconds min_interval{100};
    /// After a switch heard, an answer naming the address switched from, within this long, is a
    /// Sentinel that has not heard of the switch yet: ignored.
    milliseconds stale_hold{10'000};

    static sentinel_options from_settings(const config::redis_settings& settings);
};

/**
 * Finds and follows the primary of one monitored name. One per process, on the control
 * thread's executor; single-threaded except where a member says otherwise.
 *
 * It asks the Sentinels in order (`SENTINEL get-master-addr-by-name`) over one connection to
 * each, starting with the one that answered last; a nil answer, an error or no answer within
 * the timeout moves to the next; when none answers, it asks again after the reconnect backoff.
 * When the primary a Sentinel named is `refused` (its ROLE says it is not the primary), the
 * next round starts with the Sentinel after that one: a Sentinel cut off from the others during
 * a failover names the old primary forever, and asked first every time it would be the only
 * one heard. It subscribes to `+switch-master` on the
 * first Sentinel that answered (moving to the one answering next when it loses that
 * connection), and asks again every `recheck_interval` and whenever `rediscover` is called
 * (at most once per `min_interval`). Each time the primary's address is first known or
 * changes, `on_primary` runs on the watcher's executor with it.
 */
class sentinel_watcher {
public:
    using primary_handler = std::function<void(const config::endpoint_address&)>;

    /// Does nothing until `start()`.
    sentinel_watcher(executor ex, sentinel_options options, primary_handler on_primary);

    ~sentinel_watcher();

    sentinel_watcher(const sentinel_watcher&) = delete;
    sentinel_watcher& operator=(const sentinel_watcher&) = delete;

    /// Connects to the Sentinels and asks them. Idempotent.
    void start();

    /// Stops asking and listening, and closes the connections; final.
    void stop();

    /// Asks the Sentinels again soon (a worker lost the primary, or was refused by it). Safe
    /// from any thread: posted to the watcher's executor.
    void rediscover();

    /// A data client's ROLE check refused `address`: when that is the primary followed, named by
    /// a Sentinel's answer, the next round (brought forward) starts with the Sentinel after it.
    /// Safe from any thread: posted to the watcher's executor.
    void refused(config::endpoint_address address);

    /// The primary's address as last known; nullopt before the first answer. Safe from any
    /// thread.
    std::optional<config::endpoint_address> primary() const;

    /// Times the primary's address changed after it was first known. Safe from any thread.
    std::uint64_t switches() const noexcept;

    /// True while the `+switch-master` subscription is confirmed on some Sentinel (for tests).
    /// Safe from any thread.
    bool listening() const noexcept;

private:
    struct state;
    std::shared_ptr<state> state_;
};

} // namespace sluice::redis
