// SPDX-License-Identifier: Apache-2.0
#include "support/recording_upstream.hpp"

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <limits>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdexcept>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace sluice::test {

namespace http = boost::beast::http;
namespace net = boost::asio;

namespace {

constexpr std::size_t body_prefix_limit = 64 * 1024;
constexpr std::size_t piece_size = 64 * 1024;

response_plan default_plan(const recorded_request&) {
    return {};
}

std::string hex(std::uint64_t value) {
    char text[32];
    const int n = std::snprintf(text, sizeof text, "%llx", static_cast<unsigned long long>(value));
    return std::string(text, static_cast<std::size_t>(n));
}

// Connection ends that are nobody's fault: the peer closed between requests, or we stopped.
bool clean_end(const error_code& ec) {
    return ec == http::error::end_of_stream || ec == net::error::operation_aborted ||
           ec == net::error::timed_out;
}

using body_parser = http::request_parser<http::buffer_body>;

// Reads the body through a fixed piece of memory into `record`'s size, hash and prefix, and
// into `echo` when given. False on a read or framing error.
bool read_body(fd_stream& stream,
               boost::beast::flat_buffer& buffer,
               body_parser& parser,
               recorded_request& record,
               std::string* echo) {
    std::vector<char> piece(piece_size);
    fnv1a64 hash;
    while (!parser.is_done()) {
        parser.get().body().data = piece.data();
        parser.get().body().size = piece.size();
        error_code ec;
        http::read(stream, buffer, parser, ec);
        if (ec && ec != http::error::need_buffer) {
            return false;
        }
        const std::size_t n = piece.size() - parser.get().body().size;
        hash.update(piece.data(), n);
        record.body_size += n;
        if (record.body_prefix.size() < body_prefix_limit) {
            record.body_prefix.append(piece.data(),
                                      std::min(n, body_prefix_limit - record.body_prefix.size()));
        }
        if (echo != nullptr) {
            echo->append(piece.data(), n);
        }
    }
    record.body_hash = hash.value();
    return true;
}

} // namespace

recording_upstream::recording_upstream()
    : recording_upstream(default_plan) {}

recording_upstream::recording_upstream(handler h)
    : handler_(std::move(h)) {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (wake_fd_ < 0 || listen_fd_ < 0) {
        throw std::runtime_error("recording_upstream: " + std::string(std::strerror(errno)));
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listen_fd_, 256) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
        throw std::runtime_error("recording_upstream: " + std::string(std::strerror(errno)));
    }
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
}

recording_upstream::~recording_upstream() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto written = ::write(wake_fd_, &one, sizeof one);
    if (acceptor_.joinable()) {
        acceptor_.join();
    }
    // The acceptor is gone, so the list can no longer grow.
    for (auto& thread : connections_) {
        thread.join();
    }
    ::close(listen_fd_);
    ::close(wake_fd_);
}

std::string recording_upstream::url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
}

void recording_upstream::set_handler(handler h) {
    std::lock_guard lock(mutex_);
    handler_ = std::move(h);
}

std::vector<recorded_request> recording_upstream::requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
}

upstream_stats recording_upstream::stats() const {
    std::lock_guard lock(mutex_);
    return stats_;
}

bool recording_upstream::wait_for_count(std::size_t n, std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return requests_.size() >= n; });
}

bool recording_upstream::wait_for_stats(const std::function<bool(const upstream_stats&)>& done,
                                        std::chrono::milliseconds timeout) const {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return done(stats_); });
}

bool recording_upstream::wait_quiet(std::chrono::milliseconds timeout) const {
    // Unread bytes wake nobody, so this polls; 1 ms steps keep it cheap and prompt.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock lock(mutex_);
    while (!quiet_locked()) {
        if (std::chrono::steady_clock::now() >= deadline) {
            return false;
        }
        changed_.wait_for(lock, std::chrono::milliseconds(1));
    }
    return true;
}

