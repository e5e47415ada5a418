// SPDX-License-Identifier: Apache-2.0
// The application: configuration → workers, each an io_context on its own thread with its own
// acceptor (a descriptor of the one listening socket), upstream pool and store handle; plus a
// control io_context on the main thread for signals (drain, reload) and the memory store's sweep.
// The process's life in one file, in the order it happens (workers and stores made, started,
// reloaded, drained, stopped), because each step is a handover between the control thread and
// the workers that the next step relies on; what it says of a configuration is
// config_report.cpp's.
#include "sluice/app/app.hpp"

#include "app/config_report.hpp"
#include "app/connection_cap.hpp"
#include "sluice/app/logging.hpp"
#include "sluice/config/loader.hpp"
#include "sluice/core/clock.hpp"
#include "sluice/core/escaped_exception.hpp"
#include "sluice/http/connection_balancer.hpp"
#include "sluice/http/listener.hpp"
#include "sluice/metrics/admin_server.hpp"
#include "sluice/metrics/metrics.hpp"
#include "sluice/redis/sentinel.hpp"
#include "sluice/store/memory_store.hpp"
#include "sluice/store/redis_store.hpp"
#include "sluice/store/slot_waiters.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <malloc.h>
#include <optional>
#include <pthread.h>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

namespace sluice::app {
namespace {

using signal_set = net::signal_set::rebind_executor<executor>::other;
using config_ptr = std::shared_ptr<const config::config>;

/// How often the memory store forgets keys whose state has fully reset: a pass of its sweep
/// begins this long after the last one ended, so a key is forgotten within about this long of
/// its reset (and the pass's own time, its slices spread among the other handlers).
constexpr std::chrono::seconds sweep_interval{10};
/// A pass of the sweep that forgets this many keys (about 1 MB of them) gives the memory back
/// (see sweep_memory_store).
constexpr std::size_t trim_after_keys = 10'000;
constexpr std::size_t memory_store_shards = 64;

/// An io_context whose pending handlers (suspended coroutine frames among them) can be destroyed
/// before the io_context itself is.
class worker_io_context : public net::io_context {
public:
    using net::io_context::io_context;

    /// Destroys every handler still pending, so that what their frames hold is given back while
    /// its owners are alive. Call when no thread runs the io_context; the io_context can be
    /// destroyed afterwards (its own destructor finds nothing more to destroy).
    void destroy_pending_handlers() { shutdown(); }
};

/**
 * One I/O thread and what it owns. The io_context is declared first so that it is destroyed
 * last: sockets and timers must go before their io_context. But a stop that does not wait for
 * the drain (its timeout, a second signal) leaves suspended coroutine frames in the io_context,
 * and those frames hold what the other members own (a buffer of `context.relay_buffers`, an
 * upstream connection, a place in `context.sessions`): the destructor destroys them first, while
 * every member is still alive.
 */
struct worker {
    explicit worker(std::size_t index) { context.index = index; }

    worker(const worker&) = delete;
    worker& operator=(const worker&) = delete;

    ~worker() {
        if (thread.joinable()) {
            ioc.stop();
            thread.join();
        }
        ioc.destroy_pending_handlers();
    }

