// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/http/worker_context.hpp"
#include "sluice/io/net.hpp"

namespace sluice::http {

/**
 * Starts serving one client connection (on a coroutine of its own) until it closes: per request,
 * read the header (within the limits of `server.*`), decide it against the rate limits, then
 * answer it locally (429, 503, a 4xx for a malformed request) or hold it for its shaping delay
 * and forward it upstream. Requests on one connection are answered strictly in order: the next
 * is not read before the previous response is written, and bytes already read for it stay in the
 * connection's buffer. Between requests a connection keeps no buffer nor request state (its
 * worker lends them per request), and one idle for 100 ms is parked without a coroutine until
 * bytes come (then a new one serves it).
 *
 * Call on `worker`'s executor, which must outlive the connection; returns at once. Nothing the
 * network does makes it throw; an exception that escapes the coroutine (a bug) is logged.
 */
void start_session(tcp_socket socket, worker_context& worker);

} // namespace sluice::http
