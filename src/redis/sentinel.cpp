// SPDX-License-Identifier: Apache-2.0
#include "sluice/redis/sentinel.hpp"

#include "sluice/core/escaped_exception.hpp"
#include "sluice/core/log_excerpt.hpp"
#include "sluice/core/log_throttle.hpp"
#include "sluice/redis/backoff.hpp"
#include "sluice/redis/cluster_slots.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <mutex>
#include <optional>
#include <random>
#include <utility>

// The watcher is one coroutine on the control thread, `run`, looping: wait until the next round
// is due, ask the Sentinels in order (from the last to answer), act on the answer, set the next
// round (recheck_interval after an answer, the backoff after none). `rediscover` only brings the
// next round forward; `refused` also moves its start past the Sentinel that named the primary a
// data client's ROLE check refused. A `+switch-master` heard meanwhile is acted on at once, and
// bumps `epoch_`: an answer to a round that began before it is dropped, since its Sentinel may have
// spoken before the switch.
//
// Pub/sub keeps nothing for a subscriber that is away, and a Sentinel that has not yet heard of
// a switch still names the old primary, so no single source is trusted alone: a switch heard
// moves the workers at once; an answer moves them too unless it names, within `stale_hold` of a
// switch heard, the address switched from (that Sentinel is behind). The data clients' ROLE
// check refuses a node the Sentinels name too early (not promoted yet) or too late (demoted).

namespace sluice::redis {
namespace {

using steady = std::chrono::steady_clock;

constexpr std::string_view switch_channel = "+switch-master";

std::optional<std::uint16_t> parse_port(std::string_view text) {
    unsigned value = 0;
    const auto* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, value);
    if (ec != std::errc{} || ptr != end || value == 0 || value > 65535) {
        return std::nullopt;
    }
    return static_cast<std::uint16_t>(value);
}

/// "No Sentinel answered" and the like: each kind of line at most once per 10 s (a line that
/// quotes a Sentinel is keyed by kind, not by its text).
keyed_log_throttle& sentinel_log() {
    static keyed_log_throttle throttle{std::chrono::seconds(10)};
    return throttle;
}

} // namespace

// The host is checked as a Cluster node's is: a Sentinel's text would otherwise be connected to
// (a leading '/' as a unix socket path, sent AUTH), logged and kept, at any length.
std::optional<config::endpoint_address> parse_master_address(const reply& r) {
    if (r.type != reply::kind::array || r.elements.size() != 2 ||
        r.elements[0].type != reply::kind::string || r.elements[1].type != reply::kind::string ||
        !is_node_host(r.elements[0].str)) {
        return std::nullopt;
    }
    const auto port = parse_port(r.elements[1].str);
    if (!port) {
        return std::nullopt;
    }
    return config::endpoint_address{r.elements[0].str, *port};
}

std::optional<master_switch> parse_switch_master(std::string_view payload) {
    // A sixth word is enough to refuse it: a message may be up to 16 MiB, and none of it past
    // that is read.
    std::array<std::string_view, 6> words;
    std::size_t count = 0;
    while (!payload.empty() && count < words.size()) {
        const auto space = payload.find(' ');
        const auto word = payload.substr(0, space);
        if (!word.empty()) {
            words[count++] = word;
        }
        payload.remove_prefix(space == std::string_view::npos ? payload.size() : space + 1);
    }
    if (count != 5) {
        return std::nullopt;
    }
    const auto from_port = parse_port(words[2]);
    const auto to_port = parse_port(words[4]);
    if (!from_port || !to_port || !is_node_host(words[1]) || !is_node_host(words[3])) {
        return std::nullopt;
    }
    return master_switch{std::string(words[0]),
                         {std::string(words[1]), *from_port},
                         {std::string(words[3]), *to_port}};
}

connect_check primary_role_check(std::string master) {
    return {{"ROLE"}, [master = std::move(master)](const reply& r, const std::string& where) {
                const bool shaped = r.type == reply::kind::array && !r.elements.empty() &&
                                    r.elements[0].type == reply::kind::string;
                if (shaped && r.elements[0].str == "master") {
                    return std::string();
                }
                if (shaped && r.elements[0].str == "slave") {
                    return fmt::format("redis: {} is a replica, not the primary of '{}'; asking "
                                       "the Sentinels again",
                                       where,
                                       master);
                }
                return fmt::format(
                    "redis: {} answers ROLE {}, not the primary of '{}'; asking the "
                    "Sentinels again",
                    where,
                    log_excerpt(shaped ? r.elements[0].str : r.describe(log_excerpt_bytes)),
                    master);
            }};
}