    // One thread, and every socket of the worker is used on it alone (other threads post to it):
    // Asio may skip the locking of each socket's reactor state on every operation.
    worker_io_context ioc{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
    http::worker_context context;
    std::unique_ptr<upstream::pool> pool;
    /// Sentinel only: the Redis store's client, which the watcher moves to each new primary.
    /// Before `store`, which uses it: destroyed after it.
    std::unique_ptr<redis::client> redis_client;
    /// Sentinel only: the last primary (`application::primaries_`) this worker's client was
    /// pointed at; read by readiness from the admin's thread.
    std::atomic<std::uint64_t> primary_seen{0};
    std::shared_ptr<store::store> store;
    /// Redis only: the worker's store, for readiness and for stopping its client on drain.
    store::redis_store* redis = nullptr;
    std::optional<tcp_acceptor> acceptor;
    std::thread thread;
    /// Its event loop has returned (control thread only): nothing posted to it runs any more.
    bool finished = false;
    /// At the drain's deadline, its Redis store is giving back what the cut requests hold
    /// (control thread only).
    bool giving_back = false;
};

using http::format_endpoint;

tcp::endpoint resolve_listen(const config::endpoint_address& listen) {
    error_code ec;
    const auto address = net::ip::make_address(listen.host, ec);
    if (!ec) {
        return {address, listen.port};
    }
    net::io_context ioc;
    tcp::resolver resolver(ioc);
    const auto results = resolver.resolve(listen.host, std::to_string(listen.port), ec);
    if (ec || results.empty()) {
        throw std::runtime_error("cannot resolve server.listen host '" + listen.host +
                                 "': " + ec.message());
    }
    return results.begin()->endpoint();
}

class application {
public:
    application(command_line command, config_ptr cfg)
        : command_(std::move(command))
        , config_(std::move(cfg)) {}

    int run();

private:
    /// The store a worker's sessions use. Memory: the one shared table. Redis: one store (and
    /// client) per worker on that worker's executor, falling back to the shared table under
    /// failure-mode local; its client keeps the io_context busy, so it is stopped when the
    /// worker has drained.
    void make_worker_store(worker& w);

    /// Ready: listening, and able to decide requests (Redis connected on every worker, unless
    /// the failure mode lets requests through without it).
    bool ready() const;
    void start_admin();
    /// Redis store with a CONCURRENCY limit anywhere: subscribes to the freed slots.
    void start_slot_announcements();
    /// Sentinel: the watcher that finds the primary and moves every connection to it.
    void make_sentinel_watcher();
    /// Sentinel: the primary is (now) at `address`; on the control thread.
    void follow_primary(const config::endpoint_address& address);
    /// Behind Sentinel: the data connections' options (a worker's, the freed-slot subscriber's).
    redis::client_options sentinel_data_options();
    /// The freed-slot subscriber's options: the data nodes', behind Sentinel without an address.
    redis::client_options slot_subscriber_options();
    /// Cluster: moves the freed-slot subscriber to the next seed after it lost its node.
    void next_slot_subscriber_seed();

    void start_workers();
    void log_summary(const tcp::endpoint& bound) const;
    void publish(const config_ptr& cfg);
    void reload();
    void begin_drain();
    /// Warns when an explicit server.max-connections leaves too few descriptors for the rest.
    void warn_if_cap_exceeds_descriptors(const config::config& cfg, std::size_t workers) const;
    /// After a reload: the client connection cap `cfg` gives (it changes with
    /// upstream.max-connections when the cap is derived), posted to every worker.
    void apply_connection_cap(const config::config& cfg);
    void worker_finished();
    /// A worker's give-back at the drain's deadline is answered (or it finished): the wait for
    /// them ends with the last.
    void gave_back(worker& w);

    awaitable<void> handle_signals();
    awaitable<void> sweep_memory_store();
    void trim_memory();
    awaitable<void> enforce_drain_deadline();

    command_line command_;
    config_ptr config_;
    steady_clock_source clock_;
    /// The requests waiting for a CONCURRENCY slot, whatever the store.
    store::slot_waiters slot_waiters_;
    std::unique_ptr<store::memory_store> memory_store_;
    metrics::registry metrics_;
    /// After metrics_: stops counting in it before it goes.
    counting_dropped_log_lines dropped_log_lines_{metrics_.log_lines_dropped_total};
    /// The process's access log (app/logging.cpp's), which outlives the application.
    http::access_log* access_log_ = nullptr;
    std::atomic<bool> listening_{false};

