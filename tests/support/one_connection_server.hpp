// SPDX-License-Identifier: Apache-2.0
#pragma once

// An upstream written by hand, byte by byte, for what recording_upstream cannot be made to do:
// a listening socket on 127.0.0.1 whose first connection is given, as a descriptor, to a
// function of the test's own.

#include <cstdint>
#include <functional>
#include <string>
#include <thread>

namespace sluice::test {

/**
 * A listening socket on 127.0.0.1 whose first connection (TCP_NODELAY on) is served by
 * `serve(fd)` on a thread of its own; `serve` owns the descriptor. Later connections wait in
 * the listen backlog (4), never accepted: `pending_connections` counts them. Stopping
 * (destruction) wakes a pending accept and joins the thread, so `serve` must end by itself.
 */
class one_connection_server {
public:
    explicit one_connection_server(std::function<void(int)> serve);

    one_connection_server(const one_connection_server&) = delete;
    one_connection_server& operator=(const one_connection_server&) = delete;

    ~one_connection_server();

    std::uint16_t port() const noexcept { return port_; }

    /// "http://127.0.0.1:<port>".
    std::string url() const;

    /// How many connections wait in the backlog now: those after the first, as the listener's
    /// socket diagnostics (`tcpi_unacked` of a listener) count them.
    unsigned pending_connections() const;

private:
    int listener_ = -1;
    std::uint16_t port_ = 0;
    std::thread thread_;
};

} // namespace sluice::test
