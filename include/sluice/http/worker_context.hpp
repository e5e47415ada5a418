// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/io/net.hpp"
#include "sluice/io/timed_stream.hpp"
#include "sluice/metrics/metrics.hpp"
#include "sluice/store/slot_waiters.hpp"
#include "sluice/store/store.hpp"
#include "sluice/upstream/pool.hpp"

#include <boost/intrusive/list.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::http {

namespace detail {
class request_pool;
}

class access_log;
class connection_balancer;
struct worker_context;

/// A worker as the others see it: where to post work for it, and its context.
struct worker_ref {
    executor ex;
    worker_context* context;
};

/// A live client connection, linked into its worker's list so that a drain can close it when
/// it sits between requests. Part of the connection's state: no allocation of its own.
struct session_entry
    : boost::intrusive::list_base_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>> {
    explicit session_entry(timed_stream& s) noexcept
        : stream(&s) {}

    using idle_hook_type = boost::intrusive::list_member_hook<
        boost::intrusive::link_mode<boost::intrusive::auto_unlink>>;

    timed_stream* stream;
    /// Waiting for (the header of) the next request: nothing would be lost by closing it. Set
    /// through `worker_context::mark_idle` and `mark_busy`, which keep the idle lists.
    bool idle = true;
    /// Its place in its worker's list of idle connections (`worker_context::idle_sessions`).
    idle_hook_type idle_hook;
    /// A request of it has been answered: its wait for the next is `server.idle-timeout`; a new
    /// connection's for its first, `server.header-timeout` (a client that connects and says
    /// nothing holds a descriptor no longer than a slow header would).
    bool served = false;
    /// While the connection's request waits in sluice: the end of its shaping hold, or
    /// `time_point::max()` while it waits for a CONCURRENCY slot (its end is unknown); otherwise
    /// the epoch. A drain wakes the waits that would outlast it (`worker_context::begin_drain`).
    std::chrono::steady_clock::time_point waits_until{};
    /// The timer of such a wait, when it waits on one (not on the socket alone): a drain cancels
    /// it with the socket. With `waits_until` at the epoch, a WebSocket tunnel's idle watch,
    /// which a drain wakes to end the tunnel before the deadline. Null otherwise.
    steady_timer* wait_timer = nullptr;
};

using session_list =
    boost::intrusive::list<session_entry, boost::intrusive::constant_time_size<false>>;

using idle_session_list =
    boost::intrusive::list<session_entry,
                           boost::intrusive::member_hook<session_entry,
                                                         session_entry::idle_hook_type,
                                                         &session_entry::idle_hook>,
                           boost::intrusive::constant_time_size<false>>;

/// Bodies pass through a buffer of this size; a request or response is never held whole.
inline constexpr std::size_t relay_buffer_size = 32 * 1024;

/**
 * Fixed-size buffers lent to requests while they stream bodies, then kept for the next one. A
 * request needs its buffer only while it is forwarded, so an idle keep-alive connection holds
 * none, and a buffer is allocated only when more requests are in flight than ever before (up
 * to `max_kept` are kept; the rest are freed on return).
 */
class buffer_pool {
public:
    /// A borrowed buffer, returned to its pool on destruction.
    class lease {
    public:
        lease(buffer_pool& owner, std::unique_ptr<char[]> data) noexcept
            : owner_(&owner)
            , data_(std::move(data)) {}

        lease(lease&&) = default;
        lease& operator=(lease&&) = delete;

        ~lease() {
            if (data_) {
                owner_->give_back(std::move(data_));
            }
        }

        char* data() const noexcept { return data_.get(); }

    private:
        buffer_pool* owner_;
        std::unique_ptr<char[]> data_;
    };

    buffer_pool(std::size_t buffer_size, std::size_t max_kept) noexcept
        : size_(buffer_size)
        , max_kept_(max_kept) {}

    std::size_t buffer_size() const noexcept { return size_; }

    /// A buffer of `buffer_size()` bytes, uninitialised.
    lease take() {
        if (free_.empty()) {
            return {*this, std::make_unique_for_overwrite<char[]>(size_)};
        }
        auto data = std::move(free_.back());
        free_.pop_back();
        return {*this, std::move(data)};
    }

private:
    void give_back(std::unique_ptr<char[]> data) {
        if (free_.size() < max_kept_) {
            free_.push_back(std::move(data));
        }
    }

    std::size_t size_;
    std::size_t max_kept_;
    std::vector<std::unique_ptr<char[]>> free_;
};

/// A worker's WebSocket upgrades being forwarded and tunnels open, against
/// `upstream.max-tunnels`, and the process-wide gauge that sums every worker's (null: none, as
/// in a unit test).
struct tunnel_count {
    std::size_t open = 0;
    metrics::gauge* gauge = nullptr;
};

