// SPDX-License-Identifier: Apache-2.0
#include "sluice/redis/cluster_client.hpp"

#include "sluice/core/log_excerpt.hpp"
#include "sluice/core/log_throttle.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <utility>

// The worker's cluster client owns one `redis::client` per node it talks to: the primaries of
// its map, and a seed while it asks one for the map. A command is a `call` that remembers its
// RESP text and deadline until it is answered, because a redirection sends it again. Each
// worker reads the map itself (one CLUSTER SLOTS per worker every 5 s; no state crosses
// threads), patches it on MOVED, and reads it again soon after any sign of trouble.
//
// One file for the reason client.cpp gives: the map, the nodes' clients and the calls in flight
// are one state, which a redirection, a map read and a node's loss each change together.

namespace sluice::redis {
namespace {

using steady = std::chrono::steady_clock;
using handler_type = cluster_client::handler_type;

bool starts_with(std::string_view text, std::string_view prefix) noexcept {
    return text.substr(0, prefix.size()) == prefix;
}

/// Replies that say the cluster cannot take this command now, wherever it is sent.
bool cluster_trouble(std::string_view error) noexcept {
    return starts_with(error, "CLUSTERDOWN") || starts_with(error, "READONLY") ||
           starts_with(error, "MASTERDOWN");
}

void add(std::atomic<std::uint64_t>& own, std::atomic<std::uint64_t>* shared) noexcept {
    own.fetch_add(1, std::memory_order_relaxed);
    if (shared != nullptr) {
        shared->fetch_add(1, std::memory_order_relaxed);
    }
}

log_throttle& map_log() {
    static log_throttle throttle{std::chrono::seconds(10)};
    return throttle;
}

} // namespace

cluster_options cluster_options::from_settings(const config::redis_settings& settings) {
    cluster_options o;
    o.seeds = settings.cluster;
    o.node = client_options::from_settings(settings);
    return o;
}

struct cluster_client::state : std::enable_shared_from_this<state> {
    /// One command until its reply: a redirection sends it again.
    struct call {
        // Move-constructed: Boost 1.81's any_completion_handler assignment wraps the handler
        // in another one instead of moving it.
        call(std::uint16_t s, std::string_view resp, handler_type h, steady::time_point d)
            : slot(s)
            , command(resp)
            , handler(std::move(h))
            , deadline(d) {}

        std::uint16_t slot = 0;
        std::string command;
        handler_type handler;
        steady::time_point deadline;
        int redirections = 0;
        /// Where it was sent last: a MOVED or ASK naming no host means that node.
        config::endpoint_address sent_to;
        /// Armed at the first resend: the deadline then belongs to this call, not the node's.
        std::optional<net::steady_timer> deadline_timer;
        /// TRYAGAIN's pause.
        std::optional<net::steady_timer> retry_timer;
        bool done = false;
    };

    struct node {
        config::endpoint_address address;
        std::unique_ptr<client> conn;
        /// The observer's count of calls sent here; null without one.
        std::atomic<std::uint64_t>* calls = nullptr;
        /// An ASK named it since the last map read: outside the map, it may be the target of a
        /// migration onto a primary that owns no slot yet, which CLUSTER SLOTS does not list.
        bool asked = false;
    };

    state(executor ex, cluster_options opts)
        : ex_(std::move(ex))
        , opts_(std::move(opts))
        , refresh_timer_(ex_)
        , health_timer_(ex_) {}

    //--------------------------------------------------------------------------
    // Nodes

    node& node_for(const config::endpoint_address& address) {
        for (auto& n : nodes_) {
            if (n->address == address) {
                return *n;
            }
        }
        auto o = opts_.node;
        o.host = address.host;
        o.port = address.port;
        auto conn = std::make_unique<client>(ex_, std::move(o));
        for (const auto& command : connect_commands_) {
            conn->add_connect_command(command.args, command.refused);
        }
        conn->start();
        nodes_.push_back(std::make_unique<node>(node{address, std::move(conn), nullptr}));
        if (observer_.calls_to) {
            nodes_.back()->calls = observer_.calls_to(format_address(address));
        }
        return *nodes_.back();
    }

    bool known(const config::endpoint_address& address) const {
        return std::any_of(
            nodes_.begin(), nodes_.end(), [&](const auto& n) { return n->address == address; });
    }

