// SPDX-License-Identifier: Apache-2.0
#include "support/one_connection_server.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>

namespace sluice::test {

one_connection_server::one_connection_server(std::function<void(int)> serve) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof addr;
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), length) != 0 ||
        ::listen(listener_, 4) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
        if (listener_ >= 0) {
            ::close(listener_);
        }
        throw std::runtime_error("one_connection_server: cannot listen");
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, serve = std::move(serve)] {
        const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
            const int one = 1;
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            serve(fd);
        }
    });
}

one_connection_server::~one_connection_server() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    thread_.join();
}

std::string one_connection_server::url() const {
    return fmt::format("http://127.0.0.1:{}", port_);
}

unsigned one_connection_server::pending_connections() const {
    // For a listening socket, Linux reports its accept queue's length in tcpi_unacked.
    tcp_info info{};
    socklen_t length = sizeof info;
    if (::getsockopt(listener_, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) {
        throw std::runtime_error("one_connection_server: TCP_INFO failed");
    }
    return info.tcpi_unacked;
}

} // namespace sluice::test
