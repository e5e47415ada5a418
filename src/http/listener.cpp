// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/listener.hpp"

#include "sluice/core/log_throttle.hpp"
#include "sluice/http/session.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/system/system_error.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>
#include <sys/socket.h>

namespace sluice::http {
namespace {

using reuse_port = net::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

/// How long an acceptor waits after a failed accept (out of descriptors, say) before the next.
constexpr std::chrono::milliseconds accept_pause{50};

void check(const error_code& ec, const char* what, const tcp::endpoint& endpoint) {
    if (ec) {
        throw boost::system::system_error(ec,
                                          std::string(what) + " " + endpoint.address().to_string() +
                                              ":" + std::to_string(endpoint.port()));
    }
}

void log_session_exception(std::exception_ptr e) {
    if (!e) {
        return;
    }
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& ex) {
        // An exception escaping a session is a bug, not control flow: say so loudly, but a
        // peer that triggers it again and again must not flood the log.
        static log_throttle throttle;
        log_throttled(throttle, spdlog::level::err, "session ended by an exception: {}", ex.what());
    }
}

} // namespace

tcp_acceptor open_acceptor(const executor& ex, const tcp::endpoint& endpoint) {
    tcp_acceptor acceptor(ex);
    error_code ec;
    acceptor.open(endpoint.protocol(), ec);
    check(ec, "cannot open a socket for", endpoint);
    acceptor.set_option(net::socket_base::reuse_address(true), ec);
    check(ec, "cannot set SO_REUSEADDR on", endpoint);
    acceptor.set_option(reuse_port(true), ec);
    check(ec, "cannot set SO_REUSEPORT on", endpoint);
    acceptor.bind(endpoint, ec);
    check(ec, "cannot bind", endpoint);
    acceptor.listen(net::socket_base::max_listen_connections, ec);
    check(ec, "cannot listen on", endpoint);
    return acceptor;
}

awaitable<void> accept_loop(tcp_acceptor& acceptor, worker_context& worker) {
    // Shared by the workers: out of descriptors, they all fail at once.
    static log_throttle throttle;
    for (;;) {
        auto [ec, socket] = co_await acceptor.async_accept();
        if (ec == net::error::operation_aborted || !acceptor.is_open()) {
            co_return;
        }
        if (ec) {
            log_throttled(throttle,
                          spdlog::level::warn,
                          "worker {}: accept failed: {}",
                          worker.index,
                          ec.message());
            // Out of descriptors, say: accepting again at once would spin.
            steady_timer pause(acceptor.get_executor(), accept_pause);
            auto [wait_ec] = co_await pause.async_wait();
            (void)wait_ec;
            continue;
        }
        net::co_spawn(
            acceptor.get_executor(), run_session(std::move(socket), worker), log_session_exception);
    }
}

} // namespace sluice::http
