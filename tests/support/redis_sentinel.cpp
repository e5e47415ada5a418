// SPDX-License-Identifier: Apache-2.0
#include "support/redis_sentinel.hpp"

#include "support/resp_client.hpp"

#include <stdexcept>
#include <thread>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

/// The value of `field` in a flat [field, value, ...] reply (SENTINEL MASTER); empty if absent.
std::string pair_field(const resp_value& v, const std::string& field) {
    for (std::size_t i = 0; i + 1 < v.elements.size(); i += 2) {
        if (v.elements[i].text == field) {
            return v.elements[i + 1].text;
        }
    }
    return {};
}

std::string role_of(std::uint16_t port) {
    const auto r = command_or_error(port, {"ROLE"});
    return r.type == resp_value::kind::array && !r.elements.empty() ? r.elements[0].text : "";
}

} // namespace

bool redis_sentinel::available() {
    return redis_server::available();
}

redis_sentinel::redis_sentinel(std::size_t sentinels) {
    // No replication delay, so that the replica is in sync at once.
    redis_server::options primary;
    primary.extra_args = {"--repl-diskless-sync-delay", "0"};
    nodes_.push_back(std::make_unique<redis_server>(primary));
    redis_server::options replica;
    replica.extra_args = {"--replicaof",
                          "127.0.0.1",
                          std::to_string(nodes_[0]->port()),
                          "--repl-diskless-sync-delay",
                          "0"};
    nodes_.push_back(std::make_unique<redis_server>(replica));
    const std::string name = master_name;
    for (std::size_t i = 0; i < sentinels; ++i) {
        redis_server::options sentinel;
        sentinel.sentinel_config = {
            "sentinel monitor " + name + " 127.0.0.1 " + std::to_string(nodes_[0]->port()) + " 2",
            "sentinel down-after-milliseconds " + name + " 1000",
            "sentinel failover-timeout " + name + " 3000",
        };
        sentinels_.push_back(std::make_unique<redis_server>(sentinel));
    }
    wait_healthy();
}

std::vector<config::endpoint_address> redis_sentinel::sentinel_addresses() const {
    std::vector<config::endpoint_address> out;
    for (const auto& s : sentinels_) {
        out.push_back({s->host(), s->port()});
    }
    return out;
}

config::redis_settings redis_sentinel::settings() const {
    config::redis_settings s;
    s.topology = config::redis_topology::sentinel;
    s.sentinel.master = master_name;
    s.sentinel.nodes = sentinel_addresses();
    return s;
}

std::optional<std::size_t> redis_sentinel::primary(std::size_t i) {
    const auto r = command_or_error(sentinels_.at(i)->port(),
                                    {"SENTINEL", "get-master-addr-by-name", master_name});
    if (r.type != resp_value::kind::array || r.elements.size() != 2) {
        return std::nullopt;
    }
    for (std::size_t n = 0; n < nodes_.size(); ++n) {
        if (std::to_string(nodes_[n]->port()) == r.elements[1].text) {
            return n;
        }
    }
    return std::nullopt;
}

void redis_sentinel::failover() {
    const auto r =
        command_or_error(sentinels_.at(0)->port(), {"SENTINEL", "failover", master_name});
    if (r.type != resp_value::kind::status) {
        throw std::runtime_error("SENTINEL failover: " + r.describe());
    }
}

std::size_t redis_sentinel::wait_switched(std::size_t old_primary,
                                          std::chrono::milliseconds limit) {
    const auto deadline = steady::now() + limit;
    std::string missing;
    while (steady::now() < deadline) {
        std::optional<std::size_t> agreed;
        bool all = true;
        for (std::size_t i = 0; i < sentinels_.size() && all; ++i) {
            if (!sentinels_[i]->running()) {
                continue;
            }
            const auto p = primary(i);
            all = p && *p != old_primary && (!agreed || *agreed == *p);
            agreed = p;
            if (!all) {
                missing = "Sentinel " + std::to_string(i) + " still names " +
                          (p ? "node " + std::to_string(*p) : std::string("no node"));
            }
        }
        if (all && agreed) {
            if (role_of(nodes_[*agreed]->port()) == "master") {
                return *agreed;
            }
            missing = "node " + std::to_string(*agreed) + " does not answer ROLE master yet";
        }
        // Polling: Sentinel offers nothing to block on from here.
        std::this_thread::sleep_for(20ms);
    }
    throw std::runtime_error("no switch within the limit: " + missing);
}

bool redis_sentinel::wait_role(std::size_t i,
                               const std::string& role,
                               std::chrono::milliseconds limit) {
    const auto deadline = steady::now() + limit;
    while (steady::now() < deadline) {
        if (role_of(nodes_.at(i)->port()) == role) {
            return true;
        }
        std::this_thread::sleep_for(20ms);
    }
    return false;
}

void redis_sentinel::wait_healthy(std::chrono::milliseconds limit) {
    const auto deadline = steady::now() + limit;
    std::string missing;
    while (steady::now() < deadline) {
        missing.clear();
        const auto p = primary(0);
        if (!p) {
            missing = "Sentinel 0 names no primary";
        }
        for (std::size_t n = 0; p && n < nodes_.size() && missing.empty(); ++n) {
            if (n == *p || !nodes_[n]->running()) {
                continue;
            }
            const auto info = command_or_error(nodes_[n]->port(), {"INFO", "replication"});
            if (info_field(info.text, "master_link_status") != "up") {
                missing = "replica " + std::to_string(n) + "'s link is not up";
            }
        }
        std::size_t live = 0;
        for (const auto& s : sentinels_) {
            live += s->running() ? 1 : 0;
        }
        for (std::size_t i = 0; i < sentinels_.size() && missing.empty(); ++i) {
            if (!sentinels_[i]->running()) {
                continue;
            }
            const auto m =
                command_or_error(sentinels_[i]->port(), {"SENTINEL", "master", master_name});
            const auto replicas = pair_field(m, "num-slaves");
            const auto others = pair_field(m, "num-other-sentinels");
            if (replicas.empty() || replicas == "0" || others != std::to_string(live - 1)) {
                missing = "Sentinel " + std::to_string(i) + " sees " +
                          (replicas.empty() ? "?" : replicas) + " replicas and " +
                          (others.empty() ? "?" : others) + " other Sentinels";
            }
        }
        if (missing.empty()) {
            return;
        }
        // Polling: Sentinels learn of each other by hello messages every 2 s.
        std::this_thread::sleep_for(20ms);
    }
    throw std::runtime_error("Sentinel deployment not healthy within the limit: " + missing);
}

} // namespace sluice::test
