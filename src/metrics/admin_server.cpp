// SPDX-License-Identifier: Apache-2.0
#include "sluice/metrics/admin_server.hpp"

#include "sluice/core/escaped_exception.hpp"
#include "sluice/core/log_throttle.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <list>
#include <optional>
#include <string>

namespace sluice::metrics {
namespace http = beast::http;

struct admin_server::impl : std::enable_shared_from_this<impl> {
    impl(executor ex, const registry& m, readiness r)
        : acceptor(ex)
        , accept_pause_timer(ex)
        , metrics(m)
        , ready(std::move(r)) {}

    tcp_acceptor acceptor;
    /// The accept loop's wait after a failed accept; `stop` cancels it, or the process's exit
    /// would wait it out.
    steady_timer accept_pause_timer;
    const registry& metrics;
    readiness ready;

    /// A connection being served, from its accept to its answer's end.
    struct connection {
        explicit connection(tcp_socket socket)
            : stream(std::move(socket)) {}

        tcp_stream stream;
        /// Its request head came: it ends within its answer's write deadline (and the linger
        /// after it).
        bool head_read = false;
        /// When it began to answer (its head read); for `make_room`.
        std::chrono::steady_clock::time_point answering_since{};
        /// Closed to make room for a newer one; its coroutine has yet to end.
        bool evicted = false;
    };

