// SPDX-License-Identifier: Apache-2.0
#include "sluice/io/address_cache.hpp"

#include "sluice/core/log_throttle.hpp"
#include "sluice/io/coarse_clock.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <exception>
#include <list>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

namespace sluice {

lookup_result system_lookup(const std::string& host) {
    // The synchronous resolver calls getaddrinfo on this thread: the io_context is only what
    // Asio needs to construct one, and starts no thread of its own.
    net::io_context scratch(1);
    tcp::resolver resolver(scratch);
    lookup_result result;
    const auto found = resolver.resolve(host, "", result.ec);
    for (const auto& entry : found) {
        const auto address = entry.endpoint().address();
        if (std::find(result.addresses.begin(), result.addresses.end(), address) ==
            result.addresses.end()) {
            result.addresses.push_back(address);
        }
    }
    return result;
}

/// What a lookup's thread shares with the cache: whether the cache is still there to take the
/// result, and the executor to post it to, which lives as long as the cache does.
struct address_cache::handoff {
    explicit handoff(const io_executor& e)
        : ex(e) {}

    std::mutex mutex;
    bool abandoned = false;
    io_executor ex;
};

/// The cache proper, used on its executor only (the lookup threads post to it).
struct address_cache::state : std::enable_shared_from_this<address_cache::state> {
    /// One host's addresses and lookup.
    struct entry {
        std::string host;
        std::vector<net::ip::address> addresses;
        error_code last_error;
        bool looked_up = false;
        time_point looked_up_at{};
        bool in_flight = false;
    };

    state(const executor& ex,
          lookup_function f,
          std::string l,
          std::atomic<std::uint64_t>* failure_count)
        : lookup(std::move(f))
        , label(std::move(l))
        , failures(failure_count)
        , shared(std::make_shared<handoff>(ex)) {}

    void count_failure() noexcept {
        if (failures != nullptr) {
            failures->fetch_add(1, std::memory_order_relaxed);
        }
    }

    static void run_lookup(lookup_function lookup,
                           std::string host,
                           std::shared_ptr<handoff> shared,
                           std::weak_ptr<state> cache);
    void start_lookup(entry& e);
    void finish(const std::string& looked_up, lookup_result result);

    entry* find(const std::string& host) noexcept {
        for (auto& e : entries) {
            if (e.host == host) {
                return &e;
            }
        }
        return nullptr;
    }

    /// `host`'s entry, made the most recent; a new one evicts the oldest beyond max_hosts.
    entry& touch(const std::string& host) {
        for (auto it = entries.begin(); it != entries.end(); ++it) {
            if (it->host == host) {
                entries.splice(entries.begin(), entries, it);
                return entries.front();
            }
        }
        entries.push_front(entry{host, {}, {}, false, {}, false});
        if (entries.size() > max_hosts) {
            entries.pop_back(); // its lookup, if one runs, finds no entry to fill
        }
        return entries.front();
    }

    lookup_function lookup;
    std::string label;
    std::atomic<std::uint64_t>* failures;
    std::shared_ptr<handoff> shared;

    /// The hosts asked for, most recent first (a list: an entry stays where it is). Several,
    /// because a reload that changes the host leaves requests of the old configuration still
    /// to be forwarded (held by shaping), and each must find its own host's addresses rather
    /// than take the other's from it.
    std::list<entry> entries;
    std::uint64_t started = 0;