    /// Whether a redirection to `address` would connect to one node too many outside the last
    /// map read: ASK targets, seeds and primaries a MOVED patched in share `max_other_nodes`
    /// until a read answers. Until then, a node redirecting to ever new hosts would have the
    /// worker connect to each (and, for MOVED, grow its map by one primary each time); the call
    /// fails instead, and a read is asked for.
    bool refuse_new_node(const config::endpoint_address& address, redirection::kind kind) {
        if (known(address) || nodes_.size() - read_primaries_ < opts_.max_other_nodes) {
            return false;
        }
        // One throttle each: a warning about one kind does not hide the other's.
        static log_throttle moved_throttle{std::chrono::seconds(10)};
        static log_throttle ask_throttle{std::chrono::seconds(10)};
        const bool moved = kind == redirection::kind::moved;
        log_throttled(moved ? moved_throttle : ask_throttle,
                      spdlog::level::warn,
                      "redis: {} named {}, and {} nodes outside the slot map are connected "
                      "already; giving the command up",
                      moved ? "a MOVED" : "an ASK",
                      log_excerpt(format_address(address)),
                      opts_.max_other_nodes);
        refresh_soon(opts_.trouble_interval);
        return true;
    }

    static config::endpoint_address address_of(const cluster_node& n) { return {n.host, n.port}; }

    /// Routes by `map`: a connection per primary. Nodes it does not name stay until a map read
    /// retires them: a MOVED patches the map, and must neither free the nodes the last read
    /// retired (still draining) nor take an ASK target's mark.
    void install(std::shared_ptr<const slot_map> map) {
        map_ = std::move(map);
        routes_.clear();
        for (const auto& p : map_->primaries) {
            routes_.push_back(&node_for(address_of(p)));
        }
        update_health();
    }

    /// At each answered map read only: nodes the map does not name are stopped (replies in
    /// flight still arrive) and freed at the next answered read; a demoted primary, a seed
    /// replica or a node an ASK named holds no connection for long. At every read, changed or
    /// not: a node answering ASK with ever new hosts would otherwise have the worker keep a
    /// connection to each, reconnecting forever.
    /// A node an ASK named since the last read stays until a read finds it unasked: a migration
    /// onto a new, empty primary sends every ASK there, and retiring it at each read would make
    /// the redirected calls wait for a new connection's set-up, every read.
    void retire_unnamed() {
        retired_.clear();
        for (auto it = nodes_.begin(); it != nodes_.end();) {
            const bool named =
                std::any_of(map_->primaries.begin(),
                            map_->primaries.end(),
                            [&](const cluster_node& p) { return address_of(p) == (*it)->address; });
            if (named || std::exchange((*it)->asked, false)) {
                ++it;
                continue;
            }
            (*it)->conn->stop();
            retired_.push_back(std::move(*it));
            it = nodes_.erase(it);
        }
    }

    node* route(std::uint16_t slot) const noexcept {
        if (!map_ || slot >= cluster_slots) {
            return nullptr;
        }
        const auto owner = map_->owner[slot];
        return owner == slot_map::no_owner ? nullptr : routes_[owner];
    }

    void update_health() {
        bool ok = map_ && map_->covered() == cluster_slots;
        for (const auto* n : routes_) {
            ok = ok && n->conn->connected();
        }
        healthy_.store(ok, std::memory_order_relaxed);
    }

    //--------------------------------------------------------------------------
    // Calls

    void submit(std::uint16_t slot, std::string_view command, handler_type h) {
        node* target = stopped_ ? nullptr : route(slot);
        if (target == nullptr) {
            if (!stopped_) {
                refresh_soon(opts_.trouble_interval);
            }
            net::post(ex_,
                      net::append(std::move(h), make_error_code(errc::redis_unavailable), reply{}));
            return;
        }
        auto c = std::make_shared<call>(
            slot, command, std::move(h), steady::now() + opts_.node.command_timeout);
        send(c, *target, false);
    }

    void send(const std::shared_ptr<call>& c, node& target, bool asking) {
        c->sent_to = target.address;
        if (target.calls != nullptr) {
            target.calls->fetch_add(1, std::memory_order_relaxed);
        }
        auto on_reply = [self = shared_from_this(), c](error_code ec, reply r) {
            self->answered(c, ec, std::move(r));
        };
        if (c->redirections == 0) {
            target.conn->async_formatted(c->command, std::move(on_reply));
            return;
        }
        // A resend ends with the call, not a full timeout after it: held on a connection still
        // being set up, a copy that outlived the call would still be sent, and charge Redis for
        // a request its failure mode decided already.
        if (asking) {
            // Back to back on one connection: nothing of this worker comes in between.
            target.conn->async_command_until(c->deadline, {"ASKING"}, [](error_code, reply) {});
        }
        target.conn->async_formatted_until(c->deadline, c->command, std::move(on_reply));
    }

