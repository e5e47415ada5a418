// SPDX-License-Identifier: Apache-2.0
#pragma once

// A Redis Cluster client for one worker (issue 16, docs/redis-cluster.md): it learns the slot
// map, sends each command to the primary that owns its slot over one pipelined `redis::client`
// per primary, follows MOVED, ASK and TRYAGAIN within the command's deadline, and refreshes the
// map by itself after a redirection, a failover or a lost node.

#include "sluice/config/config.hpp"
#include "sluice/redis/client.hpp"
#include "sluice/redis/cluster_slots.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::redis {

/// `cluster_options::max_other_nodes` unless set: what app/connection_cap.hpp reckons.
inline constexpr std::size_t default_max_other_nodes = 16;

struct cluster_options {
    /// Asked for the map in order when no node of the current map answers.
    std::vector<config::endpoint_address> seeds;
    /// Every data node's connection (credentials, timeouts); its host and port are the node's.
    client_options node;
    /// A healthy cluster's map is read again this often: one `CLUSTER SLOTS` per worker.
    milliseconds refresh_interval{5'000};
    /// While a slot has no owner, or a primary is unreachable: what follows a failover.
    milliseconds trouble_interval{250};
    /// At most one refresh per this much for MOVED replies (a reshard sends many at once).
    milliseconds moved_interval{100};
    /// A call answered TRYAGAIN (its keys split by a migration) is sent again after this.
    milliseconds tryagain_delay{5};
    /// At most this many nodes outside the last map read (ASK targets, seeds asked for the map,
    /// primaries a MOVED patched in) are connected to until a map read answers; a MOVED or an ASK
    /// to one more fails the call with `errc::redis_unavailable` and asks for a read. A node an
    /// ASK named stays until a read finds no ASK named it since the read before (a migration's
    /// target may be outside the map: a new primary that owns no slot yet).
    std::size_t max_other_nodes = default_max_other_nodes;

    static cluster_options from_settings(const config::redis_settings& settings);
};

/// What the client has seen, for /metrics. Written by the worker, read from any thread.
struct cluster_counters {
    std::atomic<std::uint64_t> moved{0};
    std::atomic<std::uint64_t> ask{0};
    std::atomic<std::uint64_t> tryagain{0};
    std::atomic<std::uint64_t> refreshes_changed{0};
    std::atomic<std::uint64_t> refreshes_unchanged{0};
    std::atomic<std::uint64_t> refreshes_failed{0};
    std::atomic<std::uint64_t> failovers{0};
};

/**
 * Where a cluster client also counts what it sees, e.g. the process's /metrics counters, shared
 * by every worker's client. Each may be null.
 */
struct cluster_observer {
    std::atomic<std::uint64_t>* moved = nullptr;
    std::atomic<std::uint64_t>* ask = nullptr;
    std::atomic<std::uint64_t>* tryagain = nullptr;
    std::atomic<std::uint64_t>* map_changed = nullptr;
    std::atomic<std::uint64_t>* map_unchanged = nullptr;
    std::atomic<std::uint64_t>* map_failed = nullptr;
    /// A primary that owned slots left the map and another node owns them now: a replica
    /// promoted (or, rarely, a primary resharded empty).
    std::atomic<std::uint64_t>* failovers = nullptr;
    /// The counter of script calls sent to a node ("host:port"), asked once per node.
    std::function<std::atomic<std::uint64_t>*(const std::string& node)> calls_to;
};

/**
 * Single-threaded, like `client`: use it from its executor's thread only (the counters and
 * `covered` excepted). Until the first map arrives, and for a slot the map leaves without an
 * owner, commands fail at once with `errc::redis_unavailable`, so that the caller's failure
 * mode applies without waiting.
 *
 * A command completes as `client`'s do, with these additions:
 * - `MOVED slot host:port`: the slot is patched in this worker's map (the node connected to if
 *   new), the command sent there once more, and the map refreshed soon;
 * - `ASK slot host:port`: `ASKING` and the command are sent back to back on the target's
 *   connection; the map is unchanged;
 * - `TRYAGAIN`: sent again after `tryagain_delay` to the slot's owner;
 * - at most two such redirections, and all within the first send's `command_timeout`: a resent
 *   command gets what remains of it, so nothing waits longer than on one Redis. A command
 *   redirected more often completes with `errc::redis_unavailable`;
 * - `CLUSTERDOWN`, `READONLY` and `MASTERDOWN` replies complete with `errc::redis_unavailable`
 *   (the cluster cannot decide now) and make the map refresh at `trouble_interval`, as a lost
 *   connection does.
 */
class cluster_client {
public:
    using completion_signature = client::completion_signature;
    using handler_type = client::handler_type;

    /// Does not connect yet; call `start()`.
    cluster_client(executor ex, cluster_options options);

    /// Drops every connection; pending commands complete with `errc::redis_unavailable`.
    ~cluster_client();

    cluster_client(const cluster_client&) = delete;
    cluster_client& operator=(const cluster_client&) = delete;

    /// Connects to the first seed and reads the map from it (or the next seeds). Idempotent.
    void start();

    /// Stops refreshing and disconnects every node gracefully; final.
    void stop();

    /// A set-up command for every data node's connections (see `client::add_connect_command`).
    void add_connect_command(std::vector<std::string> args,
                             if_refused refused = if_refused::fail_setup);

    /**
     * Sends `command` (RESP, see `command_writer`) to the owner of `slot`: every key the command
     * names must hash to that slot (`key_slot`). The command is copied, so it need only live
     * until the operation starts.
     */
    template <typename CompletionToken = net::default_completion_token_t<executor>>
    auto
    async_formatted(std::uint16_t slot, std::string_view command, CompletionToken&& token = {}) {
        return net::async_initiate<CompletionToken, completion_signature>(
            [this](auto handler, std::uint16_t s, std::string_view resp) {
                submit(s, resp, handler_type(std::move(handler)));
            },
            token,
            slot,
            command);
    }

    /// The map this worker routes by; null before the first one.
    std::shared_ptr<const slot_map> map() const noexcept;

    /// Whether the map covers every slot and every primary owning one is connected. Safe from any
    /// thread; updated at each refresh and redirection.
    bool healthy() const noexcept;

    const cluster_counters& counters() const noexcept;

    /// Nodes connected to (or being connected to) now: the map's primaries, and until the next
    /// map read, a seed asked for the map or a node an `ASK` named that the map does not name.
    std::size_t node_count() const noexcept;

    /// Counts into `observer` from now on, as well as into `counters()`.
    void set_observer(cluster_observer observer);

    const executor& get_executor() const noexcept { return ex_; }

private:
    void submit(std::uint16_t slot, std::string_view command, handler_type handler);

    struct state;
    executor ex_;
    std::shared_ptr<state> state_;
};

} // namespace sluice::redis