    /// The connections being served, newest first, all on the acceptor's executor, counted as
    /// they are accepted: `stop` closes them, or a client that sent nothing would keep the
    /// process up to its head's deadline past its drain.
    std::list<connection> serving;
};

namespace {

/// How long the admin listener waits after a failed accept before the next (as the proxy's do).
constexpr std::chrono::milliseconds accept_pause{100};
/// Admin connections served at once. A scraper and a few probes need a handful; each holds a
/// descriptor, which the proxy's listener shares. One more takes the place of the one that has
/// `make_room` chooses.
constexpr std::size_t max_serving = 64;
/// How long a connection may take to send its request head: a probe or a scraper sends it at
/// once, in milliseconds.
constexpr std::chrono::seconds head_timeout{2};
/// How long the answer's write may take (a large /metrics to a slow scraper).
constexpr std::chrono::seconds write_timeout{10};
/// A request's header: no endpoint takes a body (one is refused) or a long header.
constexpr std::uint32_t max_request_header = 8 * 1024;
/// After its answer, how long a connection is read and what it sent dropped before it closes,
/// and how much: closing with bytes unread (a body, a second request) sends a reset, which may
/// take the answer away from the client before it has read it.
constexpr std::chrono::seconds linger_timeout{1};
constexpr std::size_t max_linger_bytes = 64 * 1024;

/// The answer to a request that could not be read: 431 for a header over the limit, 400 for
/// one that is no HTTP/1 request; nullopt to close without one (the client left, or took too
/// long: no answer would reach it in time).
std::optional<http::status> read_error_status(const error_code& ec) {
    if (ec == http::error::header_limit) {
        return http::status::request_header_fields_too_large;
    }
    if (ec == beast::error::timeout || ec == net::error::eof || ec == http::error::end_of_stream ||
        ec == http::error::partial_message || ec == net::error::operation_aborted ||
        ec == net::error::connection_reset) {
        return std::nullopt;
    }
    return http::status::bad_request;
}

http::response<http::string_body> refusal(http::status status, std::string body) {
    http::response<http::string_body> res{status, 11};
    res.set(http::field::server, "sluice");
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.keep_alive(false);
    res.body() = std::move(body);
    res.prepare_payload();
    return res;
}

http::response<http::string_body> answer(const http::request_header<>& req,
                                         const registry& metrics,
                                         const admin_server::readiness& ready) {
    http::response<http::string_body> res{http::status::ok, 11};
    res.set(http::field::server, "sluice");
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.keep_alive(false);
    const auto target = req.target();
    const auto path = target.substr(0, target.find('?'));
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
        res.result(http::status::method_not_allowed);
        res.set(http::field::allow, "GET, HEAD");
        res.body() = "method not allowed\n";
    } else if (path == "/metrics") {
        res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
        res.body() = metrics.render();
    } else if (path == "/healthz") {
        res.body() = "ok\n";
    } else if (path == "/readyz") {
        const bool ok = !ready || ready();
        res.result(ok ? http::status::ok : http::status::service_unavailable);
        res.body() = ok ? "ready\n" : "not ready\n";
    } else {
        res.result(http::status::not_found);
        res.body() = "not found: try /metrics, /healthz or /readyz\n";
    }
    res.prepare_payload();
    if (req.method() == http::verb::head) {
        // The Content-Length of what GET would send, and no body (RFC 9110 9.3.2).
        res.body().clear();
    }
    return res;
}

using connection_list = std::list<admin_server::impl::connection>;

awaitable<void> serve(connection_list::iterator at, std::shared_ptr<admin_server::impl> self) {
    struct forget {
        connection_list& serving;
        connection_list::iterator at;

        ~forget() { serving.erase(at); }
    } const forget_at_end{self->serving, at};

    tcp_stream& stream = at->stream;
    beast::flat_buffer buffer;
    http::request_parser<http::empty_body> parser;
    parser.header_limit(max_request_header);
    stream.expires_after(head_timeout);
    auto [ec, n] = co_await http::async_read_header(stream, buffer, parser);
    http::response<http::string_body> res;
    if (ec) {
        const auto status = read_error_status(ec);
        if (!status) {
            co_return;
        }
        res = refusal(*status,
                      *status == http::status::bad_request ? "bad request\n"
                                                           : "request header too large\n");
    } else if (parser.get().version() / 10 != 1) {
        res = refusal(http::status::http_version_not_supported, "HTTP/1.x only\n");
    } else if (!parser.is_done()) {
        // A body: no endpoint takes one.
        res = refusal(parser.get().method() == http::verb::get ||
                              parser.get().method() == http::verb::head
                          ? http::status::bad_request
                          : http::status::method_not_allowed,
                      "no endpoint here takes a request body\n");
        if (res.result() == http::status::method_not_allowed) {
            res.set(http::field::allow, "GET, HEAD");
        }
    } else {
        res = answer(parser.get(), self->metrics, self->ready);
    }
    at->head_read = true;
    at->answering_since = std::chrono::steady_clock::now();
    stream.expires_after(write_timeout);
    auto [wec, wn] = co_await http::async_write(stream, res);
    if (wec) {
        co_return;
    }
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    // Reads what the client sent beyond its header until it closes (or a second, or 64 KiB), so
    // that the close that follows sends no reset in place of the answer.
    stream.expires_after(linger_timeout);
    for (std::size_t drained = 0; drained < max_linger_bytes;) {
        char sink[4096];
        auto [rec, rn] = co_await stream.async_read_some(net::buffer(sink));
        if (rec) {
            break;
        }
        drained += rn;
    }
}

/**
 * Makes room for one more connection when `max_serving` are served, so that no client can keep
 * a probe or a scrape out (theirs come and are answered in milliseconds): closes the one that
 * has waited longest for its request head (a client holding idle connections), or, when every
 * one has its head, the one that has been answering longest (a client that asks and does not
 * read its answers, or lingers after them). Always makes room.
 */
void make_room(connection_list& serving) {
    std::size_t open = 0;
    admin_server::impl::connection* longest_waiting = nullptr;
    admin_server::impl::connection* longest_answering = nullptr;
    for (auto& c : serving) {
        if (c.evicted) {
            continue; // closed already, its coroutine not yet ended
        }
        ++open;
        if (!c.head_read) {
            longest_waiting = &c; // the list is newest first: the last one found is the oldest
        } else if (longest_answering == nullptr ||
                   c.answering_since <= longest_answering->answering_since) {
            longest_answering = &c;
        }
    }
    if (open < max_serving) {
        return;
    }
    // One throttle each: one kind of warning must not hide the other for the second.
    static log_throttle closing_answering;
    static log_throttle closing_waiting;
    auto* victim = longest_waiting;
    if (victim == nullptr) {
        victim = longest_answering;
        log_throttled(closing_answering,
                      spdlog::level::warn,
                      "admin: {} connections served at once, all answering; closing the one "
                      "whose answer has taken longest",
                      max_serving);
    } else {
        log_throttled(closing_waiting,
                      spdlog::level::warn,
                      "admin: {} connections served at once; closing the one that waited "
                      "longest for its request",
                      max_serving);
    }
    victim->evicted = true;
    victim->stream.close(); // its read or write ends with operation_aborted, its coroutine too
}

/// An exception escaping an admin connection is a bug; a client may trigger it again and again.
log_throttle connection_exception_throttle;

awaitable<void> accept_loop(std::shared_ptr<admin_server::impl> self) {
    static log_throttle throttle;
    for (;;) {
        auto [ec, socket] = co_await self->acceptor.async_accept();
        if (ec == net::error::operation_aborted || !self->acceptor.is_open()) {
            co_return;
        }
        if (ec) {
            log_throttled(throttle, spdlog::level::warn, "admin: accept failed: {}", ec.message());
            // Out of descriptors, say: accepting again at once would spin (and the failed accept
            // leaves the connection queued, so the next one fails at once too).
            self->accept_pause_timer.expires_after(accept_pause);
            auto [wait_ec] = co_await self->accept_pause_timer.async_wait();
            if (wait_ec || !self->acceptor.is_open()) {
                co_return;
            }
            continue;
        }
        make_room(self->serving);
        self->serving.emplace_front(std::move(socket));
        net::co_spawn(self->acceptor.get_executor(),
                      serve(self->serving.begin(), self),
                      log_escaped{"admin connection", &connection_exception_throttle});
    }
}

} // namespace

