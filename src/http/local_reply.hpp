// SPDX-License-Identifier: Apache-2.0
#pragma once

// Answers sluice makes itself, and what a connection does around them: drop a small unread
// body, close gracefully (local_reply.cpp).

#include "http/message_types.hpp"
#include "sluice/io/coarse_clock.hpp"
#include "sluice/io/timed_stream.hpp"
#include "sluice/limiter/decision.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::http::detail {

/// A rejected request's unread body is read and dropped (keeping the connection) up to this
/// size; a larger or unknown one closes the connection instead.
inline constexpr std::uint64_t max_discard_bytes = 64 * 1024;

/// The rate-limit headers a response carries; `decision` null: none.
struct rate_limit_context {
    std::string_view name;
    const limiter::decision* decision = nullptr;
    bool x_ratelimit = false;
    /// When the store decided (coarse_clock): a reset is a moment, and a response that leaves
    /// after a hold or an upstream's wait states it as what is left of it then.
    coarse_clock::time_point decided_at{};
};

/**
 * The decision of `limits` as a response leaving now states it: its reset less the time since
 * the store decided, never below 0 (a held request's response leaves a hold and an upstream's
 * wait later), its other values as decided. `limits.decision` must not be null.
 */
limiter::decision as_of_now(const rate_limit_context& limits) noexcept;

/// A response sluice makes itself (429, 4xx for bad requests, 502/503/504).
struct local_reply {
    bhttp::status status = bhttp::status::ok;
    /// JSON text; a default one names the status when empty.
    std::string body;
    /// Retry-After seconds, 0 for none.
    std::int64_t retry_after = 0;
};

/// The request-level facts a reply depends on.
struct reply_context {
    unsigned version = 11;
    bool head = false;
    rate_limit_context limits;
    milliseconds write_timeout{30'000};
};

/**
 * The response `reply` stands for: its status in the request's HTTP version, a JSON body (the
 * reply's own, or {"error":"<word for the status>"}), `Retry-After` when set, the rate-limit
 * fields of `context.limits`, and `Connection: close` unless `keep_alive`.
 */
bhttp::response<bhttp::string_body>
make_local_response(const local_reply& reply, const reply_context& context, bool keep_alive);

/**
 * Writes `reply`, with `Connection: close` unless `keep_alive`. Returns the write's error.
 */
awaitable<error_code> write_local_reply(timed_stream& stream,
                                        const local_reply& reply,
                                        const reply_context& context,
                                        bool keep_alive);

/**
 * Reads and drops the rest of a request body, if it is small enough (`max_discard_bytes`, known
 * length) to be cheaper than a new connection, all of it by `deadline`: one deadline for the
 * whole body, so that a client trickling a byte now and then cannot hold the connection (each
 * read within its own timeout, 64 KiB could take weeks). Returns true when the connection can
 * carry another request.
 */
awaitable<bool> discard_body(timed_stream& stream,
                             beast::flat_buffer& buffer,
                             request_parser& parser,
                             std::chrono::steady_clock::time_point deadline);

/**
 * Closes a connection after a final response without losing it: shut down the sending side,
 * then read and drop whatever the client still sends (a body we did not want) until it closes or
 * a short deadline passes. Closing with unread bytes would make the kernel send a RST, which can
 * destroy the response before the client reads it.
 */
awaitable<void> lingering_close(timed_stream& stream);

} // namespace sluice::http::detail
