// SPDX-License-Identifier: Apache-2.0
#pragma once

// One request on a connection, from its header to its response (request_handler.cpp); the
// connection's own life (accept, keep-alive, parking, close) is session.cpp's.

#include "http/session_state_detail.hpp"
#include "sluice/io/net.hpp"

namespace sluice::http::detail {

/**
 * Serves the request whose memory is `m` (its state made): reads and checks its header, decides
 * it, then answers it or forwards it. Returns what the connection does next. One coroutine, with
 * synchronous steps, because each coroutine called costs a frame per request.
 */
awaitable<ending> handle_request(connection_state& c, request_memory& m);

/// After `handle_request`: counts the request in the metrics and writes its access-log line.
void finish_request(connection_state& c, request_state& r);

} // namespace sluice::http::detail
