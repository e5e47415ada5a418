// SPDX-License-Identifier: Apache-2.0
#pragma once

// The state of a connection and of one request on it (session.cpp).

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
    /// The limiter's side of the request.
    request_limiter limiter;
    bool keep_alive = false;
    bool expect_continue = false;
    /// The body read before the decision, for the limiter's `json:` fields (read_body_ahead).
    std::string body_ahead;
    bool body_read_ahead = false;
    /// When the body's first read began (server.body-timeout counts from there).
    std::optional<std::chrono::steady_clock::time_point> body_started;

    /// The request as the limiter sees it.
    limited_request limited(const key::ip_address& peer) const noexcept {
        return {parser.get(), record.path, peer, body_ahead, body_read_ahead && parser.is_done()};
    }
};

} // namespace sluice::http::detail
