// SPDX-License-Identifier: Apache-2.0
#pragma once

// One request on a connection, from its header to its response (request_handler.cpp); the
// connection's own life (accept, keep-alive, parking, close) is session.cpp's.

#include "http/session_state_detail.hpp"
#include "sluice/io/net.hpp"

namespace sluice::http::detail {

/**
 * Serves the request whose memory is `m` (its state made): reads and checks its header, decides
 * it, then answers it or forwards it. Returns what the connection does next; `ending::held`: the
 * request is held by shaping without its coroutine and its memory (`c.held` set, the stream's
 * deadline the end of its hold), and once the connection's wait for readability is over,
 * `resume_request` goes on with it. One coroutine, with synchronous steps, because each
 * coroutine called costs a frame per request.
 */
awaitable<ending> handle_request(connection_state& c, request_memory& m);

/**
 * Goes on with the request held on `c` (`c.held`, left by `handle_request`) in `m` (its state
 * made), its wait over: made again from its header's bytes, on to the end of its hold, then
 * forwarded as `handle_request` would have. Returns what the connection does next.
 */
awaitable<ending> resume_request(connection_state& c, request_memory& m);

/// After `handle_request`: counts the request in the metrics and writes its access-log line.
void finish_request(connection_state& c, request_state& r);

/**
 * Ends the request held without its coroutine on `c` (`ending::held`) whose wait will never
 * complete (its handler destroyed with the io_context's pending ones), as the destruction of a
 * suspended `handle_request` would: its limiter, made again, gives back its slots and settles
 * its reservations; nothing is counted or logged.
 */
void drop_held(connection_state& c);

} // namespace sluice::http::detail