    void answered(const std::shared_ptr<call>& c, error_code ec, reply r) {
        if (c->done) {
            return; // its own deadline passed already
        }
        if (ec == errc::bad_reply) {
            if (const auto redirect = parse_redirection(r.str, c->sent_to.host)) {
                redirected(c, *redirect);
                return;
            }
            if (cluster_trouble(r.str)) {
                refresh_soon(opts_.trouble_interval);
                finish(c, make_error_code(errc::redis_unavailable), std::move(r));
                return;
            }
        } else if (ec == errc::redis_unavailable) {
            refresh_soon(opts_.trouble_interval);
        }
        finish(c, ec, std::move(r));
    }

    void redirected(const std::shared_ptr<call>& c, const redirection& to) {
        if (stopped_ || c->redirections >= 2 || steady::now() >= c->deadline) {
            static log_throttle throttle{std::chrono::seconds(10)};
            log_throttled(throttle,
                          spdlog::level::warn,
                          "redis: slot {} redirected {} times; giving the command up",
                          c->slot,
                          c->redirections + 1);
            finish(c, make_error_code(errc::redis_unavailable), {});
            return;
        }
        ++c->redirections;
        arm_deadline(c);
        const config::endpoint_address address{to.host, to.port};
        switch (to.type) {
        case redirection::kind::moved:
            add(counters_.moved, observer_.moved);
            if (refuse_new_node(address, to.type)) {
                finish(c, make_error_code(errc::redis_unavailable), {});
                return;
            }
            patch(to.slot, address);
            refresh_soon(opts_.moved_interval);
            send(c, node_for(address), false);
            return;
        case redirection::kind::ask:
            add(counters_.ask, observer_.ask);
            if (refuse_new_node(address, to.type)) {
                finish(c, make_error_code(errc::redis_unavailable), {});
                return;
            }
            {
                auto& target = node_for(address);
                target.asked = true;
                send(c, target, true);
            }
            return;
        case redirection::kind::tryagain:
            add(counters_.tryagain, observer_.tryagain);
            c->retry_timer.emplace(ex_);
            c->retry_timer->expires_after(opts_.tryagain_delay);
            c->retry_timer->async_wait([self = shared_from_this(), c](error_code ec) {
                if (ec || c->done) {
                    return;
                }
                node* target = self->route(c->slot);
                if (target == nullptr) {
                    self->finish(c, make_error_code(errc::redis_unavailable), {});
                    return;
                }
                self->send(c, *target, false);
            });
            return;
        }
    }

    /// A resent command must still end by the first send's deadline.
    void arm_deadline(const std::shared_ptr<call>& c) {
        if (c->deadline_timer) {
            return;
        }
        c->deadline_timer.emplace(ex_);
        c->deadline_timer->expires_at(c->deadline);
        c->deadline_timer->async_wait([self = shared_from_this(), c](error_code ec) {
            if (!ec && !c->done) {
                self->finish(c, make_error_code(errc::redis_timeout), {});
            }
        });
    }

    void finish(const std::shared_ptr<call>& c, error_code ec, reply r) {
        c->done = true;
        if (c->deadline_timer) {
            c->deadline_timer->cancel();
        }
        if (c->retry_timer) {
            c->retry_timer->cancel();
        }
        // Runs inside a posted completion, never inside the submitting call.
        handler_type h(std::move(c->handler));
        std::move(h)(ec, std::move(r));
    }

    /// MOVED: this worker's map says so at once; the refresh brings the rest. Calls pipelined
    /// to one slot are each answered MOVED: only the first changes the map.
    void patch(std::uint16_t slot, const config::endpoint_address& owner) {
        if (const auto* now = map_ ? map_->owner_of(slot) : nullptr;
            now != nullptr && address_of(*now) == owner) {
            return;
        }
        auto next = map_ ? std::make_shared<slot_map>(*map_) : std::make_shared<slot_map>();
        auto it = std::find_if(next->primaries.begin(),
                               next->primaries.end(),
                               [&](const cluster_node& p) { return address_of(p) == owner; });
        if (it == next->primaries.end()) {
            next->primaries.push_back(cluster_node{owner.host, owner.port, {}});
            it = next->primaries.end() - 1;
        }
        next->owner[slot] = static_cast<std::uint16_t>(it - next->primaries.begin());
        install(std::move(next));
    }

    //--------------------------------------------------------------------------
    // The map

