// SPDX-License-Identifier: Apache-2.0
#pragma once

// The state of a connection and of one request on it (session.cpp).

#include "http/buffered_body.hpp"
#include "http/forwarder.hpp"
#include "http/local_reply.hpp"
#include "http/message_writer.hpp"
#include "http/request_limiter.hpp"
#include "sluice/http/access_log.hpp"
#include "sluice/http/verdict.hpp"
#include "sluice/http/worker_context.hpp"
#include "sluice/key/cidr.hpp"
#include "sluice/metrics/metrics.hpp"
#include "sluice/store/store.hpp"

#include <atomic>
#include <chrono>
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
    reset,  // a response whose end is the close was cut short: close with a reset (RST), as a
            // FIN would end its body as if whole
    held,   // held by shaping without its coroutine and its memory (`connection_state::held`):
            // wait for the end of its hold, then go on with it (`resume_request`)
};

/**
 * A request held by shaping while it waits without its coroutine and its memory, as a parked
 * connection waits (request_wait.cpp `suspend_hold`): what resuming it takes. Its header's
 * bytes, as they came, wait at the front of the connection's buffer, ahead of whatever came
 * after them; it is parsed again from them when the hold ends.
 */
struct held_request {
    /// The request's snapshot: a reload during the hold changes nothing of it.
    std::shared_ptr<const config::config> cfg;
    held_decision decision;
    /// When the hold ends: the stream's deadline, which ends the wait.
    std::chrono::steady_clock::time_point until;
    /// How the wait ended: beast::error::timeout when the deadline passed (the hold is over);
    /// otherwise the client sent something or left, and the hold goes on in a coroutine, which
    /// reads to tell which (request_wait.cpp `hold`).
    error_code woken_by;
};

/// State of one connection.
struct connection_state {
    worker_context& w;
    timed_stream& stream;
    beast::flat_buffer& buffer;
    session_entry& entry;
    key::ip_address peer;
    std::string peer_text;
    /// Set while the connection's request is held without its coroutine (`ending::held`).
    std::unique_ptr<held_request> held;
};

/// State of one request.
struct request_state {
    /// `body_bytes`: the gauge of the bodies held in memory, the worker's registry's.
    request_state(std::shared_ptr<const config::config> snapshot, metrics::gauge& body_bytes)
        : cfg(std::move(snapshot))
        , parser(std::piecewise_construct, std::make_tuple(), std::make_tuple(arena.allocator()))
        , body_ahead(body_bytes) {}

    std::shared_ptr<const config::config> cfg;
    /// Before the parser, which allocates from it.
    header_arena arena;
    request_parser parser;
    access_record record;
    /// Set when the request went to the forwarder: what it saw of the upstream.
    std::optional<upstream_outcome> upstream;
    reply_context reply;
    /// The limiter's side of the request.
    request_limiter limiter;
    bool keep_alive = false;
    bool expect_continue = false;
    /// The body read ahead (read_body_ahead): before the decision, for the limiter's `json:`
    /// fields (then `body_read_ahead` is set); the forwarder reads on into it, up to
    /// server.request-buffer-size, and frees it once the request is sent.
    buffered_body body_ahead;
    bool body_read_ahead = false;
    /// When the body's first read began (server.body-timeout counts from there).
    std::optional<std::chrono::steady_clock::time_point> body_started;

    /// The request as the limiter sees it.
    limited_request limited(const key::ip_address& peer,
                            std::string_view peer_text) const noexcept {
        return {parser.get(),
                record.path,
                peer,
                body_ahead.view(),
                body_read_ahead && parser.is_done(),
                peer_text};
    }
};

/**
 * The memory one request works in, taken from its worker's `request_pool` when its first bytes
 * come and given back when it is over: the request's state, the header scratch, and the read
 * buffer's storage, which the connection borrows meanwhile (`lend_buffer`). Between requests a
 * connection thus keeps none of it, and a busy worker reuses the same few (as many as requests
 * are in flight) without allocating. bench/memory, 15,000 idle keep-alive connections: a
 * connection kept these (5.3 KiB) through its one-second grace, and the freed ones left holes
 * between the live blocks of the parked connections (2.8 KiB of RSS each for 0.9 KiB live).
 */
struct request_memory {
    std::optional<request_state> state;
    /// Reused by every message header the request writes.
    header_scratch scratch;
    /// The read buffer's storage while no connection borrows it.
    beast::flat_buffer buffer;
    /// The request's header as it came (take_header's copy): what a request held without its
    /// memory is parsed again from.
    std::string header;
};

/// A worker's spare `request_memory`; touched only on its worker's executor.
class request_pool {
public:
    /// Spares kept at most (the rest are freed as they come back): what a worker keeps for
    /// good when it once had this many requests in flight.
    static constexpr std::size_t max_kept = 128;
    /// A read buffer that grew beyond this (a large header, a body read ahead), a header copy
    /// or a header scratch string (a 60 KiB Set-Cookie from the upstream) is freed rather than
    /// kept: a spare holds what a usual request needs, not what the largest one once took.
    static constexpr std::size_t max_kept_buffer = 16 * 1024;

    std::unique_ptr<request_memory> take() {
        if (free_.empty()) {
            return std::make_unique<request_memory>();
        }
        auto memory = std::move(free_.back());
        free_.pop_back();
        return memory;
    }

    /// `memory`'s request is over (its state reset).
    void give_back(std::unique_ptr<request_memory> memory) {
        if (free_.size() >= max_kept) {
            return;
        }
        if (memory->buffer.capacity() > max_kept_buffer) {
            memory->buffer.shrink_to_fit();
        }
        for (auto* text : {&memory->header, &memory->scratch.header, &memory->scratch.lines}) {
            if (text->capacity() > max_kept_buffer) {
                std::string().swap(*text);
            }
        }
        free_.push_back(std::move(memory));
    }

private:
    std::vector<std::unique_ptr<request_memory>> free_;
};

/// Before reading a request: an empty connection buffer without storage borrows `memory`'s.
inline void lend_buffer(beast::flat_buffer& buffer, request_memory& memory) noexcept {
    if (buffer.capacity() == 0) {
        swap(buffer, memory.buffer);
    }
}

/// After a request: an empty connection buffer gives its storage back (to `memory`, unless that
/// has some already); one holding the next request's bytes keeps it.
inline void return_buffer(beast::flat_buffer& buffer, request_memory& memory) noexcept {
    if (buffer.size() != 0) {
        return;
    }
    if (memory.buffer.capacity() == 0) {
        swap(buffer, memory.buffer);
    } else {
        buffer.shrink_to_fit();
    }
}

} // namespace sluice::http::detail
