// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/core/net.hpp"
#include "sluice/http/worker_context.hpp"

namespace sluice::http {

/**
 * Opens a listening socket on `endpoint` with SO_REUSEADDR and SO_REUSEPORT, so that every
 * worker can have its own acceptor on the same port and the kernel spreads connections among
 * them. Port 0 picks a free port; the others then bind the port the first one got. Throws
 * `boost::system::system_error` naming the step that failed (start-up only).
 */
tcp_acceptor open_acceptor(const executor& ex, const tcp::endpoint& endpoint);

/**
 * Accepts connections until the acceptor is closed, starting a session on the worker for each.
 * Transient failures (out of file descriptors, a connection reset before accept) are logged,
 * rate-limited, and retried after a short pause rather than ending the loop.
 */
awaitable<void> accept_loop(tcp_acceptor& acceptor, worker_context& worker);

} // namespace sluice::http