client_options
sentinel_data_options(const config::redis_settings& settings,
                      std::function<void()> on_trouble,
                      std::function<void(const config::endpoint_address&)> on_refused) {
    auto o = client_options::from_settings(settings);
    o.host.clear();
    o.port = 0;
    o.check = primary_role_check(settings.sentinel.master);
    o.on_trouble = std::move(on_trouble);
    o.on_refused = std::move(on_refused);
    return o;
}

sentinel_options sentinel_options::from_settings(const config::redis_settings& settings) {
    sentinel_options o;
    o.master = settings.sentinel.master;
    o.nodes = settings.sentinel.nodes;
    o.sentinel.password = settings.sentinel.password;
    o.sentinel.command_timeout = settings.connect_timeout;
    o.sentinel.connect_timeout = settings.connect_timeout;
    o.sentinel.stall_timeout = settings.connect_timeout;
    return o;
}

//------------------------------------------------------------------------------

struct sentinel_watcher::state : std::enable_shared_from_this<sentinel_watcher::state> {
    state(const executor& ex, sentinel_options o, primary_handler on_primary)
        : ex_(ex)
        , opts_(std::move(o))
        , on_primary_(std::move(on_primary))
        , timer_(ex)
        , rng_(std::random_device{}())
        , backoff_(opts_.sentinel.reconnect_min, opts_.sentinel.reconnect_max) {}

    void start() {
        if (started_ || stopped_ || opts_.nodes.empty()) {
            return;
        }
        started_ = true;
        for (const auto& node : opts_.nodes) {
            auto o = opts_.sentinel;
            o.host = node.host;
            o.port = node.port;
            askers_.push_back(std::make_unique<client>(ex_, std::move(o)));
            askers_.back()->start();
        }
        // Not connected anywhere until a Sentinel has answered (`listen_on`).
        auto o = opts_.sentinel;
        o.host.clear();
        o.on_trouble = [weak = weak_from_this()] {
            if (auto self = weak.lock()) {
                self->listener_lost();
            }
        };
        listener_ = std::make_unique<client>(ex_, std::move(o));
        listener_->subscribe(std::string(switch_channel),
                             [weak = weak_from_this()](const std::string& payload) {
                                 if (auto self = weak.lock()) {
                                     self->heard(payload);
                                 }
                             });
        listener_->start();
        net::co_spawn(ex_, run(shared_from_this()), log_escaped{"sentinel watch"});
    }

    void stop() {
        if (stopped_) {
            return;
        }
        stopped_ = true;
        timer_.cancel();
        for (auto& a : askers_) {
            a->stop();
        }
        if (listener_) {
            listener_->stop();
        }
    }

    // The coroutine holds `self`, so the state outlives it whatever the watcher does.
    awaitable<void> run(std::shared_ptr<state> self) {
        while (!self->stopped_) {
            if (steady::now() < next_round_) {
                timer_.expires_at(next_round_);
                [[maybe_unused]] auto [ec] = co_await timer_.async_wait();
                continue; // due, brought forward (cancelled), or stopped: look again
            }
            last_round_ = steady::now();
            asking_ = true;
            const bool answered = co_await ask_round();
            asking_ = false;
            if (answered) {
                backoff_.reset();
                next_round_ = steady::now() + opts_.recheck_interval;
            } else {
                next_round_ = steady::now() + backoff_.next(rng_);
            }
        }
    }

