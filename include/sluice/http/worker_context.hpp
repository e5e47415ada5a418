// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/core/net.hpp"
#include "sluice/metrics/metrics.hpp"
#include "sluice/store/store.hpp"
#include "sluice/upstream/pool.hpp"

#include <boost/intrusive/list.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

namespace spdlog {
class logger;
}

namespace sluice::http {

/// A live client connection, linked into its worker's list so that a drain can close it when
/// it sits between requests. Lives in the session coroutine's frame: no allocation.
struct session_entry
    : boost::intrusive::list_base_hook<boost::intrusive::link_mode<boost::intrusive::auto_unlink>> {
    explicit session_entry(tcp_stream& s) noexcept
        : stream(&s) {}

    tcp_stream* stream;
    /// Waiting for (the header of) the next request: nothing would be lost by closing it.
    bool idle = true;
};

using session_list =
    boost::intrusive::list<session_entry, boost::intrusive::constant_time_size<false>>;

/**
 * Everything a session needs from its worker. One per worker thread and touched only on that
 * worker's io_context, so nothing here is locked; the only cross-thread state is `held` (an
 * atomic) and the store, whose implementations are thread-safe or per worker.
 */
struct worker_context {
    std::size_t index = 0;
    /// The configuration for new requests. The app replaces it (by posting to this worker) on a
    /// reload; each request copies it once, so a reload never changes a request midway.
    std::shared_ptr<const config::config> config;
    store::store* store = nullptr;
    upstream::pool* pool = nullptr;
    /// Requests held for shaping, across all workers; capped by `rate_limit.max_held`.
    std::atomic<std::int64_t>* held = nullptr;
    /// Process-wide counters; never null once the worker runs.
    metrics::registry* metrics = nullptr;
    /// This worker's own cache of `metrics->rule(name)`, so that counting a request takes no
    /// lock: the registry is consulted once per rule name and worker.
    metrics::rule_counters& rule_counters(std::string_view rule_name);
    /// One line per request when `logging.access_log` is on.
    std::shared_ptr<spdlog::logger> access_log;
    /// Set by `begin_drain`: finish the request at hand, then close.
    bool draining = false;
    session_list sessions;
    /// Called once, on the worker's executor, when a drain has begun and the last session has
    /// ended: the moment to stop what would otherwise keep the io_context busy (a Redis
    /// client's connection, say). May be empty.
    std::function<void()> on_drained;

    /**
     * Stops keep-alive: every session closes after its current response, and the idle ones
     * (waiting for a request) are closed now. Call on the worker's executor.
     */
    void begin_drain() noexcept;

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