/**
 * Everything a session needs from its worker. One per worker thread and touched only on that
 * worker's io_context, so nothing here is locked; the only cross-thread state is `held`, the
 * metrics (atomics, `tunnels.gauge` among them) and the store, whose implementations are
 * thread-safe or per worker.
 */
struct worker_context {
    std::size_t index = 0;
    /// The configuration for new requests. The app replaces it (by posting to this worker) on a
    /// reload; each request copies it once, so a reload never changes a request midway.
    std::shared_ptr<const config::config> config;
    store::store* store = nullptr;
    /// The requests waiting for a CONCURRENCY slot, process-wide; never null once the worker
    /// runs.
    store::slot_waiters* waiters = nullptr;
    upstream::pool* pool = nullptr;
    /// Requests held for shaping, across all workers; capped by `rate_limit.max_held`.
    std::atomic<std::int64_t>* held = nullptr;
    /// Process-wide counters; never null once the worker runs.
    metrics::registry* metrics = nullptr;
    /// This worker's own cache of `metrics->rule(name)`, so that counting a request takes no
    /// lock: the registry is consulted once per rule name and worker.
    metrics::rule_counters& rule_counters(std::string_view rule_name);
    /// One line per request when `logging.access_log` is on; the process's one, which the app
    /// owns (it outlives the workers).
    const http::access_log* access_log = nullptr;
    /// The buffers requests stream their bodies through.
    buffer_pool relay_buffers{relay_buffer_size, 256};
    /// The memory requests work in, reused from one request to the next (the session's own;
    /// made with the first request).
    std::shared_ptr<detail::request_pool> requests;
    /// The connections each worker has open, and which should take the next (see
    /// `accept_loop`); null where nothing counts them (a unit test's worker).
    connection_balancer* balancer = nullptr;
    /// Every worker by index, this one included; set with `balancer`.
    std::span<const worker_ref> workers;
    /// Client connections open at once, process-wide (`server.max-connections`, or what the
    /// descriptor limit leaves): a connection that comes at it closes this worker's longest idle
    /// one, or is closed itself when none is idle.
    std::uint64_t max_connections = UINT64_MAX;
    /// WebSocket upgrades being forwarded and tunnels open on this worker
    /// (`upstream.max-tunnels`), summed over the workers in the gauge `tunnels.gauge`.
    tunnel_count tunnels;
    /// Set by `begin_drain`: finish the request at hand, then close.
    bool draining = false;
    /// When the drain's time is up and the worker is stopped (`server.drain-timeout` after it
    /// began); `time_point::max()` before. A request that would still be waiting in sluice then
    /// is answered 503 instead (`outlasts_drain`).
    std::chrono::steady_clock::time_point drain_deadline =
        std::chrono::steady_clock::time_point::max();

    /// A wait in sluice that ends at `until` would outlast the drain: the worker is stopped
    /// before then. False while no drain has begun.
    bool outlasts_drain(std::chrono::steady_clock::time_point until) const noexcept {
        return until > drain_deadline;
    }

    session_list sessions;
    /// The idle sessions, longest idle first: [0] those that have sent no request yet, [1] those
    /// waiting for their next. At server.max-connections a new connection takes the place of
    /// the first one found here, in constant time (a walk over every session cost each
    /// connection over the cap a scan of up to a worker's share of the cap).
    idle_session_list idle_sessions[2];

    /// The session waits for (the header of) its next request: last of its idle list.
    void mark_idle(session_entry& s) noexcept {
        s.idle_hook.unlink();
        s.idle = true;
        idle_sessions[s.served ? 1 : 0].push_back(s);
    }

    /// The session has a request again (or is being closed): off the idle lists.
    static void mark_busy(session_entry& s) noexcept {
        s.idle = false;
        s.idle_hook.unlink();
    }

    /// Called once, on the worker's executor, when a drain has begun and the last session has
    /// ended: the moment to stop what would otherwise keep the io_context busy (a Redis
    /// client's connection, say). May be empty.
    std::function<void()> on_drained;

    /**
     * Stops keep-alive: every session closes after its current response, and the idle ones
     * (waiting for a request) are closed now. Wakes the requests waiting in sluice past
     * `deadline` (the worker stops then), which are answered 503 at once rather than cut off
     * unanswered: a hold that ends after it, every wait for a slot. Call on the worker's executor.
     */
    void begin_drain(std::chrono::steady_clock::time_point deadline) noexcept;

    /// Called by a session as it ends: runs `on_drained` if it was the last one of a drain.
    void session_ended() noexcept;

private:
    bool drained_ = false;

    struct name_hash {
        using is_transparent = void;

        std::size_t operator()(std::string_view s) const noexcept {
            return std::hash<std::string_view>{}(s);
        }
    };

    std::unordered_map<std::string, metrics::rule_counters*, name_hash, std::equal_to<>>
        rule_counters_;
};

} // namespace sluice::http