bool recording_upstream::quiet_locked() const {
    const auto readable = [](int fd) {
        pollfd p{fd, POLLIN, 0};
        return ::poll(&p, 1, 0) > 0 && p.revents != 0;
    };
    if (accepting_ || readable(listen_fd_)) {
        return false;
    }
    for (const auto& c : connection_states_) {
        if (!c.done && (!c.idle || readable(c.fd))) {
            return false;
        }
    }
    return true;
}

void recording_upstream::accept_loop() {
    for (;;) {
        pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            return;
        }
        if ((fds[1].revents & POLLIN) != 0) {
            return;
        }
        {
            std::lock_guard lock(mutex_);
            accepting_ = true;
        }
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        std::unique_lock lock(mutex_);
        accepting_ = false;
        if (fd < 0) {
            continue;
        }
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        const std::size_t index = stats_.connections++;
        connection_states_.push_back({fd, false, false});
        connections_.emplace_back(
            [this, index](fd_stream stream) { serve(std::move(stream), index); },
            fd_stream(fd, wake_fd_));
        lock.unlock();
        changed_.notify_all();
    }
}

void recording_upstream::serve(fd_stream stream, std::size_t index) {
    // Idle keep-alive connections may sit for a whole test; the wake fd ends them at shutdown.
    stream.timeout(std::chrono::minutes(10));
    boost::beast::flat_buffer buffer;
    for (;;) {
        // Between requests, wait for the first byte while marked idle (see wait_quiet). The
        // flag is cleared under the mutex before any byte is consumed.
        if (buffer.size() == 0) {
            {
                std::lock_guard lock(mutex_);
                connection_states_[index].idle = true;
            }
            error_code ec;
            const bool readable = stream.wait_readable(ec);
            std::lock_guard lock(mutex_);
            connection_states_[index].idle = false;
            if (!readable) {
                break;
            }
        }
        if (!serve_one(stream, buffer, index)) {
            break;
        }
    }
    // Marked done before the stream closes the fd, so wait_quiet never polls a reused fd.
    std::lock_guard lock(mutex_);
    connection_states_[index].done = true;
}

