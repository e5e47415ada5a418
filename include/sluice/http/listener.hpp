// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/http/worker_context.hpp"
#include "sluice/io/net.hpp"

#include <string>

namespace sluice::http {

/**
 * Opens the listening socket on `endpoint`, with SO_REUSEADDR (a restart may bind at once while
 * old connections linger in TIME_WAIT) but without SO_REUSEPORT: a second process on the same
 * address gets EADDRINUSE instead of silently sharing the port (with a memory store of its own,
 * every limit would double). Port 0 picks a free port. Throws `std::runtime_error`, e.g.
 * `cannot listen on 127.0.0.1:8080: address in use` (start-up only).
 */
tcp_acceptor open_acceptor(const executor& ex, const tcp::endpoint& endpoint);

/**
 * Another acceptor on `ex` for the socket `first` listens on: a dup()'d descriptor of the same
 * socket, so every worker accepts from one queue, each through its own reactor. Throws
 * `std::runtime_error` when no descriptor is left (start-up only).
 */
tcp_acceptor share_acceptor(const executor& ex, tcp_acceptor& first);

/**
 * Closes this worker's descriptor of the listening socket, ending its `accept_loop`. The kernel
 * stops accepting once every worker has closed its own. Call on the acceptor's thread.
 */
void close_acceptor(tcp_acceptor& acceptor) noexcept;

/// `host:port`, with brackets around an IPv6 host: how listen addresses appear in the log.
std::string format_endpoint(const tcp::endpoint& endpoint);

/**
 * Why a listening socket could not be opened, as an operator reads it: `address in use` for
 * EADDRINUSE (another process, or another sluice, has it), else the system's message.
 */
std::string describe_listen_error(const error_code& ec);

/**
 * Accepts connections until the acceptor is closed, starting a session for each on this worker,
 * or, with several workers, on the one with the fewest connections when this one has at least
 * two more (`connection_balancer`). Transient failures (out of file descriptors, a connection
 * reset before accept) are logged, rate-limited, and retried after a short pause rather than
 * ending the loop.
 */
awaitable<void> accept_loop(tcp_acceptor& acceptor, worker_context& worker);

} // namespace sluice::http