    /// The timers of those waiting for a lookup (wait_for_lookup), cancelled when one ends.
    std::list<steady_timer*> waiters;
};

namespace {

/// Keyed by label and host (`log_key`): the upstream's failures and Redis's, which one DNS
/// outage brings together, must not hide one another.
keyed_log_throttle& lookup_log() {
    static keyed_log_throttle throttle{std::chrono::seconds(10)};
    return throttle;
}

std::string log_key(const std::string& label, const std::string& host) {
    return label + ' ' + host;
}

} // namespace

/// A lookup on a thread of its own: a call stuck in getaddrinfo holds only that thread, which
/// nothing waits for. The result goes to the cache's executor, under the handoff's lock, unless
/// the cache was destroyed meanwhile: the executor's io_context may then be gone too.
void address_cache::state::run_lookup(lookup_function lookup,
                                      std::string host,
                                      std::shared_ptr<handoff> shared,
                                      std::weak_ptr<state> cache) {
    lookup_result result;
    try {
        result = lookup(host);
    } catch (const std::exception&) {
        // An exception would end the process from this thread: the lookup failed, no more.
        result = lookup_result{error_code(net::error::no_memory), {}};
    }
    if (!result.ec && result.addresses.empty()) {
        result.ec = net::error::host_not_found;
    }
    std::lock_guard lock(shared->mutex);
    if (shared->abandoned) {
        return;
    }
    net::post(
        shared->ex,
        [cache = std::move(cache), host = std::move(host), result = std::move(result)]() mutable {
            if (auto s = cache.lock()) {
                s->finish(host, std::move(result));
            }
        });
}

void address_cache::state::start_lookup(entry& e) {
    ++started;
    try {
        std::thread(run_lookup, lookup, e.host, shared, weak_from_this()).detach();
        e.in_flight = true;
    } catch (const std::exception& ex) {
        // No thread to be had (a process at its limit, or out of memory): a failed lookup,
        // tried again later.
        count_failure();
        const auto* system = dynamic_cast<const std::system_error*>(&ex);
        e.looked_up = true;
        e.looked_up_at = coarse_clock::now();
        e.last_error = system != nullptr
                           ? error_code(system->code().value(), boost::system::system_category())
                           : error_code(net::error::no_memory);
        log_throttled_by(lookup_log(),
                         log_key(label, e.host),
                         spdlog::level::warn,
                         "{} host {}: cannot start a lookup: {}",
                         label,
                         e.host,
                         ex.what());
    }
}

void address_cache::state::finish(const std::string& looked_up_host, lookup_result result) {
    for (auto* timer : waiters) {
        timer->cancel(); // each looks again at its own host's lookup
    }
    if (result.ec) {
        count_failure(); // a host no longer asked for too: DNS failed all the same
    }
    auto* e = find(looked_up_host);
    if (e == nullptr) {
        return; // a host no longer asked for (evicted by newer ones)
    }
    e->in_flight = false;
    e->looked_up = true;
    e->looked_up_at = coarse_clock::now();
    e->last_error = result.ec;
    if (!result.ec) {
        e->addresses = std::move(result.addresses);
    } else if (e->addresses.empty()) {
        log_throttled_by(lookup_log(),
                         log_key(label, e->host),
                         spdlog::level::warn,
                         "{} host {}: lookup failed: {}; no address to connect to",
                         label,
                         e->host,
                         result.ec.message());
    } else {
        log_throttled_by(lookup_log(),
                         log_key(label, e->host),
                         spdlog::level::warn,
                         "{} host {}: lookup failed: {}; connecting to the {} addresses "
                         "found before",
                         label,
                         e->host,
                         result.ec.message(),
                         e->addresses.size());
    }
}

address_cache::address_cache(const executor& ex,
                             lookup_function lookup,
                             std::string label,
                             std::atomic<std::uint64_t>* failures)
    : state_(std::make_shared<state>(ex, std::move(lookup), std::move(label), failures)) {}

address_cache::~address_cache() {
    std::lock_guard lock(state_->shared->mutex);
    state_->shared->abandoned = true;
}

const std::vector<net::ip::address>& address_cache::addresses(const std::string& host,
                                                              std::chrono::milliseconds interval,
                                                              time_point now) {
    auto& s = *state_;
    auto& e = s.touch(host);
    const auto age_allowed = e.last_error ? std::min(interval, retry_after_failure) : interval;
    const bool due = !e.looked_up || now - e.looked_up_at >= age_allowed;
    if (due && !e.in_flight) {
        s.start_lookup(e);
    }
    return e.addresses;
}

awaitable<void> address_cache::wait_for_lookup(std::string host, time_point deadline) {
    // The state, not `this`: a frame destroyed mid-wait (at shutdown) still leaves the list.
    const auto s = state_;
    for (;;) {
        const auto* e = s->find(host);
        if (e == nullptr || !e->in_flight) {
            co_return;
        }
        steady_timer timer(s->shared->ex, deadline);
        const auto at = s->waiters.insert(s->waiters.end(), &timer);

        struct leave {
            std::list<steady_timer*>& list;
            std::list<steady_timer*>::iterator at;

            ~leave() { list.erase(at); }
        } in_line{s->waiters, at};

        // Cancelled when a lookup ends (perhaps another host's: then look again).
        auto [ec] = co_await timer.async_wait();
        if (ec != net::error::operation_aborted) {
            co_return; // the deadline
        }
        if (const auto cancelled = co_await net::this_coro::cancellation_state;
            cancelled.cancelled() != net::cancellation_type::none) {
            co_return; // the caller gave up the wait
        }
    }
}

error_code address_cache::last_error(const std::string& host) const noexcept {
    const auto* e = state_->find(host);
    return e != nullptr ? e->last_error : error_code{};
}

bool address_cache::lookup_in_flight(const std::string& host) const noexcept {
    const auto* e = state_->find(host);
    return e != nullptr && e->in_flight;
}

bool address_cache::lookup_in_flight() const noexcept {
    for (const auto& e : state_->entries) {
        if (e.in_flight) {
            return true;
        }
    }
    return false;
}

std::uint64_t address_cache::lookups_started() const noexcept {
    return state_->started;
}

} // namespace sluice