bool recording_upstream::serve_one(fd_stream& stream,
                                   boost::beast::flat_buffer& buffer,
                                   std::size_t index) {
    body_parser parser;
    parser.header_limit(1024 * 1024);
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    error_code ec;
    http::read_header(stream, buffer, parser, ec);
    if (ec) {
        if (!clean_end(ec) || buffer.size() != 0) {
            count(&upstream_stats::broken);
        }
        return false;
    }
    recorded_request record;
    record.arrival = std::chrono::steady_clock::now();
    record.method = std::string(parser.get().method_string());
    record.target = std::string(parser.get().target());
    for (const auto& field : parser.get()) {
        record.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    record.chunked = parser.chunked();
    record.connection = index;
    handler choose;
    {
        std::lock_guard lock(mutex_);
        choose = handler_;
    }
    count(&upstream_stats::headers_received);
    const response_plan plan = choose(record);
    if (plan.answer_before_body) {
        write_response(stream, plan, record, {}, false);
        return false; // closed with the body unread: a reset
    }

    std::string echo;
    if (!read_body(stream,
                   buffer,
                   parser,
                   record,
                   plan.kind == response_plan::body_kind::echo ? &echo : nullptr)) {
        count(&upstream_stats::broken);
        return false;
    }
    const bool keep_alive = parser.keep_alive() && !plan.close && !plan.close_delimited;
    {
        std::lock_guard lock(mutex_);
        requests_.push_back(record);
        ++stats_.completed;
    }
    changed_.notify_all();

    if (plan.close_unanswered) {
        stream.shutdown_send();
        return false;
    }
    if (plan.delay.count() > 0 && !pause(plan.delay)) {
        return false;
    }
    if (!write_response(stream, plan, record, echo, keep_alive)) {
        return false;
    }
    if (!plan.stray.empty()) {
        if (!pause(plan.stray_delay)) {
            return false;
        }
        error_code write_ec;
        stream.write_all(plan.stray, write_ec);
        if (write_ec) {
            return false;
        }
        count(&upstream_stats::strays_sent);
    }
    return keep_alive && !plan.close_silently;
}

void recording_upstream::count(std::size_t upstream_stats::*counter) {
    {
        std::lock_guard lock(mutex_);
        ++(stats_.*counter);
    }
    changed_.notify_all();
}

bool recording_upstream::write_response(fd_stream& stream,
                                        const response_plan& plan,
                                        const recorded_request& request,
                                        const std::string& echo,
                                        bool keep_alive) {
    using kind = response_plan::body_kind;
    const std::uint64_t size = plan.kind == kind::fixed  ? plan.body.size()
                               : plan.kind == kind::echo ? echo.size()
                                                         : plan.pattern_size;
    const std::string_view reason = http::obsolete_reason(static_cast<http::status>(plan.status));
    std::string head =
        "HTTP/1.1 " + std::to_string(plan.status) + " " + std::string(reason) + "\r\n";
    head += "X-Upstream-Target: " + request.target + "\r\n";
    for (const auto& [name, value] : plan.headers) {
        head += name + ": " + value + "\r\n";
    }
    if (plan.chunked) {
        head += "Transfer-Encoding: chunked\r\n";
    } else if (!plan.close_delimited) {
        head += "Content-Length: " + std::to_string(size) + "\r\n";
    }
    if (!keep_alive) {
        head += "Connection: close\r\n";
    }
    head += "\r\n";
    error_code ec;
    if (!plan.interim.empty()) {
        stream.write_all(plan.interim, ec);
    }
    if (plan.interim_every.count() > 0) {
        while (!ec && pause(plan.interim_every)) {
            stream.write_all(plan.interim, ec);
        }
        return false;
    }
    if (!ec) {
        stream.write_all(head, ec);
    }
    const bool no_body = request.method == "HEAD" || plan.status == 204 || plan.status == 304;
    if (!ec && plan.body_delay.count() > 0 && !pause(plan.body_delay)) {
        return false;
    }
    std::vector<char> piece;
    for (std::uint64_t offset = 0; !ec && !no_body && offset < size;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(piece_size, size - offset));
        std::string_view bytes;
        if (plan.kind == kind::pattern) {
            piece.resize(n);
            fill_pattern(plan.pattern_seed, offset, piece.data(), n);
            bytes = std::string_view(piece.data(), n);
        } else {
            bytes = std::string_view(plan.kind == kind::fixed ? plan.body : echo).substr(offset, n);
        }
        if (plan.chunked) {
            stream.write_all(hex(n) + "\r\n", ec);
        }
        if (!ec) {
            stream.write_all(bytes, ec);
        }
        if (!ec && plan.chunked) {
            stream.write_all("\r\n", ec);
        }
        offset += n;
    }
    if (!ec && plan.chunked && plan.cut_short) {
        stream.shutdown_send();
        return false;
    }
    if (!ec && plan.chunked && !no_body) {
        stream.write_all("0\r\n" + plan.trailer + "\r\n", ec);
    }
    if (!ec && !keep_alive) {
        stream.shutdown_send();
    }
    return !ec;
}

bool recording_upstream::pause(std::chrono::milliseconds delay) const {
    pollfd fd{wake_fd_, POLLIN, 0};
    const auto deadline = std::chrono::steady_clock::now() + delay;
    for (;;) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) {
            return true;
        }
        // Rounded up: truncated, the pause ended up to 1 ms early, and a test that measures
        // the service time from the upstream's arrivals saw 999 ms of a 1000 ms hold.
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
        const int ready = ::poll(&fd, 1, static_cast<int>(left.count()));
        if (ready > 0) {
            return false;
        }
    }
}

recording_upstream echo_upstream() {
    return recording_upstream([](const recorded_request&) {
        response_plan plan;
        plan.kind = response_plan::body_kind::echo;
        return plan;
    });
}

} // namespace sluice::test