    // Asks each Sentinel in order, from `first_`, until one names the primary. True when one
    // did. The round after a refusal starts past the Sentinel whose answer was refused, and
    // later rounds start with the one that answered: asked first again, a Sentinel cut off from
    // the others during a failover would name the old primary every time.
    awaitable<bool> ask_round() {
        const auto epoch = epoch_;
        refused_in_round_.reset();
        const std::vector<std::string> command{"SENTINEL", "get-master-addr-by-name", opts_.master};
        const auto first = first_;
        // The first answer passed over for naming the node refused meanwhile: taken after all
        // when no Sentinel names another (a failover's new primary refused by ROLE before its
        // promotion was done: every Sentinel names it).
        std::optional<std::pair<std::size_t, config::endpoint_address>> passed_over;
        const auto take = [&](std::size_t i, const config::endpoint_address& address) {
            first_ = i;
            if (epoch == epoch_) {
                follow(address, config::format_address(opts_.nodes[i]), false);
                if (primary() == address) {
                    named_by_ = i;
                }
            }
            listen_on(i);
        };
        for (std::size_t k = 0; k < askers_.size(); ++k) {
            const auto i = (first + k) % askers_.size();
            auto [ec, r] = co_await askers_[i]->async_command(command);
            if (stopped_) {
                co_return false;
            }
            const auto where = config::format_address(opts_.nodes[i]);
            if (ec) {
                spdlog::debug("sentinel: {} did not answer: {}{}",
                              where,
                              ec.message(),
                              r.str.empty() ? "" : " (" + log_excerpt(r.str) + ")");
                continue;
            }
            const auto address = parse_master_address(r);
            if (!address) {
                // Keyed by the Sentinel, not by the line: its answer, quoted, could vary forever.
                log_throttled_by(sentinel_log(),
                                 "no primary from " + where,
                                 spdlog::level::warn,
                                 "sentinel: {} does not know the primary of '{}' (it answered {})",
                                 where,
                                 opts_.master,
                                 log_excerpt(r.describe(log_excerpt_bytes)));
                continue;
            }
            if (refused_in_round_ == *address) {
                // A ROLE check refused it while this round was out: this Sentinel names it
                // still (cut off from the others, or a failover not over), so ask the next, as
                // the round after the refusal would have, and still within this one.
                spdlog::debug("sentinel: {} names {}, refused meanwhile; asking the next",
                              where,
                              config::format_address(*address));
                if (!passed_over) {
                    passed_over.emplace(i, *address);
                }
                continue;
            }
            take(i, *address);
            co_return true;
        }
        if (passed_over) {
            take(passed_over->first, passed_over->second);
            co_return true;
        }
        log_throttled(sentinel_log(),
                      spdlog::level::warn,
                      "sentinel: no Sentinel named the primary of '{}' ({} asked); asking again",
                      opts_.master,
                      askers_.size());
        co_return false;
    }

    // The primary is at `address`, according to `source` (a Sentinel's answer, or the switch it
    // announced when `switched`).
    void follow(const config::endpoint_address& address, const std::string& source, bool switched) {
        std::optional<config::endpoint_address> previous;
        {
            const std::lock_guard lock(mutex_);
            if (primary_ == address) {
                return;
            }
            if (!switched && last_switch_ && address == last_switch_->from &&
                steady::now() - last_switch_at_ < opts_.stale_hold) {
                spdlog::debug("sentinel: {} still names {}, switched from; ignored",
                              source,
                              config::format_address(address));
                return;
            }
            previous = primary_;
            primary_ = address;
        }
        named_by_.reset(); // until the caller says which Sentinel named it
        if (previous) {
            switches_.fetch_add(1, std::memory_order_relaxed);
            // At most a line a second: a flapping (or hostile) Sentinel announces at its own
            // pace. switches() counts every one.
            static log_throttle switches{std::chrono::seconds(1)};
            log_throttled(switches,
                          spdlog::level::warn,
                          "sentinel: the primary of '{}' moved from {} to {} ({}); moving the "
                          "connections",
                          opts_.master,
                          config::format_address(*previous),
                          config::format_address(address),
                          switched ? "+switch-master from " + source : "named by " + source);
        } else {
            spdlog::info("sentinel: the primary of '{}' is {} (named by {})",
                         opts_.master,
                         config::format_address(address),
                         source);
        }
        on_primary_(address);
    }

    // A Sentinel answered: listen there unless the subscription is up elsewhere.
    void listen_on(std::size_t i) {
        if (listening_to_ == i || (listening_to_ && listener_->connected())) {
            return;
        }
        listening_to_ = i;
        listener_->retarget(opts_.nodes[i].host, opts_.nodes[i].port);
    }

    std::optional<config::endpoint_address> primary() const {
        const std::lock_guard lock(mutex_);
        return primary_;
    }

