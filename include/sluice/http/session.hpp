// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/http/worker_context.hpp"
#include "sluice/io/net.hpp"

#include <exception>

namespace sluice::http {

/**
 * Serves one client connection until it closes: per request, read the header (within the
 * limits of `server.*`), decide it against the rate limits, then answer it locally (429, 503, a
 * 4xx for a malformed request) or hold it for its shaping delay and forward it upstream.
 * Requests on one connection are answered strictly in order: the next is not read before the
 * previous response is written, and bytes already read for it stay in the connection's buffer.
 *
 * A connection idle for a second gives back its buffers and is parked: the coroutine ends (this
 * one completes) and a new one, spawned with `log_session_exception`, serves the connection's
 * next request when bytes come. So the completion says nothing of the connection's end.
 *
 * Runs on `worker`'s executor, which must outlive it; never throws for anything the network
 * does.
 */
awaitable<void> run_session(tcp_socket socket, worker_context& worker);

/// The completion of a spawned session: logs an exception that escaped it (a bug), throttled.
void log_session_exception(std::exception_ptr e);

} // namespace sluice::http
