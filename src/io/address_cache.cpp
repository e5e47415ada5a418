// SPDX-License-Identifier: Apache-2.0
#include "sluice/io/address_cache.hpp"

#include "sluice/core/log_throttle.hpp"
#include "sluice/io/coarse_clock.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

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
    state(const executor& ex, lookup_function f, std::string l)
        : lookup(std::move(f))
        , label(std::move(l))
        , shared(std::make_shared<handoff>(ex)) {}

    static void run_lookup(lookup_function lookup,
                           std::string host,
                           std::shared_ptr<handoff> shared,
                           std::weak_ptr<state> cache);
    void start_lookup();
    void finish(const std::string& looked_up, lookup_result result);

    lookup_function lookup;
    std::string label;
    std::shared_ptr<handoff> shared;

    /// The host last asked for, and what its last lookup found.
    std::string host;
    std::vector<net::ip::address> addresses;
    error_code last_error;
    bool looked_up = false;
    time_point looked_up_at{};

    /// A lookup runs (perhaps of an older host than `host`: a reload).
    bool in_flight = false;
    std::uint64_t started = 0;

    /// The timers of those waiting for the lookup (wait_for_lookup), cancelled when it ends.
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

void address_cache::state::start_lookup() {
    in_flight = true;
    ++started;
    try {
        std::thread(run_lookup, lookup, host, shared, weak_from_this()).detach();
    } catch (const std::system_error& e) {
        // No thread to be had (a process at its limit): a failed lookup, tried again later.
        in_flight = false;
        looked_up = true;
        looked_up_at = coarse_clock::now();
        last_error = error_code(e.code().value(), boost::system::system_category());
        log_throttled_by(lookup_log(),
                         log_key(label, host),
                         spdlog::level::warn,
                         "{} host {}: cannot start a lookup: {}",
                         label,
                         host,
                         e.what());
    }
}

void address_cache::state::finish(const std::string& looked_up_host, lookup_result result) {
    in_flight = false;
    if (looked_up_host != host) {
        // The host changed (a reload, a failover) while this lookup ran: its addresses are not
        // the new host's. The new host's lookup waited for this one to end (one at a time).
        start_lookup();
        return;
    }
    looked_up = true;
    looked_up_at = coarse_clock::now();
    last_error = result.ec;
    if (!result.ec) {
        addresses = std::move(result.addresses);
    } else if (addresses.empty()) {
        log_throttled_by(lookup_log(),
                         log_key(label, host),
                         spdlog::level::warn,
                         "{} host {}: lookup failed: {}; no address to connect to",
                         label,
                         host,
                         result.ec.message());
    } else {
        log_throttled_by(lookup_log(),
                         log_key(label, host),
                         spdlog::level::warn,
                         "{} host {}: lookup failed: {}; connecting to the {} addresses "
                         "found before",
                         label,
                         host,
                         result.ec.message(),
                         addresses.size());
    }
    for (auto* timer : waiters) {
        timer->cancel();
    }
}

address_cache::address_cache(const executor& ex, lookup_function lookup, std::string label)
    : state_(std::make_shared<state>(ex, std::move(lookup), std::move(label))) {}

address_cache::~address_cache() {
    std::lock_guard lock(state_->shared->mutex);
    state_->shared->abandoned = true;
}

const std::vector<net::ip::address>& address_cache::addresses(const std::string& host,
                                                              std::chrono::milliseconds interval,
                                                              time_point now) {
    auto& s = *state_;
    if (host != s.host) {
        // A new host (first use, or a reload): the old one's addresses are not its own.
        s.host = host;
        s.addresses.clear();
        s.last_error.clear();
        s.looked_up = false;
    }
    const auto age_allowed = s.last_error ? std::min(interval, retry_after_failure) : interval;
    const bool due = !s.looked_up || now - s.looked_up_at >= age_allowed;
    if (due && !s.in_flight) {
        s.start_lookup();
    }
    return s.addresses;
}

awaitable<void> address_cache::wait_for_lookup(time_point deadline) {
    // The state, not `this`: a frame destroyed mid-wait (at shutdown) still leaves the list.
    const auto s = state_;
    if (!s->in_flight) {
        co_return;
    }
    steady_timer timer(s->shared->ex, deadline);
    const auto at = s->waiters.insert(s->waiters.end(), &timer);

    struct leave {
        std::list<steady_timer*>& list;
        std::list<steady_timer*>::iterator at;

        ~leave() { list.erase(at); }
    } in_line{s->waiters, at};

    auto [ec] = co_await timer.async_wait(); // cancelled when the lookup ends
    (void)ec;
}

error_code address_cache::last_error() const noexcept {
    return state_->last_error;
}

bool address_cache::lookup_in_flight() const noexcept {
    return state_->in_flight;
}

std::uint64_t address_cache::lookups_started() const noexcept {
    return state_->started;
}

} // namespace sluice
