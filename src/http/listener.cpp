// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/listener.hpp"

#include "sluice/core/log_throttle.hpp"
#include "sluice/http/connection_balancer.hpp"
#include "sluice/http/session.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/socket_base.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <fcntl.h>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <utility>

namespace sluice::http {
namespace {

/// How long an acceptor waits after a failed accept (out of descriptors, say) before the next.
constexpr std::chrono::milliseconds accept_pause{50};

void check(const error_code& ec, const char* step, const tcp::endpoint& endpoint) {
    if (!ec) {
        return;
    }
    // EADDRINUSE is the one an operator meets (a second instance, another server): it reads the
    // same whichever step reported it; for the others, the step helps.
    const auto why = ec == net::error::address_in_use
                         ? describe_listen_error(ec)
                         : std::string(step) + ": " + describe_listen_error(ec);
    throw std::runtime_error("cannot listen on " + format_endpoint(endpoint) + ": " + why);
}

/// An accepted connection's descriptor on its way to another worker: closed if it never gets
/// there (that worker stopped before running the hand-off).
class handed_socket {
public:
    explicit handed_socket(int fd) noexcept
        : fd_(fd) {}

    handed_socket(handed_socket&& other) noexcept
        : fd_(std::exchange(other.fd_, -1)) {}

    handed_socket& operator=(handed_socket&&) = delete;

    ~handed_socket() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }

    int release() noexcept { return std::exchange(fd_, -1); }

private:
    int fd_;
};

// Starts a session for `socket`, accepted by this worker, on worker `to`. The socket leaves this
// worker's reactor (release() takes it out of the epoll set) and joins `to`'s on `to`'s thread:
// a worker's reactor skips the locking of its sockets' state (worker_io_context), so a socket is
// only ever registered, used and closed by its own worker's thread.
void hand_off(tcp_socket socket, const tcp& protocol, const worker_ref& to) {
    error_code ec;
    handed_socket fd(socket.release(ec));
    if (ec) {
        to.context->balancer->closed(to.context->index);
        return;
    }
    net::post(to.ex, [fd = std::move(fd), protocol, to]() mutable {
        tcp_socket adopted(to.ex);
        error_code assign_ec;
        const int raw = fd.release();
        adopted.assign(protocol, raw, assign_ec);
        if (assign_ec) { // the reactor refused it (out of memory): the socket is still ours
            ::close(raw);
            to.context->balancer->closed(to.context->index);
            return;
        }
        start_session(std::move(adopted), *to.context);
    });
}

} // namespace

std::string format_endpoint(const tcp::endpoint& endpoint) {
    const auto address = endpoint.address();
    return address.is_v6() ? fmt::format("[{}]:{}", address.to_string(), endpoint.port())
                           : fmt::format("{}:{}", address.to_string(), endpoint.port());
}

std::string describe_listen_error(const error_code& ec) {
    return ec == net::error::address_in_use ? "address in use" : ec.message();
}

// One listening socket for all the workers, not one per worker with SO_REUSEPORT: SO_REUSEPORT
// cannot tell a worker of this process from a second sluice started on the same address, which
// would join the port silently and halve every limit's effect. Each worker accepts from the one
// socket through its own dup()'d descriptor in its own reactor (nginx's model before
// SO_REUSEPORT): a new connection wakes the idle workers and the first to call accept() takes it,
// the others see EAGAIN and wait again. The kernel no longer spreads connections evenly by hash,
// but the worker that is free first takes the next one, which suits a proxy whose connections
// differ in cost.
tcp_acceptor open_acceptor(const executor& ex, const tcp::endpoint& endpoint) {
    tcp_acceptor acceptor(ex);
    error_code ec;
    acceptor.open(endpoint.protocol(), ec);
    check(ec, "cannot open a socket", endpoint);
    acceptor.set_option(net::socket_base::reuse_address(true), ec);
    check(ec, "cannot set SO_REUSEADDR", endpoint);
    acceptor.bind(endpoint, ec);
    check(ec, "cannot bind", endpoint);
    acceptor.listen(net::socket_base::max_listen_connections, ec);
    check(ec, "listen failed", endpoint);
    return acceptor;
}

tcp_acceptor share_acceptor(const executor& ex, tcp_acceptor& first) {
    const auto endpoint = first.local_endpoint();
    // CLOEXEC as Asio's own sockets: a child process must not keep the port open.
    const int fd = ::fcntl(first.native_handle(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        check(error_code(errno, boost::system::system_category()), "dup failed", endpoint);
    }
    tcp_acceptor acceptor(ex);
    error_code ec;
    acceptor.assign(endpoint.protocol(), fd, ec);
    if (ec) {
        ::close(fd);
        check(ec, "cannot watch the socket", endpoint);
    }
    return acceptor;
}

void close_acceptor(tcp_acceptor& acceptor) noexcept {
    // Not acceptor.close(): Asio then leaves the descriptor in its epoll set, trusting close() to
    // remove it, but epoll forgets a socket only when every descriptor of it is closed, and the
    // other workers still hold theirs. release() removes it first (and ends the pending accept
    // with operation_aborted); then the descriptor is closed here.
    if (!acceptor.is_open()) {
        return;
    }
    error_code ec;
    const int fd = acceptor.release(ec);
    if (!ec && fd >= 0) {
        ::close(fd);
    }
}

awaitable<void> accept_loop(tcp_acceptor& acceptor, worker_context& worker) {
    // Shared by the workers: out of descriptors, they all fail at once.
    static log_throttle throttle;
    error_code protocol_ec;
    const auto protocol = acceptor.local_endpoint(protocol_ec).protocol();
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
        auto* const balancer = worker.balancer;
        const auto to = balancer != nullptr ? balancer->pick(worker.index) : worker.index;
        if (balancer != nullptr) {
            balancer->opened(to);
        }
        if (to == worker.index) {
            start_session(std::move(socket), worker);
        } else {
            hand_off(std::move(socket), protocol, worker.workers[to]);
        }
    }
}

} // namespace sluice::http
