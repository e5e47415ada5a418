// SPDX-License-Identifier: Apache-2.0
#include "support/redis_cluster.hpp"

#include "support/resp_client.hpp"
#include "support/sluice_process.hpp"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <unistd.h>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

std::string run_cli(const std::vector<std::string>& args, std::chrono::milliseconds limit) {
    const auto cli = find_on_path("redis-cli");
    const auto result = run_command(cli, args, limit);
    if (result.timed_out || result.exit_code != 0) {
        throw std::runtime_error("redis-cli failed (" +
                                 std::string(result.timed_out ? "timed out" : "exit status") +
                                 "):\n" + result.output);
    }
    return result.output;
}

} // namespace

bool redis_cluster::available() {
    return redis_server::available() && !find_on_path("redis-cli").empty();
}

redis_cluster::redis_cluster(options opts) {
    const auto count = opts.primaries * (1 + opts.replicas_per_primary);
    redis_server::options node_options;
    node_options.cluster_enabled = true;
    // A short node timeout makes a failover take about 2.5 s; no replication delay, so that a
    // replica is in sync at once (docs/redis-cluster.md, "Measured here").
    node_options.extra_args = {"--cluster-node-timeout", "1000", "--repl-diskless-sync-delay", "0"};
    for (std::size_t i = 0; i < count; ++i) {
        nodes_.push_back(std::make_unique<redis_server>(node_options));
    }
    std::vector<std::string> args{"--cluster", "create"};
    for (const auto& n : nodes_) {
        args.push_back(n->host() + ":" + std::to_string(n->port()));
    }
    args.insert(args.end(),
                {"--cluster-replicas", std::to_string(opts.replicas_per_primary), "--cluster-yes"});
    run_cli(args, 30s);
    wait_healthy();
}

std::vector<config::endpoint_address> redis_cluster::addresses() const {
    std::vector<config::endpoint_address> out;
    for (const auto& n : nodes_) {
        out.push_back({n->host(), n->port()});
    }
    return out;
}

config::redis_settings redis_cluster::settings(std::vector<config::endpoint_address> seeds) const {
    config::redis_settings s;
    s.topology = config::redis_topology::cluster;
    s.cluster = seeds.empty() ? addresses() : std::move(seeds);
    return s;
}

std::optional<std::size_t> redis_cluster::index_of(std::uint16_t port) const {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
        if (nodes_[i]->port() == port) {
            return i;
        }
    }
    return std::nullopt;
}

std::optional<std::size_t> redis_cluster::owner_of(std::uint16_t slot) {
    for (const auto& n : nodes_) {
        if (!n->running()) {
            continue;
        }
        const auto r = command_or_error(n->port(), {"CLUSTER", "SLOTS"});
        if (r.type != resp_value::kind::array) {
            continue;
        }
        for (const auto& range : r.elements) {
            if (range.elements.size() >= 3 && range.elements[0].integer <= slot &&
                slot <= range.elements[1].integer) {
                return index_of(
                    static_cast<std::uint16_t>(range.elements[2].elements.at(1).integer));
            }
        }
        return std::nullopt;
    }
    return std::nullopt;
}

std::vector<std::size_t> redis_cluster::primaries() {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
        if (!nodes_[i]->running()) {
            continue;
        }
        const auto role = command_or_error(nodes_[i]->port(), {"ROLE"});
        if (role.type == resp_value::kind::array && !role.elements.empty() &&
            role.elements[0].text == "master") {
            out.push_back(i);
        }
    }
    return out;
}

std::string redis_cluster::node_id(std::size_t i) {
    const auto r = command_or_error(node(i).port(), {"CLUSTER", "MYID"});
    if (r.type != resp_value::kind::string) {
        throw std::runtime_error("CLUSTER MYID failed: " + r.describe());
    }
    return r.text;
}

void redis_cluster::move_slots(std::size_t from, std::size_t to, int count) {
    const auto& any = node(from);
    run_cli({"--cluster",
             "reshard",
             any.host() + ":" + std::to_string(any.port()),
             "--cluster-from",
             node_id(from),
             "--cluster-to",
             node_id(to),
             "--cluster-slots",
             std::to_string(count),
             "--cluster-yes"},
            60s);
    wait_healthy();
}

void redis_cluster::wait_healthy(std::chrono::milliseconds limit) {
    const auto deadline = steady::now() + limit;
    std::string missing;
    while (true) {
        missing.clear();
        for (const auto& n : nodes_) {
            if (!n->running()) {
                continue;
            }
            const auto port = std::to_string(n->port());
            const auto info = command_or_error(n->port(), {"CLUSTER", "INFO"});
            if (info_field(info.text, "cluster_state") != "ok") {
                missing += " " + port + ":cluster_state";
            }
            const auto replication = command_or_error(n->port(), {"INFO", "replication"});
            if (info_field(replication.text, "role") == "slave" &&
                info_field(replication.text, "master_link_status") != "up") {
                missing += " " + port + ":master_link";
            }
        }
        if (missing.empty()) {
            return;
        }
        if (steady::now() >= deadline) {
            throw std::runtime_error("the Redis Cluster is not healthy after " +
                                     std::to_string(limit.count()) + " ms; missing:" + missing);
        }
        // Polling with a deadline: the cluster announces its state to no one.
        std::this_thread::sleep_for(20ms);
    }
}

} // namespace sluice::test