    /// Reads the map within `gap` of the last read (at once when that is past).
    void refresh_soon(milliseconds gap) {
        if (stopped_) {
            return;
        }
        const auto at = last_refresh_ + gap;
        if (at <= steady::now()) {
            refresh();
            return;
        }
        arm_refresh(at);
    }

    void arm_refresh(steady::time_point at) {
        if (refresh_armed_ && armed_at_ <= at) {
            return;
        }
        refresh_armed_ = true;
        armed_at_ = at;
        const auto arm = ++refresh_arms_;
        refresh_timer_.expires_at(at);
        refresh_timer_.async_wait([self = shared_from_this(), arm](error_code ec) {
            if (arm != self->refresh_arms_ || ec) {
                return;
            }
            self->refresh_armed_ = false;
            self->refresh();
        });
    }

    void refresh() {
        if (stopped_) {
            return;
        }
        if (refreshing_) {
            refresh_again_ = true;
            return;
        }
        refreshing_ = true;
        last_refresh_ = steady::now();
        // The map's primaries, connected ones first, then the seeds: a seed list that no longer
        // names a live node is fine as long as the map does.
        candidates_.clear();
        if (map_) {
            for (int pass = 0; pass < 2; ++pass) {
                for (std::size_t i = 0; i < map_->primaries.size(); ++i) {
                    if (routes_[i]->conn->connected() == (pass == 0)) {
                        candidates_.push_back(address_of(map_->primaries[i]));
                    }
                }
            }
        }
        for (const auto& seed : opts_.seeds) {
            if (std::find(candidates_.begin(), candidates_.end(), seed) == candidates_.end()) {
                candidates_.push_back(seed);
            }
        }
        ask_for_map(0);
    }

    void ask_for_map(std::size_t index) {
        if (stopped_) {
            refreshing_ = false;
            return;
        }
        if (index >= candidates_.size()) {
            add(counters_.refreshes_failed, observer_.map_failed);
            log_throttled(map_log(),
                          spdlog::level::warn,
                          "redis: no cluster node answered CLUSTER SLOTS ({} asked); trying "
                          "again",
                          candidates_.size());
            refreshed();
            return;
        }
        const auto address = candidates_[index];
        // Within connect-timeout, not the per-decision timeout the node's commands get: a new
        // node's read is held through its connect and set-up (AUTH, SCRIPT and FUNCTION LOAD),
        // and a large cluster's map is a large reply.
        node_for(address).conn->async_command_until(
            steady::now() + opts_.node.connect_timeout,
            {"CLUSTER", "SLOTS"},
            [self = shared_from_this(), index, address](error_code ec, reply r) {
                self->map_answered(index, address, ec, r);
            });
    }

    void map_answered(std::size_t index,
                      const config::endpoint_address& asked,
                      error_code ec,
                      const reply& r) {
        if (ec) {
            ask_for_map(index + 1);
            return;
        }
        auto parsed = parse_cluster_slots(r, asked.host);
        if (!parsed.map) {
            log_throttled(map_log(),
                          spdlog::level::warn,
                          "redis: {} sent a slot map sluice cannot use: {}",
                          format_address(asked),
                          parsed.error);
            ask_for_map(index + 1);
            return;
        }
        const bool changed =
            !map_ || map_->primaries != parsed.map->primaries || map_->owner != parsed.map->owner;
        if (changed) {
            add(counters_.refreshes_changed, observer_.map_changed);
            count_failovers(*parsed.map);
        } else {
            add(counters_.refreshes_unchanged, observer_.map_unchanged);
        }
        if (changed) {
            install(std::make_shared<const slot_map>(std::move(*parsed.map)));
        }
        retire_unnamed();
        read_primaries_ = map_->primaries.size();
        refreshed();
    }

    /// A primary of the current map that owned slots and is no primary of `next`, whose slots
    /// another node owns now, failed over (a reshard moves slots between primaries that stay).
    void count_failovers(const slot_map& next) {
        if (!map_) {
            return;
        }
        for (std::size_t i = 0; i < map_->primaries.size(); ++i) {
            const auto& gone = map_->primaries[i];
            const bool still_primary = std::any_of(
                next.primaries.begin(), next.primaries.end(), [&](const cluster_node& p) {
                    return p.host == gone.host && p.port == gone.port;
                });
            if (still_primary) {
                continue;
            }
            for (std::size_t slot = 0; slot < cluster_slots; ++slot) {
                if (map_->owner[slot] == i && next.owner[slot] != slot_map::no_owner) {
                    add(counters_.failovers, observer_.failovers);
                    // The addresses are the cluster's: a broken or hostile one could change its
                    // map on every read of every worker.
                    static log_throttle throttle{std::chrono::seconds(10)};
                    log_throttled(
                        throttle,
                        spdlog::level::info,
                        "redis: {} owns {}'s slots now (failover)",
                        log_excerpt(format_address(address_of(next.primaries[next.owner[slot]]))),
                        log_excerpt(format_address(address_of(gone))));
                    break;
                }
            }
        }
    }