    net::io_context control_{1};
    /// After control_, whose executor its acceptor uses: destroyed before it.
    std::unique_ptr<metrics::admin_server> admin_;
    /// Redis store: hears of CONCURRENCY slots freed by any instance (redis_store::slot_channel)
    /// and wakes this instance's waiters for them. On control_'s thread; after control_.
    std::unique_ptr<redis::client> slot_announcements_;
    /// Cluster: the seed the subscriber listens on, and when it last moved.
    std::size_t slot_subscriber_seed_ = 0;
    std::chrono::steady_clock::time_point slot_subscriber_moved_{};
    /// Sentinel: on control_'s thread; after control_, before the workers, whose clients ask it
    /// to rediscover.
    std::unique_ptr<redis::sentinel_watcher> sentinel_;
    /// Sentinel: how many primaries the watcher has given so far (0: none known yet).
    std::atomic<std::uint64_t> primaries_{0};
    signal_set signals_{control_.get_executor(), SIGINT, SIGTERM, SIGHUP};
    steady_timer sweep_timer_{control_.get_executor()};
    /// A malloc_trim under way on `trim_thread_` (trim_memory); that thread goes first.
    std::atomic<bool> trimming_{false};
    std::jthread trim_thread_;
    steady_timer drain_timer_{control_.get_executor()};
    /// The descriptor limit once raised at start, and the client connection cap it gave: a
    /// reload that changes what is set aside for upstream connections recomputes the cap.
    std::uint64_t descriptor_limit_ = 0;
    std::uint64_t connection_cap_ = 0;
    bool draining_ = false;
    /// Workers whose give-back at the drain's deadline is not answered yet.
    std::size_t giving_back_ = 0;
    std::atomic<bool> draining_flag_{false}; // draining_, readable from the admin's readiness
    std::size_t running_ = 0;
    /// The workers' connection counts, and each worker's executor and context, which the
    /// workers' accept loops read (before `workers_`: destroyed after them).
    std::unique_ptr<http::connection_balancer> balancer_;
    std::vector<http::worker_ref> worker_refs_;
    /// Last: destroyed first, while everything its threads and frames use is still alive.
    std::vector<std::unique_ptr<worker>> workers_;
};

void application::make_worker_store(worker& w) {
    const executor ex = w.ioc.get_executor();
    switch (config_->rate_limit.store) {
    case config::store_kind::memory:
        // Non-owning: the application owns the shared table and outlives every worker.
        w.store = std::shared_ptr<store::store>(std::shared_ptr<void>{}, memory_store_.get());
        return;
    case config::store_kind::redis: {
        // The shared table whatever the failure mode: a reload may switch it to local.
        const auto& settings = config_->rate_limit.redis;
        std::shared_ptr<store::redis_store> owned;
        if (settings.topology == config::redis_topology::sentinel) {
            // Requests get the failure mode until the watcher names the primary.
            w.redis_client = std::make_unique<redis::client>(ex, sentinel_data_options());
            owned = std::make_shared<store::redis_store>(
                *w.redis_client, settings, memory_store_.get());
            w.redis_client->start();
        } else {
            owned = std::make_shared<store::redis_store>(
                ex, settings, memory_store_.get(), &metrics_.redis_lookup_failures_total);
        }
        owned->set_metrics(&metrics_);
        w.redis = owned.get();
        w.store = std::move(owned);
        w.context.on_drained = [store = w.redis] {
            store->stop();
        };
        return;
    }
    }
}

bool application::ready() const {
    if (!listening_.load() || draining_flag_.load()) {
        return false;
    }
    if (config_->rate_limit.store != config::store_kind::redis ||
        config_->rate_limit.redis.on_failure != config::failure_mode::closed) {
        return true;
    }
    if (config_->rate_limit.redis.topology == config::redis_topology::sentinel) {
        // The primary known, and every worker connected to it (not to the one before).
        const auto primary = primaries_.load();
        return primary > 0 && std::all_of(workers_.begin(), workers_.end(), [&](const auto& w) {
                   return w->primary_seen.load() == primary && w->redis != nullptr &&
                          w->redis->client().connected();
               });
    }
    return std::all_of(workers_.begin(), workers_.end(), [](const auto& w) {
        return w->redis != nullptr && w->redis->connected();
    });
}

// A limit that may make a request wait for a CONCURRENCY slot (a dry-run one never waits).
bool waits_for_slots(const config::config& cfg) {
    const auto waits = [](const config::limit& l) {
        return l.algo == config::algorithm::concurrency && l.mode == config::shaping_mode::shape &&
               !l.dry_run;
    };
    if (waits(cfg.rate_limit.fallback)) {
        return true;
    }
    return std::any_of(
        cfg.rate_limit.rules.begin(), cfg.rate_limit.rules.end(), [&](const auto& r) {
            return std::any_of(r.limits.begin(), r.limits.end(), waits);
        });
}

void application::start_slot_announcements() {
    const auto& cfg = *config_;
    // One connection per process, and only when a limit may make requests wait (at start or
    // after a reload that adds one): a deployment without such limits needs no channel
    // permission in its Redis ACL.
    if (slot_announcements_ || cfg.rate_limit.store != config::store_kind::redis ||
        !waits_for_slots(cfg) || draining_) {
        return;
    }
    slot_announcements_ =
        std::make_unique<redis::client>(control_.get_executor(), slot_subscriber_options());
    slot_announcements_->subscribe(store::redis_store::slot_channel(cfg.rate_limit.redis),
                                   [this](const std::string& announcement) {
                                       store::redis_store::wake_waiters(slot_waiters_,
                                                                        announcement);
                                   });
    if (sentinel_) {
        if (const auto primary = sentinel_->primary()) {
            slot_announcements_->retarget(primary->host, primary->port);
        }
    }
    slot_announcements_->start();
}

void application::next_slot_subscriber_seed() {
    const auto& seeds = config_->rate_limit.redis.cluster;
    const auto now = std::chrono::steady_clock::now();
    // At most every reconnect_max: with every seed down, the client's own backoff paces the
    // retries instead of a loop of immediate connects from seed to seed.
    if (!slot_announcements_ || seeds.size() < 2 ||
        now - slot_subscriber_moved_ < redis::client_options{}.reconnect_max) {
        return;
    }
    slot_subscriber_moved_ = now;
    slot_subscriber_seed_ = (slot_subscriber_seed_ + 1) % seeds.size();
    const auto& next = seeds[slot_subscriber_seed_];
    slot_announcements_->retarget(next.host, next.port);
}

// A connection to the primary the Sentinel watcher names: nowhere until it names one; each lost
// or refused connection asks it to look again.
redis::client_options application::sentinel_data_options() {
    auto options = redis::sentinel_data_options(
        config_->rate_limit.redis,
        [this] { sentinel_->rediscover(); },
        [this](const config::endpoint_address& refused) { sentinel_->refused(refused); });
    options.lookup_failures = &metrics_.redis_lookup_failures_total;
    return options;
}

redis::client_options application::slot_subscriber_options() {
    const auto& settings = config_->rate_limit.redis;
    if (settings.topology == config::redis_topology::sentinel) {
        return sentinel_data_options();
    }
    auto options = redis::client_options::from_settings(settings);
    options.lookup_failures = &metrics_.redis_lookup_failures_total;
    if (settings.topology == config::redis_topology::cluster) {
        // PUBLISH reaches every node over the cluster bus, so any node will do: the first seed,
        // then the next whenever the one listened on is lost (docs/redis-cluster.md,
        // "Freed-slot announcements").
        slot_subscriber_seed_ = 0;
        options.host = settings.cluster.front().host;
        options.port = settings.cluster.front().port;
        options.on_trouble = [this] {
            next_slot_subscriber_seed();
        };
    }
    return options;
}

void application::make_sentinel_watcher() {
    const auto& cfg = *config_;
    if (cfg.rate_limit.store != config::store_kind::redis ||
        cfg.rate_limit.redis.topology != config::redis_topology::sentinel) {
        return;
    }
    auto options = redis::sentinel_options::from_settings(cfg.rate_limit.redis);
    options.sentinel.lookup_failures = &metrics_.redis_lookup_failures_total;
    sentinel_ = std::make_unique<redis::sentinel_watcher>(
        control_.get_executor(),
        std::move(options),
        [this](const config::endpoint_address& address) { follow_primary(address); });
}

void application::follow_primary(const config::endpoint_address& address) {
    if (primaries_.load() > 0) {
        metrics::bump(metrics_.redis_failovers_total);
    }
    const auto seen = primaries_.load() + 1;
    for (auto& w : workers_) {
        net::post(w->ioc, [raw = w.get(), address, seen] {
            if (raw->redis_client) {
                // Drops the old primary's connection: its pending commands fail at once, and
                // their requests get the failure mode.
                raw->redis_client->retarget(address.host, address.port);
            }
            raw->primary_seen = seen;
        });
    }
    primaries_ = seen;
    if (slot_announcements_) {
        slot_announcements_->retarget(address.host, address.port);
    }
}

void application::start_admin() {
    const auto& admin = config_->admin;
    if (!admin.enabled) {
        return;
    }
    admin_ = std::make_unique<metrics::admin_server>(
        control_.get_executor(), metrics_, [this] { return ready(); });
    if (const auto ec = admin_->listen(admin.listen)) {
        // The form of the proxy port's message (see http::open_acceptor), naming the key.
        throw std::runtime_error(fmt::format("cannot listen on admin.listen {}:{}: {}",
                                             admin.listen.host,
                                             admin.listen.port,
                                             http::describe_listen_error(ec)));
    }
    admin_->start();
    spdlog::info("admin listening on {}:{} (/metrics, /healthz, /readyz)",
                 admin.listen.host,
                 admin_->port());
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread for its lifetime, then restores the
/// mask it had.
class block_control_signals {
public:
    block_control_signals() noexcept {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &set, &previous_);
    }

    block_control_signals(const block_control_signals&) = delete;
    block_control_signals& operator=(const block_control_signals&) = delete;

    ~block_control_signals() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

private:
    sigset_t previous_;
};

void application::start_workers() {
    const auto& cfg = *config_;
    auto count = cfg.server.workers;
    if (count == 0) {
        count = std::max(1u, std::thread::hardware_concurrency());
    }
    const auto endpoint = resolve_listen(cfg.server.listen);
    std::uint64_t descriptors = 0;
    std::uint64_t raised_from = 0;
    const auto max_connections = connection_cap(cfg, count, descriptors, raised_from);
    descriptor_limit_ = descriptors;
    connection_cap_ = max_connections;
    if (raised_from != 0) {
        spdlog::info("descriptor limit raised from {} to {}", raised_from, descriptors);
    }
    spdlog::info("client connections: at most {} at once ({}; descriptor limit {})",
                 max_connections,
                 cfg.server.max_connections > 0 ? "server.max-connections"
                                                : "what the descriptor limit leaves",
                 descriptors);
    warn_if_cap_exceeds_descriptors(cfg, count);
    for (std::size_t i = 0; i < count; ++i) {
        auto w = std::make_unique<worker>(i);
        const executor ex = w->ioc.get_executor();
        // One listening socket (port 0 picks its port once), shared by the workers: see
        // http::open_acceptor for why not SO_REUSEPORT.
        w->acceptor.emplace(i == 0 ? http::open_acceptor(ex, endpoint)
                                   : http::share_acceptor(ex, *workers_.front()->acceptor));
        w->pool = std::make_unique<upstream::pool>(
            ex, system_lookup, &metrics_.upstream_lookup_failures_total);
        make_worker_store(*w);
        w->context.store = w->store.get();
        w->context.waiters = &slot_waiters_;
        w->context.pool = w->pool.get();
        w->context.held = &metrics_.held_now;
        w->context.metrics = &metrics_;
        w->context.tunnels.gauge = &metrics_.tunnels_open;
        w->context.access_log = access_log_;
        w->context.max_connections = max_connections;
        workers_.push_back(std::move(w));
    }
    metrics_.count_workers(workers_.size());
    balancer_ = std::make_unique<http::connection_balancer>(metrics_.worker_connections());
    for (auto& w : workers_) {
        worker_refs_.push_back({w->ioc.get_executor(), &w->context});
    }
    for (auto& w : workers_) {
        w->context.balancer = balancer_.get();
        w->context.workers = worker_refs_;
    }
    publish(config_);
    log_summary(workers_.front()->acceptor->local_endpoint());

    for (auto& w : workers_) {
        net::co_spawn(
            w->ioc, http::accept_loop(*w->acceptor, w->context), log_escaped{"accept loop"});
    }
    running_ = workers_.size();
    // The workers start with the stop and reload signals blocked (a thread inherits its
    // creator's mask), so that the kernel delivers them to the main thread, whose io_context
    // waits for them: never to a worker in the middle of a request, where a sanitizer's runtime
    // (ThreadSanitizer defers a signal to the receiving thread's next safe point) or a long
    // handler would hold the drain back.
    const block_control_signals blocked;
    for (auto& w : workers_) {
        w->thread = std::thread([this, raw = w.get()] {
            try {
                raw->ioc.run();
            } catch (const std::exception& e) {
                spdlog::critical(
                    "worker {} stopped by an exception: {}", raw->context.index, e.what());
            }
            net::post(control_, [this, raw] {
                raw->finished = true;
                gave_back(*raw); // nothing more of it will answer
                worker_finished();
            });
        });
    }
}

void application::log_summary(const tcp::endpoint& bound) const {
    for (const auto& line : summary_lines(*config_, format_endpoint(bound), workers_.size())) {
        spdlog::info("{}", line);
    }
    spdlog::info("listening on {}", format_endpoint(bound));
}

void application::publish(const config_ptr& cfg) {
    for (auto& w : workers_) {
        // Each worker gets a pointer with its own control block (aliasing a per-worker holder),
        // so that the per-request snapshot copies of different workers never contend on one
        // reference count.
        auto holder = std::make_shared<config_ptr>(cfg);
        config_ptr local(holder, holder->get());
        if (w->thread.joinable()) {
            // The store takes the reloadable Redis settings in the same step as the sessions
            // take the snapshot: the two never disagree on the failure mode.
            net::post(w->ioc, [raw = w.get(), local = std::move(local)]() mutable {
                if (raw->redis != nullptr) {
                    raw->redis->apply_reloadable(local->rate_limit.redis);
                }
                raw->context.config = std::move(local);
            });
        } else {
            w->context.config = std::move(local);
        }
    }
}

void application::warn_if_cap_exceeds_descriptors(const config::config& cfg,
                                                  std::size_t workers) const {
    if (app::cap_exceeds_descriptors(cfg, workers, descriptor_limit_)) {
        spdlog::warn("server.max-connections ({}) and what is set aside for the rest ({}: "
                     "upstream.max-connections and Redis per worker, and {} for the process) "
                     "pass the descriptor limit ({}): at the cap, connections would fail for "
                     "want of a descriptor rather than close an idle client connection",
                     cfg.server.max_connections,
                     app::descriptors_set_aside(cfg, workers),
                     app::reserved_descriptors,
                     descriptor_limit_);
    }
}

void application::apply_connection_cap(const config::config& cfg) {
    warn_if_cap_exceeds_descriptors(cfg, workers_.size());
    const auto cap = app::connection_cap_under(cfg, workers_.size(), descriptor_limit_);
    if (cap == connection_cap_) {
        return;
    }
    connection_cap_ = cap;
    spdlog::info("client connections: at most {} at once now (what the descriptor limit {} "
                 "leaves with upstream.max-connections {})",
                 cap,
                 descriptor_limit_,
                 cfg.upstream.max_connections);
    for (auto& w : workers_) {
        net::post(w->ioc, [raw = w.get(), cap] { raw->context.max_connections = cap; });
    }
}

void application::reload() {
    config::config loaded;
    try {
        loaded = config::load_file(command_.config_path);
    } catch (const std::exception& e) {
        spdlog::error("reload failed, keeping the current configuration: {}", e.what());
        return;
    }
    for (const auto& warning : loaded.warnings) {
        spdlog::warn("{}", warning);
    }
    const auto& old = *config_;
    if (const auto keys = redis_restart_keys(old, loaded); !keys.empty()) {
        spdlog::error("reload refused, keeping the current configuration: changing {} needs a "
                      "restart (the Redis connections were made with it)",
                      keys);
        return;
    }
    // The listener, the workers, the store and the admin listener were built with these: the
    // snapshot every request reads (the store's kind decides a Cluster key's hash tag) and
    // /readyz keep the values they run with.
    if (const auto keys = keep_restart_only_keys(old, loaded); !keys.empty()) {
        spdlog::warn("reload: {} change only on restart; the running values stay", keys);
    }
    auto next = std::make_shared<const config::config>(std::move(loaded));
    setup_logging(next->logging);
    config_ = next;
    publish(next);
    apply_connection_cap(*next);
    start_slot_announcements();
    spdlog::info("configuration reloaded from {}", command_.config_path);
}

void application::begin_drain() {
    if (draining_) {
        // A second signal: the operator does not want to wait.
        spdlog::warn("second stop signal: stopping now");
        for (auto& w : workers_) {
            w->ioc.stop();
        }
        return;
    }
    draining_ = true;
    draining_flag_ = true;
    spdlog::info("stopping: no new connections; draining for up to {} ms",
                 config_->server.drain_timeout.count());
    sweep_timer_.cancel();
    // One deadline for the workers and the timer that stops them.
    const auto deadline = std::chrono::steady_clock::now() + config_->server.drain_timeout;
    for (auto& w : workers_) {
        net::post(w->ioc, [raw = w.get(), deadline] {
            http::close_acceptor(*raw->acceptor);
            raw->context.begin_drain(deadline);
            raw->pool->close_idle();
        });
    }
    drain_timer_.expires_at(deadline);
    net::co_spawn(control_, enforce_drain_deadline(), log_escaped{"drain deadline"});
}

void application::gave_back(worker& w) {
    if (!w.giving_back) {
        return;
    }
    w.giving_back = false;
    if (--giving_back_ == 0) {
        drain_timer_.cancel();
    }
}

void application::worker_finished() {
    if (--running_ == 0) {
        if (admin_) {
            admin_->stop();
        }
        if (slot_announcements_) {
            slot_announcements_->stop();
        }
        if (sentinel_) {
            sentinel_->stop();
        }
        drain_timer_.cancel();
        sweep_timer_.cancel();
        error_code ignored;
        signals_.cancel(ignored);
    }
}

awaitable<void> application::handle_signals() {
    for (;;) {
        auto [ec, signal] = co_await signals_.async_wait();
        if (ec) {
            co_return;
        }
        if (signal == SIGHUP) {
            reload();
        } else {
            begin_drain();
        }
    }
}

awaitable<void> application::sweep_memory_store() {
    for (;;) {
        sweep_timer_.expires_after(sweep_interval);
        auto [ec] = co_await sweep_timer_.async_wait();
        if (ec || draining_) {
            co_return;
        }
        // A pass over the store, a slice at a time, each a handler of its own: the admin
        // listener and the signals run between them. As one handler, a pass of 2,000,000 reset
        // keys held this thread for 0.3 s, and a shard's lock through its whole table.
        std::size_t forgotten = 0;
        for (;;) {
            const auto step = memory_store_->sweep_slice();
            forgotten += step.forgotten;
            if (step.pass_done) {
                break;
            }
            co_await net::post(control_.get_executor(), tuple_awaitable);
            if (draining_ || running_ == 0) {
                co_return;
            }
        }
        // glibc keeps what a sweep frees inside its heaps, between live blocks, where only
        // malloc_trim gives it back to the system: 1,000,000 dropped keys kept the RSS at 192
        // MiB without it, 19.5 MiB with it (bench/memory). It walks the heaps under their locks,
        // so once a pass, and only after a pass that freed enough to matter.
        if (forgotten >= trim_after_keys) {
            trim_memory();
        }
    }
}

// On a thread of its own, one at a time: a trim walks every heap, 0.5 s after a pass that freed
// 2,000,000 keys, which on this thread would hold the admin listener's probes and the signals.
void application::trim_memory() {
    if (trimming_.exchange(true)) {
        return; // the last one still runs
    }
    try {
        // The thread before has ended (trimming_ was false): the assignment joins it at once.
        trim_thread_ = std::jthread([this] {
            malloc_trim(0);
            trimming_.store(false);
        });
    } catch (const std::system_error&) {
        trimming_.store(false); // no thread to be had: the next pass tries again
    }
}

awaitable<void> application::enforce_drain_deadline() {
    auto [ec] = co_await drain_timer_.async_wait();
    if (ec) {
        co_return; // every worker finished in time
    }
    spdlog::warn("drain timeout: closing the connections still open");
    // The Redis store's slots and settlements of the requests about to be cut go back first,
    // for at most 1 s (each command has rate-limit.redis.timeout): cut, the slots counted
    // against their keys on every instance until their leases lapsed.
    if (running_ != 0 && config_->rate_limit.store == config::store_kind::redis) {
        // Only the workers still running: a finished one runs nothing posted to it, and one
        // that finishes meanwhile counts as done (worker_finished).
        for (auto& w : workers_) {
            if (w->finished) {
                continue;
            }
            w->giving_back = true;
            ++giving_back_;
            net::post(w->ioc, [this, raw = w.get()] {
                raw->redis->give_back_before_exit(
                    [this, raw] { net::post(control_, [this, raw] { gave_back(*raw); }); });
            });
        }
        if (giving_back_ != 0) {
            drain_timer_.expires_after(std::chrono::seconds{1});
            (void)co_await drain_timer_.async_wait();
        }
    }
    for (auto& w : workers_) {
        w->ioc.stop();
    }
}

int application::run() {
    access_log_ = &setup_logging(config_->logging);
    for (const auto& warning : config_->warnings) {
        spdlog::warn("{}", warning);
    }
    // The shared table serves the memory store, and Redis's failure-mode local.
    memory_store_ = std::make_unique<store::memory_store>(
        clock_,
        memory_store_shards,
        store::memory_store_limits{config_->rate_limit.memory.max_keys,
                                   &metrics_.memory_store_evictions_total});
    memory_store_->set_waiters(&slot_waiters_);
    // A start-up failure from here on (the admin port in use, say) leaves by an exception with
    // the worker threads running: each worker's destructor stops and joins its thread, so the
    // process ends with the error and exit code 1, not with std::terminate.
    make_sentinel_watcher();
    start_slot_announcements();
    start_workers();
    listening_ = true;
    start_admin();
    if (sentinel_) {
        sentinel_->start();
    }

    net::co_spawn(control_, handle_signals(), log_escaped{"signal handler"});
    net::co_spawn(control_, sweep_memory_store(), log_escaped{"memory store sweep"});
    control_.run();
    for (auto& w : workers_) {
        w->thread.join();
    }
    spdlog::info("stopped");
    return 0;
}

} // namespace

int run(const command_line& command, std::string_view version) {
    if (command.show_help) {
        std::fputs(usage("sluice").c_str(), stdout);
        return 0;
    }
    if (command.show_version) {
        std::printf("sluice %.*s\n", static_cast<int>(version.size()), version.data());
        return 0;
    }
    auto cfg = std::make_shared<const config::config>(config::load_file(command.config_path));
    if (command.check_config) {
        for (const auto& warning : cfg->warnings) {
            std::printf("warning: %s\n", warning.c_str());
        }
        std::printf("%s: configuration ok\n", command.config_path.c_str());
        return 0;
    }
    application app(command, std::move(cfg));
    return app.run();
}

} // namespace sluice::app
