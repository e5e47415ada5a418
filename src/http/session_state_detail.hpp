// SPDX-License-Identifier: Apache-2.0
#pragma once

// The state of a connection and of one request on it, shared by session.cpp (reading, answering,
// forwarding) and decision.cpp (the limiter's side).

#include "http/session_detail.hpp"
#include "sluice/http/access_log.hpp"
#include "sluice/http/verdict.hpp"
#include "sluice/http/worker_context.hpp"
#include "sluice/key/cidr.hpp"
#include "sluice/metrics/metrics.hpp"
#include "sluice/store/store.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace sluice::http::detail {

/// What the connection does after a request.
enum class ending {
    keep,   // read the next request
    close,  // the client is gone or broke the protocol mid-body: close now
    linger, // a final response went out with Connection: close: close gracefully
};

/// State of one connection.
struct connection_state {
    worker_context& w;
    timed_stream& stream;
    beast::flat_buffer& buffer;
    session_entry& entry;
    key::ip_address peer;
    std::string peer_text;
    /// Reused by every message header written on this connection.
    header_scratch scratch;
};

/// Counts a request in the global number of held requests for as long as it lives.
class held_count {
public:
    explicit held_count(std::atomic<std::int64_t>& counter) noexcept
        : counter_(&counter)
        , before_(counter.fetch_add(1, std::memory_order_relaxed)) {}

    held_count(const held_count&) = delete;
    held_count& operator=(const held_count&) = delete;

    ~held_count() { release(); }

    /// How many were held before this one.
    std::int64_t before() const noexcept { return before_; }

    void release() noexcept {
        if (counter_ != nullptr) {
            counter_->fetch_sub(1, std::memory_order_relaxed);
            counter_ = nullptr;
        }
    }

private:
    std::atomic<std::int64_t>* counter_;
    std::int64_t before_;
};

/// State of one request.
struct request_state {
    explicit request_state(std::shared_ptr<const config::config> snapshot)
        : cfg(std::move(snapshot))
        , parser(std::piecewise_construct, std::make_tuple(), std::make_tuple(arena.allocator())) {}

    std::shared_ptr<const config::config> cfg;
    /// Before the parser, which allocates from it.
    header_arena arena;
    request_parser parser;
    access_record record;
    /// Set when the request went to the forwarder: what it saw of the upstream.
    std::optional<upstream_outcome> upstream;
    reply_context reply;
    /// The rule's name ("fallback" when none matched), for the per-rule counters.
    std::string_view rule_name;
    /// Set once the request went to the limiter; what it decided, for the counters.
    std::optional<metrics::decision_kind> counted_as;
    bool dry_run_rejected = false;
    std::span<const config::limit> limits;
    store::outcome outcome;
    verdict v;
    /// Its place among the held requests (`rate-limit.max-held`), taken before the store decides
    /// a request that may have to be held, so that the cap is checked before anything is charged;
    /// kept only while it is held.
    std::optional<held_count> held;
    /// The cap was reached: the store decided with waiting forbidden (`no_wait_limits`), and
    /// `overloaded` says whether it refused only because the request would have had to wait.
    bool held_cap_reached = false;
    bool overloaded = false;
    /// The enforced shaping limits with `max-delay: 0`, which the checks point to when the cap
    /// was reached.
    std::vector<config::limit> no_wait_limits;
    bool keep_alive = false;
    bool expect_continue = false;
};

/**
 * Derives the request's rule and store checks, and has the store decide them if it can without
 * waiting. Returns the checks it could not decide at once: co_await `store::acquire` with them,
 * then call `apply_outcome`. Empty when decided, or when there was nothing to decide.
 */
store::checks decide_now(connection_state& c, request_state& r);

/// Turns the store's outcome (in `r.outcome`) into the verdict, and what the reply and the
/// counters need of it; gives up the held place (`r.held`) unless the request is to be held.
void apply_outcome(request_state& r);

/// The answer to a refused request: 429 naming the refusing limit, or 503 when the store failed
/// closed.
local_reply refusal(const request_state& r);

} // namespace sluice::http::detail
