// SPDX-License-Identifier: Apache-2.0
#pragma once

// The tunnel a connection becomes once the upstream has answered a WebSocket upgrade with
// `101 Switching Protocols` (tunnel.cpp): from then on sluice relays bytes both ways without
// parsing them, through one fixed buffer per direction, until both sides have closed, one side
// fails, or nothing has moved for the idle timeout. The forwarder writes the 101 first and
// closes both connections after.

#include "sluice/http/worker_context.hpp"
#include "sluice/io/net.hpp"

#include <boost/beast/core/flat_buffer.hpp>

#include <chrono>
#include <span>

namespace sluice::http::detail {

/// How a tunnel ended.
enum class tunnel_end {
    closed,          // each side closed its sending side, and each close was passed on; or
                     // one closed, then a write to it failed (it closed the whole connection)
    idle,            // no byte moved for the idle timeout, or a write waited that long
    client_failed,   // the client's connection failed (reset, say) while it was open
    upstream_failed, // the upstream's connection failed while it was open
    drained,         // a drain ends it before its deadline stops the worker
};

/// How long before a drain's deadline a tunnel ends: its end (both connections closed, its
/// access-log line written) comes before the worker is stopped, which would cut it unlogged.
inline constexpr std::chrono::milliseconds tunnel_drain_margin{250};

/**
 * Where the worker's drain reaches a tunnel: its deadline (`worker_context::drain_deadline`,
 * `time_point::max()` until a drain begins) and the connection's entry, in whose `wait_timer`
 * the tunnel keeps its watch's timer for `worker_context::begin_drain` to wake. Both null: no
 * drain reaches it (a unit test's tunnel).
 */
struct tunnel_drain {
    session_entry* entry = nullptr;
    const std::chrono::steady_clock::time_point* deadline = nullptr;
};

/// One side of a tunnel: its socket, and what sluice read from it before the tunnel began.
struct tunnel_side {
    tcp_socket& socket;
    /// Bytes read from this side already (behind the request header, behind the 101): they go
    /// to the other side first, and the buffer is left empty.
    beast::flat_buffer& buffered;
    /// Where what is read from this side passes through; its size bounds each read.
    std::span<char> buffer;
};

/**
 * Relays bytes between `client` and `upstream` until the tunnel ends, and says how. A side that
 * closes its sending side (end of stream) has that close passed on as a shutdown of the other
 * side's sending side, and the other direction goes on, as TCP's half-close allows: a WebSocket
 * closing handshake ends with each side waiting for the other's close. A failure on either side
 * ends both directions, and so does a drain, `tunnel_drain_margin` before its deadline, and
 * `idle_timeout` without a byte moved either way, or a write
 * that has waited that long for a peer that stopped reading (the other direction's reads then
 * wait too: the tunnel never reads more than it can write, so a stalled peer costs no memory).
 *
 * The sockets must have no operation pending and no deadline of their own (a timed_stream's
 * must be set to never). When it completes, on the sockets' executor, both sockets may still be
 * open, with their operations cancelled: the caller closes them.
 */
awaitable<tunnel_end> run_tunnel(tunnel_side client,
                                 tunnel_side upstream,
                                 std::chrono::milliseconds idle_timeout,
                                 tunnel_drain drain = {});

} // namespace sluice::http::detail
