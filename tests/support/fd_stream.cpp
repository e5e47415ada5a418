// SPDX-License-Identifier: Apache-2.0
#include "support/fd_stream.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <utility>

namespace sluice::test {

namespace net = boost::asio;

namespace {

error_code errno_code(int value) {
    return {value, boost::system::system_category()};
}

} // namespace

fd_stream::fd_stream(int fd, int wake_fd) noexcept
    : fd_(fd)
    , wake_fd_(wake_fd) {}

fd_stream::fd_stream(fd_stream&& other) noexcept
    : fd_(std::exchange(other.fd_, -1))
    , wake_fd_(other.wake_fd_)
    , timeout_(other.timeout_) {}

fd_stream& fd_stream::operator=(fd_stream&& other) noexcept {
    if (this != &other) {
        close();
        fd_ = std::exchange(other.fd_, -1);
        wake_fd_ = other.wake_fd_;
        timeout_ = other.timeout_;
    }
    return *this;
}

fd_stream::~fd_stream() {
    close();
}

fd_stream fd_stream::connect_loopback(std::uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        throw boost::system::system_error(errno_code(errno), "socket");
    }
    fd_stream stream(fd);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    // A loopback connect completes (or is refused) at once, so a blocking connect is fine.
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
        throw boost::system::system_error(errno_code(errno), "connect");
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return stream;
}

void fd_stream::shutdown_send() noexcept {
    if (fd_ >= 0) {
        ::shutdown(fd_, SHUT_WR);
    }
}

void fd_stream::close() noexcept {
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
}

void fd_stream::reset() noexcept {
    if (fd_ >= 0) {
        const ::linger abort_on_close{1, 0};
        ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof(abort_on_close));
        close();
    }
}

bool fd_stream::wait_ready(short events, std::chrono::milliseconds timeout, error_code& ec) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        pollfd fds[2] = {{fd_, events, 0}, {wake_fd_, POLLIN, 0}};
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() < 0) {
            ec = net::error::timed_out;
            return false;
        }
        const int ready = ::poll(fds, wake_fd_ >= 0 ? 2 : 1, static_cast<int>(left.count()) + 1);
        if (ready < 0) {
            if (errno == EINTR) {
                continue;
            }
            ec = errno_code(errno);
            return false;
        }
        if (wake_fd_ >= 0 && (fds[1].revents & POLLIN) != 0) {
            ec = net::error::operation_aborted;
            return false;
        }
        // Errors and hang-ups are reported by the read or write that follows.
        if (fds[0].revents != 0) {
            ec = {};
            return true;
        }
    }
}

bool fd_stream::wait_readable(error_code& ec) {
    return wait_ready(POLLIN, timeout_, ec);
}

std::size_t fd_stream::read_raw(void* data, std::size_t size, error_code& ec) {
    if (fd_ < 0) {
        ec = net::error::bad_descriptor;
        return 0;
    }
    for (;;) {
        if (!wait_ready(POLLIN, timeout_, ec)) {
            return 0;
        }
        const ssize_t n = ::recv(fd_, data, size, MSG_DONTWAIT);
        if (n > 0) {
            ec = {};
            return static_cast<std::size_t>(n);
        }
        if (n == 0) {
            ec = net::error::eof;
            return 0;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            ec = errno_code(errno);
            return 0;
        }
    }
}

std::size_t fd_stream::write_raw(const void* data, std::size_t size, error_code& ec) {
    if (fd_ < 0) {
        ec = net::error::bad_descriptor;
        return 0;
    }
    for (;;) {
        if (!wait_ready(POLLOUT, timeout_, ec)) {
            return 0;
        }
        // MSG_NOSIGNAL: a peer that closed early must give EPIPE, not kill the test with SIGPIPE.
        const ssize_t n = ::send(fd_, data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n >= 0) {
            ec = {};
            return static_cast<std::size_t>(n);
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            ec = errno_code(errno);
            return 0;
        }
    }
}

void fd_stream::write_all(std::string_view bytes, error_code& ec) {
    ec = {};
    while (!bytes.empty()) {
        const std::size_t n = write_raw(bytes.data(), bytes.size(), ec);
        if (ec) {
            return;
        }
        bytes.remove_prefix(n);
    }
}

void fd_stream::write_all(std::string_view bytes) {
    error_code ec;
    write_all(bytes, ec);
    if (ec) {
        throw boost::system::system_error(ec, "write");
    }
}

bool fd_stream::wait_closed(std::chrono::milliseconds timeout, std::string* discarded) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buffer[4096];
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            return false;
        }
        error_code ec;
        if (!wait_ready(POLLIN, left, ec)) {
            return false;
        }
        const ssize_t n = ::recv(fd_, buffer, sizeof buffer, MSG_DONTWAIT);
        if (n == 0) {
            return true;
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                continue;
            }
            return true; // ECONNRESET and friends: the peer is gone
        }
        if (discarded != nullptr) {
            discarded->append(buffer, static_cast<std::size_t>(n));
        }
    }
}

} // namespace sluice::test