    // A data client's ROLE check refused `address`. Every worker reports the same refusal, and
    // one may arrive after the primary moved on: only a refusal of the primary followed, as a
    // Sentinel's answer named it, moves the next round's start past that Sentinel (set, not
    // advanced, so that the reports of one refusal move it once).
    void refused(const config::endpoint_address& address) {
        {
            const std::lock_guard lock(mutex_);
            // The primary a switch named refuses to be one: the primary may have moved back
            // since (a failback whose announcement was missed), so a Sentinel that names the one
            // switched from is no longer taken for one that has not heard of the switch; ignored
            // for stale_hold, every answer would be, and each refusal would ask again.
            if (last_switch_ && last_switch_->to == address && primary_ == address) {
                last_switch_.reset();
            }
        }
        if (asking_) {
            // The round out may hear it named again: it asks on (ask_round). A round in progress
            // answers for now, so soon() does nothing then, and the round that ends would set
            // the start back to the Sentinel that answered.
            refused_in_round_ = address;
        }
        if (named_by_ && primary() == address) {
            first_ = (*named_by_ + 1) % askers_.size();
        }
        soon();
    }

    // The listener's Sentinel went away (or refused it): the next round that gets an answer
    // moves it there.
    void listener_lost() {
        if (listening_to_ && !listener_->connected()) {
            listening_to_.reset();
            soon();
        }
    }

    void heard(const std::string& payload) {
        const auto message = parse_switch_master(payload);
        if (!message) {
            log_throttled_by(sentinel_log(),
                             "unreadable +switch-master",
                             spdlog::level::warn,
                             "sentinel: ignored a +switch-master it could not read: {}",
                             log_excerpt(payload));
            return;
        }
        if (message->name != opts_.master) {
            return;
        }
        ++epoch_;
        {
            const std::lock_guard lock(mutex_);
            last_switch_ = message;
            last_switch_at_ = steady::now();
        }
        follow(message->to,
               listening_to_ ? config::format_address(opts_.nodes[*listening_to_])
                             : std::string("a Sentinel"),
               true);
    }

    // Brings the next round forward, to at least `min_interval` after the last one began. A
    // round in progress answers for now.
    void soon() {
        if (stopped_ || asking_) {
            return;
        }
        const auto at = std::max(steady::now(), last_round_ + opts_.min_interval);
        if (at < next_round_) {
            next_round_ = at;
            timer_.cancel();
        }
    }

    executor ex_;
    sentinel_options opts_;
    primary_handler on_primary_;
    steady_timer timer_;
    std::minstd_rand rng_;
    reconnect_backoff backoff_;
    std::vector<std::unique_ptr<client>> askers_;
    std::unique_ptr<client> listener_;
    std::optional<std::size_t> listening_to_;
    /// The Sentinel asked first in a round.
    std::size_t first_ = 0;
    /// The Sentinel whose answer named `primary_`; none when a switch heard named it.
    std::optional<std::size_t> named_by_;
    bool started_ = false;
    bool stopped_ = false;
    bool asking_ = false;
    /// An address a ROLE check refused while the round was out.
    std::optional<config::endpoint_address> refused_in_round_;
    steady::time_point next_round_{};
    steady::time_point last_round_{};
    std::uint64_t epoch_ = 0;
    mutable std::mutex mutex_; // primary_ and the last switch, read from other threads
    std::optional<config::endpoint_address> primary_;
    std::optional<master_switch> last_switch_;
    steady::time_point last_switch_at_{};
    std::atomic<std::uint64_t> switches_{0};
};

//------------------------------------------------------------------------------

sentinel_watcher::sentinel_watcher(executor ex,
                                   sentinel_options options,
                                   primary_handler on_primary)
    : state_(std::make_shared<state>(ex, std::move(options), std::move(on_primary))) {}

sentinel_watcher::~sentinel_watcher() {
    state_->stop();
}

void sentinel_watcher::start() {
    state_->start();
}

void sentinel_watcher::stop() {
    state_->stop();
}

void sentinel_watcher::rediscover() {
    net::post(state_->ex_, [weak = std::weak_ptr(state_)] {
        if (auto self = weak.lock()) {
            self->soon();
        }
    });
}

void sentinel_watcher::refused(config::endpoint_address address) {
    net::post(state_->ex_, [weak = std::weak_ptr(state_), address = std::move(address)] {
        if (auto self = weak.lock()) {
            self->refused(address);
        }
    });
}

std::optional<config::endpoint_address> sentinel_watcher::primary() const {
    return state_->primary();
}

std::uint64_t sentinel_watcher::switches() const noexcept {
    return state_->switches_.load(std::memory_order_relaxed);
}

bool sentinel_watcher::listening() const noexcept {
    return state_->listener_ && state_->listener_->connected() &&
           state_->listener_->subscription_count() > 0;
}

} // namespace sluice::redis