admin_server::admin_server(executor ex, const registry& metrics, readiness ready)
    : impl_(std::make_shared<impl>(std::move(ex), metrics, std::move(ready))) {}

admin_server::~admin_server() {
    stop();
}

error_code admin_server::listen(const config::endpoint_address& address) {
    error_code ec;
    tcp::endpoint endpoint;
    if (const auto ip = net::ip::make_address(address.host, ec); !ec) {
        endpoint = {ip, address.port};
    } else {
        // A host name (`localhost:9901`), as server.listen takes one: looked up once, at start.
        tcp::resolver resolver(impl_->acceptor.get_executor());
        const auto found = resolver.resolve(address.host, std::to_string(address.port), ec);
        if (ec) {
            return ec;
        }
        if (found.empty()) {
            return net::error::host_not_found;
        }
        endpoint = found.begin()->endpoint();
    }
    auto& a = impl_->acceptor;
    a.open(endpoint.protocol(), ec);
    if (!ec) {
        a.set_option(net::socket_base::reuse_address(true), ec);
    }
    if (!ec) {
        a.bind(endpoint, ec);
    }
    if (!ec) {
        a.listen(net::socket_base::max_listen_connections, ec);
    }
    return ec;
}

std::uint16_t admin_server::port() const {
    error_code ec;
    return impl_->acceptor.local_endpoint(ec).port();
}

void admin_server::start() {
    net::co_spawn(
        impl_->acceptor.get_executor(), accept_loop(impl_), log_escaped{"admin accept loop"});
}

void admin_server::stop() {
    if (!impl_) {
        return;
    }
    if (impl_->acceptor.is_open()) {
        error_code ec;
        impl_->acceptor.close(ec);
    }
    impl_->accept_pause_timer.cancel();
    // Their reads and writes end with operation_aborted, and each coroutine with them.
    for (auto& c : impl_->serving) {
        c.stream.close();
    }
}

} // namespace sluice::metrics