    void refreshed() {
        refreshing_ = false;
        update_health();
        if (refresh_again_) {
            refresh_again_ = false;
            refresh_soon(opts_.moved_interval);
            return;
        }
        const auto wait = healthy_.load(std::memory_order_relaxed) ? opts_.refresh_interval
                                                                   : opts_.trouble_interval;
        arm_refresh(steady::now() + wait);
    }

    /// A worker that sends nothing must still notice a primary gone (readiness says it, and its
    /// next request should not be the one to find out): every `trouble_interval` it looks at its
    /// connections, and reads the map at that pace while one is down.
    void watch_health() {
        health_timer_.expires_after(opts_.trouble_interval);
        health_timer_.async_wait([self = shared_from_this()](error_code ec) {
            if (ec || self->stopped_) {
                return;
            }
            self->update_health();
            if (!self->healthy_.load(std::memory_order_relaxed)) {
                self->refresh_soon(self->opts_.trouble_interval);
            }
            self->watch_health();
        });
    }

    void stop() {
        stopped_ = true;
        ++refresh_arms_;
        refresh_timer_.cancel();
        health_timer_.cancel();
        for (auto& n : nodes_) {
            n->conn->stop();
        }
    }

    executor ex_;
    cluster_options opts_;
    std::vector<connect_command> connect_commands_;
    std::vector<std::unique_ptr<node>> nodes_;
    std::vector<std::unique_ptr<node>> retired_;
    std::shared_ptr<const slot_map> map_;
    /// By primary index of `map_`: its node.
    std::vector<node*> routes_;
    /// How many primaries the map the last read installed names; each holds a node of `nodes_`
    /// until the next read (a patch only adds primaries), and the nodes beyond them are outside
    /// the map: `max_other_nodes` at most.
    std::size_t read_primaries_ = 0;
    std::atomic<bool> healthy_{false};
    cluster_counters counters_;
    cluster_observer observer_;
    bool stopped_ = false;
    bool started_ = false;

    net::steady_timer refresh_timer_;
    net::steady_timer health_timer_;
    bool refresh_armed_ = false;
    steady::time_point armed_at_;
    std::uint64_t refresh_arms_ = 0;
    bool refreshing_ = false;
    bool refresh_again_ = false;
    steady::time_point last_refresh_;
    std::vector<config::endpoint_address> candidates_;
};

cluster_client::cluster_client(executor ex, cluster_options options)
    : ex_(std::move(ex))
    , state_(std::make_shared<state>(ex_, std::move(options))) {}

cluster_client::~cluster_client() {
    state_->stop();
    state_->nodes_.clear();
    state_->retired_.clear();
    state_->routes_.clear();
    state_->map_.reset();
}

void cluster_client::start() {
    if (state_->started_ || state_->stopped_) {
        return;
    }
    state_->started_ = true;
    state_->refresh();
    state_->watch_health();
}

void cluster_client::stop() {
    state_->stop();
}

void cluster_client::add_connect_command(std::vector<std::string> args, if_refused refused) {
    auto& commands = state_->connect_commands_;
    if (args.empty() || std::any_of(commands.begin(), commands.end(), [&](const auto& c) {
            return c.args == args;
        })) {
        return;
    }
    commands.push_back({args, refused});
    for (auto& n : state_->nodes_) {
        n->conn->add_connect_command(args, refused);
    }
}

void cluster_client::submit(std::uint16_t slot, std::string_view command, handler_type handler) {
    state_->submit(slot, command, std::move(handler));
}

std::shared_ptr<const slot_map> cluster_client::map() const noexcept {
    return state_->map_;
}

bool cluster_client::healthy() const noexcept {
    return state_->healthy_.load(std::memory_order_relaxed);
}

std::size_t cluster_client::node_count() const noexcept {
    return state_->nodes_.size();
}

const cluster_counters& cluster_client::counters() const noexcept {
    return state_->counters_;
}

void cluster_client::set_observer(cluster_observer observer) {
    auto& s = *state_;
    s.observer_ = std::move(observer);
    for (auto& n : s.nodes_) {
        n->calls =
            s.observer_.calls_to ? s.observer_.calls_to(format_address(n->address)) : nullptr;
    }
}

} // namespace sluice::redis
