// SPDX-License-Identifier: Apache-2.0
// WebSocket pass-through (issue 14): an upgrade reaches the upstream with its Upgrade and
// Connection fields, the upstream's 101 reaches the client, and then sluice relays bytes both
// ways (bytes sent right behind either side's handshake included) until the sides close, or
// until server.idle-timeout passes with nothing moving. A refused upgrade is a normal response;
// other upgrades (h2c, HTTP/1.0's, one with a body) go on as plain HTTP.
//
// The upstream is Beast's websocket::stream on its own io_context thread. The client is written
// here by hand, frame by frame, because Beast's client cannot send a frame in the same write as
// its handshake, nor show what arrived with the 101.

#include "integration_util.hpp"
#include "sluice/io/net.hpp"
#include "support/limit_probe.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
namespace bhttp = boost::beast::http;
namespace websocket = boost::beast::websocket;

/// RFC 6455 1.3's example key and the accept value it must produce.
constexpr std::string_view sample_key = "dGhlIHNhbXBsZSBub25jZQ==";
constexpr std::string_view sample_accept = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

/// What the upstream sends each client as soon as its handshake is done, before reading: it
/// reaches sluice right behind the 101, often in the same segment.
constexpr std::string_view greeting = "hello from upstream";

/**
 * A WebSocket echo server on 127.0.0.1:0: each connection's upgrade request is recorded, the
 * greeting goes out, then every message comes back as it came (text or binary). When a
 * connection ends, by a close handshake or by the connection closing under it, the time is
 * recorded.
 */
class websocket_echo_upstream {
public:
    websocket_echo_upstream() {
        acceptor_.open(tcp::v4());
        acceptor_.bind({net::ip::address_v4::loopback(), 0});
        acceptor_.listen();
        port_ = acceptor_.local_endpoint().port();
        net::co_spawn(ioc_, accept_loop(), net::detached);
        thread_ = std::thread([this] { ioc_.run(); });
    }

    ~websocket_echo_upstream() {
        ioc_.stop();
        thread_.join();
    }

    websocket_echo_upstream(const websocket_echo_upstream&) = delete;
    websocket_echo_upstream& operator=(const websocket_echo_upstream&) = delete;

    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

    /// The upgrade requests' fields, in arrival order.
    std::vector<header_list> handshakes() const {
        std::lock_guard lock(mutex_);
        return handshakes_;
    }

    /// Bytes that came behind an upgrade request before the 101 went out (sluice holds the
    /// client's until the switch).
    std::size_t early_bytes() const {
        std::lock_guard lock(mutex_);
        return early_bytes_;
    }

    /// The bytes a connection asked to flood managed to write.
    std::size_t flooded() const {
        std::lock_guard lock(mutex_);
        return flooded_;
    }

    /// Waits until `n` connections have ended; their end times, or nullopt on timeout.
    std::optional<std::vector<clock_type::time_point>>
    wait_ended(std::size_t n, std::chrono::milliseconds timeout) {
        std::unique_lock lock(mutex_);
        if (!changed_.wait_for(lock, timeout, [&] { return ended_.size() >= n; })) {
            return std::nullopt;
        }
        return ended_;
    }

private:
    awaitable<void> accept_loop() {
        for (;;) {
            auto [ec, socket] = co_await acceptor_.async_accept();
            if (ec) {
                co_return;
            }
            net::co_spawn(ioc_, serve(std::move(socket)), net::detached);
        }
    }

    awaitable<void> serve(tcp_socket socket) {
        beast::flat_buffer buffer;
        bhttp::request<bhttp::empty_body> request;
        auto [read_ec, n] = co_await bhttp::async_read(socket, buffer, request);
        if (read_ec) {
            co_return;
        }
        {
            std::lock_guard lock(mutex_);
            header_list fields;
            for (const auto& f : request) {
                fields.emplace_back(f.name_string(), f.value());
            }
            handshakes_.push_back(std::move(fields));
            early_bytes_ += buffer.size();
        }
        websocket::stream<tcp_socket> ws(std::move(socket));
        auto [accept_ec] = co_await ws.async_accept(request);
        if (!accept_ec) {
            ws.text(true);
            auto [greet_ec, g] = co_await ws.async_write(net::buffer(greeting));
            for (error_code ec = greet_ec; !ec;) {
                beast::flat_buffer message;
                auto [message_ec, m] = co_await ws.async_read(message);
                ec = message_ec;
                if (!ec && beast::buffers_to_string(message.data()) == "flood") {
                    ec = co_await flood(ws);
                } else if (!ec && beast::buffers_to_string(message.data()) == "hang up") {
                    // Closes the whole connection, no closing handshake: its FIN first, then a
                    // reset for whatever comes after.
                    beast::get_lowest_layer(ws).close();
                    break;
                } else if (!ec) {
                    ws.text(ws.got_text());
                    auto [echo_ec, e] = co_await ws.async_write(message.data());
                    ec = echo_ec;
                }
            }
        }
        std::lock_guard lock(mutex_);
        ended_.push_back(clock_type::now());
        changed_.notify_all();
    }

    // Sends 64 KiB messages until the connection fails, counting what the socket took.
    awaitable<error_code> flood(websocket::stream<tcp_socket>& ws) {
        const auto block = pattern_string(3, 64 * 1024);
        ws.binary(true);
        for (;;) {
            auto [ec, n] = co_await ws.async_write(net::buffer(block));
            if (ec) {
                co_return ec;
            }
            std::lock_guard lock(mutex_);
            flooded_ += n;
        }
    }

    net::io_context ioc_;
    tcp_acceptor acceptor_{executor(ioc_.get_executor())};
    std::uint16_t port_ = 0;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::vector<header_list> handshakes_;
    std::size_t early_bytes_ = 0;
    std::size_t flooded_ = 0;
    std::vector<clock_type::time_point> ended_;
    std::thread thread_;
};

/// One WebSocket message (or a close frame's payload) as the client reassembled it.
struct ws_message {
    unsigned opcode = 0; // 1 text, 2 binary, 8 close
    std::string payload;
};

/// A masked client frame (RFC 6455 5.2) with FIN set.
std::string client_frame(unsigned opcode, std::string_view payload) {
    std::string frame;
    frame += static_cast<char>(0x80 | opcode);
    if (payload.size() < 126) {
        frame += static_cast<char>(0x80 | payload.size());
    } else if (payload.size() <= 0xffff) {
        frame += static_cast<char>(0x80 | 126);
        frame += static_cast<char>(payload.size() >> 8);
        frame += static_cast<char>(payload.size() & 0xff);
    } else {
        frame += static_cast<char>(0x80 | 127);
        for (int shift = 56; shift >= 0; shift -= 8) {
            frame +=
                static_cast<char>((static_cast<std::uint64_t>(payload.size()) >> shift) & 0xff);
        }
    }
    const char mask[4] = {0x12, 0x34, 0x56, 0x78};
    frame.append(mask, 4);
    for (std::size_t i = 0; i < payload.size(); ++i) {
        frame += static_cast<char>(payload[i] ^ mask[i % 4]);
    }
    return frame;
}

/// The upgrade request of the tests, to `target`.
std::string upgrade_request(std::string_view target) {
    return format_request("GET",
                          target,
                          {{"Connection", "Upgrade"},
                           {"Upgrade", "websocket"},
                           {"Sec-WebSocket-Key", std::string(sample_key)},
                           {"Sec-WebSocket-Version", "13"}});
}

/// A WebSocket client over a blocking socket with a timeout: the handshake's response is read
/// header only, so whatever came behind it is the first frame's bytes.
class ws_client {
public:
    explicit ws_client(std::uint16_t port)
        : stream_(fd_stream::connect_loopback(port)) {
        stream_.timeout(10s);
    }

    void send_raw(std::string_view bytes) { stream_.write_all(bytes); }

    /// Sends the upgrade request for `target`, then reads the 101 and the echo upstream's
    /// greeting behind it: the tunnel is open.
    ::testing::AssertionResult open_tunnel(std::string_view target) {
        send_raw(upgrade_request(target));
        const auto status = read_response_header().status;
        if (status != 101) {
            return ::testing::AssertionFailure() << target << ": status " << status;
        }
        const auto first = read_message().payload;
        if (first != greeting) {
            return ::testing::AssertionFailure() << target << ": first message " << first;
        }
        return ::testing::AssertionSuccess();
    }

    void send(unsigned opcode, std::string_view payload) {
        stream_.write_all(client_frame(opcode, payload));
    }

    /// Reads a response header; the bytes after it stay for `read_message`.
    http_response read_response_header() {
        bhttp::response_parser<bhttp::empty_body> parser;
        parser.skip(true); // a 101 has no body, and a refusal's is not read here
        for (;;) {
            error_code ec;
            if (buffer_.size() != 0) {
                const auto used = parser.put(buffer_.data(), ec);
                buffer_.consume(used);
                if (!ec && parser.is_header_done()) {
                    break;
                }
                if (ec && ec != bhttp::error::need_more) {
                    throw boost::system::system_error(ec, "response header");
                }
            }
            fill();
        }
        http_response out;
        out.status = parser.get().result_int();
        for (const auto& f : parser.get()) {
            out.headers.emplace_back(f.name_string(), f.value());
        }
        out.received = clock_type::now();
        return out;
    }

    /// The next message, its fragments joined; a close frame is returned as opcode 8.
    ws_message read_message() {
        ws_message message;
        for (;;) {
            const auto b0 = byte_at(0);
            const auto b1 = byte_at(1);
            std::size_t header = 2;
            std::uint64_t length = b1 & 0x7f;
            if (length == 126) {
                length = (std::uint64_t{byte_at(2)} << 8) | byte_at(3);
                header = 4;
            } else if (length == 127) {
                length = 0;
                for (std::size_t i = 0; i < 8; ++i) {
                    length = (length << 8) | byte_at(2 + i);
                }
                header = 10;
            }
            if ((b1 & 0x80) != 0) {
                throw std::runtime_error("a server frame is masked");
            }
            while (buffer_.size() < header + length) {
                fill();
            }
            const auto* data = static_cast<const char*>(buffer_.data().data());
            message.payload.append(data + header, length);
            if ((b0 & 0x0f) != 0) {
                message.opcode = b0 & 0x0f;
            }
            buffer_.consume(header + length);
            if ((b0 & 0x80) != 0) {
                return message;
            }
        }
    }

    /// True if the connection closes (EOF or reset) within `timeout`; bytes still coming are
    /// dropped.
    bool wait_closed(std::chrono::milliseconds timeout) { return stream_.wait_closed(timeout); }

    void close() { stream_.close(); }

private:
    unsigned byte_at(std::size_t i) {
        while (buffer_.size() <= i) {
            fill();
        }
        return static_cast<unsigned char>(static_cast<const char*>(buffer_.data().data())[i]);
    }

    void fill() {
        const auto n = stream_.read_some(buffer_.prepare(64 * 1024));
        buffer_.commit(n);
    }

    fd_stream stream_;
    beast::flat_buffer buffer_;
};

/// The first value of `name` in `headers`, lower-cased, or "" when absent.
std::string lower_header(const header_list& headers, std::string_view name) {
    auto value = find_header(headers, name).value_or("");
    for (auto& c : value) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return value;
}

TEST(WebSocket, AnUpgradeBecomesATunnelThatRelaysBothWaysUntilClosed) {
    websocket_echo_upstream upstream;
    sluice_config config;
    config.upstream_url = upstream.url();
    sluice_process sluice(config);

    ws_client client(sluice.port());
    // A frame right behind the handshake: it waits in sluice's buffer until the switch.
    client.send_raw(upgrade_request("/chat") + client_frame(1, "early bird"));
    const auto switched = client.read_response_header();
    ASSERT_EQ(switched.status, 101u);
    EXPECT_EQ(lower_header(switched.headers, "Upgrade"), "websocket");
    EXPECT_EQ(lower_header(switched.headers, "Connection"), "upgrade");
    EXPECT_EQ(switched.header("Sec-WebSocket-Accept"), std::string(sample_accept));
    EXPECT_TRUE(switched.header("RateLimit").has_value()) << "a 101 is a response too";

    // The greeting came right behind the 101; then the early frame's echo.
    auto message = client.read_message();
    EXPECT_EQ(message.opcode, 1u);
    EXPECT_EQ(message.payload, greeting);
    message = client.read_message();
    EXPECT_EQ(message.payload, "early bird");

    for (int i = 0; i < 5; ++i) {
        const auto text = "message " + std::to_string(i);
        client.send(1, text);
        message = client.read_message();
        EXPECT_EQ(message.opcode, 1u);
        EXPECT_EQ(message.payload, text);
    }
    // Far larger than a relay buffer (32 KiB) in either direction.
    const auto big = pattern_string(7, 1024 * 1024);
    client.send(2, big);
    message = client.read_message();
    EXPECT_EQ(message.opcode, 2u);
    EXPECT_EQ(message.payload.size(), big.size());
    EXPECT_TRUE(message.payload == big);

    // The closing handshake passes through, then the upstream's TCP close does, while the
    // client's side is still open (a half-close); the client's own close then ends the
    // upstream's wait for it.
    client.send(8, std::string("\x03\xe8", 2)); // 1000, normal closure
    message = client.read_message();
    EXPECT_EQ(message.opcode, 8u);
    EXPECT_TRUE(client.wait_closed(5s));
    EXPECT_FALSE(upstream.wait_ended(1, 0ms)) << "the upstream waits for the client's close";
    client.close();
    ASSERT_TRUE(upstream.wait_ended(1, 5s));

    const auto handshakes = upstream.handshakes();
    ASSERT_EQ(handshakes.size(), 1u);
    EXPECT_EQ(lower_header(handshakes[0], "Upgrade"), "websocket");
    EXPECT_EQ(lower_header(handshakes[0], "Connection"), "upgrade");
    EXPECT_EQ(find_header(handshakes[0], "Sec-WebSocket-Key"), std::string(sample_key));
    EXPECT_EQ(find_header(handshakes[0], "X-Forwarded-For"), "127.0.0.1");
    EXPECT_EQ(upstream.early_bytes(), 0u);
    EXPECT_TRUE(sluice.wait_for_log("path=/chat", 5s));
    EXPECT_NE(sluice.log_text().find("status=101"), std::string::npos) << sluice.log_text();
}

// A tunnel in use stays open past the idle timeout; once nothing moves for it, both sides are
// closed within a second.
TEST(WebSocket, AnIdleTunnelIsClosedOnBothSidesAfterTheIdleTimeout) {
    websocket_echo_upstream upstream;
    sluice_config config;
    config.upstream_url = upstream.url();
    config.idle_timeout = "1s";
    sluice_process sluice(config);

    ws_client client(sluice.port());
    ASSERT_TRUE(client.open_tunnel("/idle"));
    // Traffic every 300 ms for 1.5 s keeps it open.
    auto last_sent = clock_type::now();
    for (int i = 0; i < 5; ++i) {
        std::this_thread::sleep_for(300ms);
        last_sent = clock_type::now();
        client.send(1, "ping " + std::to_string(i));
        EXPECT_EQ(client.read_message().payload, "ping " + std::to_string(i));
    }
    // Nothing moved since `last_sent` came back: the close is due one idle timeout later.
    ASSERT_TRUE(client.wait_closed(5s));
    const auto client_closed = clock_type::now() - last_sent;
    const auto ended = upstream.wait_ended(1, 5s);
    ASSERT_TRUE(ended);
    const auto upstream_closed = ended->at(0) - last_sent;
    EXPECT_GE(client_closed, 1s);
    EXPECT_LE(client_closed, 2s);
    EXPECT_GE(upstream_closed, 1s);
    EXPECT_LE(upstream_closed, 2s);
    std::printf(
        "idle tunnel closed after %lld ms (client), %lld ms (upstream)\n",
        static_cast<long long>(
            std::chrono::duration_cast<std::chrono::milliseconds>(client_closed).count()),
        static_cast<long long>(
            std::chrono::duration_cast<std::chrono::milliseconds>(upstream_closed).count()));
    EXPECT_TRUE(sluice.wait_for_log("end=idle_timeout", 5s)) << sluice.log_text();
}

// A drain (SIGTERM) ends an open tunnel a quarter second before its deadline
// (tunnel_drain_margin), closing both sides and logging it with end=drained, where the
// deadline's stop of the worker cut it unlogged; sluice then exits without waiting for the
// deadline. The tunnel carries traffic until then. The deadline is 2 s after sluice took the
// signal, hence after the test sent it: the close comes 1.75 s after that at the earliest.
TEST(WebSocket, ADrainEndsAnOpenTunnelBeforeItsDeadlineAndLogsIt) {
    websocket_echo_upstream upstream;
    sluice_process sluice(compose_yaml(upstream.url(),
                                       roomy_fallback_yaml(),
                                       "  drain-timeout: 2s\n  idle-timeout: 60s\n",
                                       "  level: info\n  access-log: true\n"));
    ws_client client(sluice.port());
    ASSERT_TRUE(client.open_tunnel("/drained"));

    const auto stopping = clock_type::now();
    sluice.send_signal(SIGTERM);
    ASSERT_TRUE(sluice.wait_for_log("stopping: no new connections", 5s)) << sluice.log_text();
    client.send(1, "during the drain");
    EXPECT_EQ(client.read_message().payload, "during the drain");
    ASSERT_TRUE(client.wait_closed(5s));
    EXPECT_GE(clock_type::now() - stopping, 1750ms);
    const auto ended = upstream.wait_ended(1, 5s);
    EXPECT_TRUE(ended) << "the upstream's side was not closed";
    const auto status = sluice.wait_exit(5s);
    ASSERT_TRUE(status.has_value()) << sluice.log_text();
    EXPECT_EQ(*status, 0);
    const auto text = sluice.log_text();
    EXPECT_NE(text.find("status=101"), std::string::npos) << text;
    EXPECT_NE(text.find("end=drained"), std::string::npos) << text;
    EXPECT_EQ(text.find("drain timeout"), std::string::npos) << "the deadline stopped it\n" << text;
}

// A client that stops reading while the upstream sends without pause: sluice reads no more than
// it can write, so the upstream is soon blocked too (what it wrote fits in the sockets' buffers
// and sluice's two relay buffers), and the stalled write ends the tunnel one idle timeout later.
TEST(WebSocket, AClientThatStopsReadingStallsTheTunnelUntilTheIdleTimeout) {
    websocket_echo_upstream upstream;
    sluice_config config;
    config.upstream_url = upstream.url();
    config.idle_timeout = "1s";
    sluice_process sluice(config);

    ws_client client(sluice.port());
    ASSERT_TRUE(client.open_tunnel("/flood"));
    const auto asked = clock_type::now();
    client.send(1, "flood");
    const auto ended = upstream.wait_ended(1, 10s);
    ASSERT_TRUE(ended) << "a stalled tunnel must end by itself";
    const auto took = ended->at(0) - asked;
    EXPECT_GE(took, 1s);
    EXPECT_LE(took, 3s);
    // Loopback socket buffers grow to a few MiB at most; unbounded relaying would pass far more
    // in a second.
    EXPECT_LT(upstream.flooded(), 32u * 1024 * 1024);
    std::printf(
        "stalled tunnel closed after %lld ms; the upstream wrote %zu bytes\n",
        static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()),
        upstream.flooded());
    EXPECT_TRUE(client.wait_closed(10s));
    // sluice goes on serving.
    ws_client other(sluice.port());
    other.send_raw(upgrade_request("/after"));
    EXPECT_EQ(other.read_response_header().status, 101u);
}

/// An upstream that answers an upgrade of /forbidden 403 with a body, and /plain 200 and closes;
/// anything else 200 "ok".
recording_upstream refusing_upstream() {
    return recording_upstream([](const recorded_request& r) {
        response_plan plan;
        if (r.target == "/forbidden") {
            plan.status = 403;
            plan.body = "no websockets here";
        } else if (r.target == "/plain") {
            plan.body = "a page, not a socket";
            plan.close = true;
        }
        return plan;
    });
}

// A refused upgrade is an ordinary response: relayed with its body, and the connection goes on
// as its header says.
TEST(WebSocket, ARefusedUpgradeIsAnOrdinaryResponse) {
    auto upstream = refusing_upstream();
    sluice_process sluice(config_for(upstream));

    http_connection connection(sluice.port());
    connection.send_raw(upgrade_request("/forbidden"));
    auto response = connection.read_response();
    EXPECT_EQ(response.status, 403u);
    EXPECT_EQ(response.body, "no websockets here");
    EXPECT_EQ(response.header("Upgrade"), std::nullopt);
    EXPECT_TRUE(response.keep_alive);
    // The same connection carries the next request.
    connection.send_raw(upgrade_request("/plain"));
    response = connection.read_response();
    EXPECT_EQ(response.status, 200u);
    EXPECT_EQ(response.body, "a page, not a socket");
    ASSERT_TRUE(response.keep_alive) << "the upstream's close is its own hop's";
    connection.send("GET", "/after");
    response = connection.read_response();
    EXPECT_EQ(response.status, 200u);
    EXPECT_EQ(response.body, "ok");

    ASSERT_TRUE(upstream.wait_for_count(3, 10s));
    const auto refused = upstream.requests().at(0);
    EXPECT_EQ(lower_header(refused.headers, "Upgrade"), "websocket");
    EXPECT_EQ(lower_header(refused.headers, "Connection"), "upgrade");
}

// What a client sends right behind an upgrade the upstream refuses is read as HTTP, as any bytes
// behind a request are: a pipelined request is served in turn on the same connection, and
// WebSocket frames sent in hope of the switch are a malformed request (400, the connection
// closed) that never reaches the upstream.
TEST(WebSocket, BytesSentBehindARefusedUpgradeAreReadAsHttp) {
    auto upstream = refusing_upstream();
    sluice_process sluice(config_for(upstream));

    http_connection pipelined(sluice.port());
    pipelined.send_raw(upgrade_request("/forbidden") + format_request("GET", "/after", {}));
    auto response = pipelined.read_response();
    EXPECT_EQ(response.status, 403u);
    response = pipelined.read_response();
    EXPECT_EQ(response.status, 200u);
    EXPECT_EQ(response.body, "ok");

    http_connection hopeful(sluice.port());
    hopeful.send_raw(upgrade_request("/forbidden") + client_frame(1, "GET /smuggled HTTP/1.1"));
    response = hopeful.read_response();
    EXPECT_EQ(response.status, 403u);
    response = hopeful.read_response();
    EXPECT_EQ(response.status, 400u);
    EXPECT_FALSE(response.keep_alive);

    ASSERT_TRUE(upstream.wait_for_count(3, 10s));
    std::vector<std::string> targets;
    for (const auto& r : upstream.requests()) {
        targets.push_back(r.target);
    }
    std::sort(targets.begin(), targets.end());
    EXPECT_EQ(targets, (std::vector<std::string>{"/after", "/forbidden", "/forbidden"}));
}

// Only a bodyless WebSocket GET of HTTP/1.1 is an upgrade: the others reach the upstream as
// plain HTTP/1.1 requests without their upgrade fields.
TEST(WebSocket, OtherUpgradesGoOnAsPlainHttp) {
    recording_upstream upstream;
    sluice_process sluice(config_for(upstream));

    auto response = get(sluice.port(),
                        "/h2c",
                        {{"Connection", "Upgrade, HTTP2-Settings"},
                         {"Upgrade", "h2c"},
                         {"HTTP2-Settings", "AAMAAABkAAQAAP__"}});
    EXPECT_EQ(response.status, 200u);
    {
        http_connection connection(sluice.port());
        connection.send_raw("GET /old HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
                            "Upgrade: websocket\r\nSec-WebSocket-Key: " +
                            std::string(sample_key) + "\r\nSec-WebSocket-Version: 13\r\n\r\n");
        EXPECT_EQ(connection.read_response().status, 200u);
    }
    response = request(sluice.port(),
                       "GET",
                       "/with-body",
                       {{"Connection", "Upgrade"},
                        {"Upgrade", "websocket"},
                        {"Sec-WebSocket-Key", std::string(sample_key)},
                        {"Sec-WebSocket-Version", "13"}},
                       "hello");
    EXPECT_EQ(response.status, 200u);

    ASSERT_TRUE(upstream.wait_for_count(3, 10s));
    for (const auto& r : upstream.requests()) {
        SCOPED_TRACE(r.target);
        EXPECT_EQ(r.header("Upgrade"), std::nullopt);
        EXPECT_EQ(r.header("HTTP2-Settings"), std::nullopt);
        EXPECT_EQ(lower_header(r.headers, "Connection").find("upgrade"), std::string::npos);
        if (r.target == "/with-body") {
            EXPECT_EQ(r.body_size, 5u);
        }
    }
}

// An upstream that closes its whole connection did not fail: the client's frames that come after
// its close (each taken by sluice, then refused by the upstream's reset) end the tunnel as
// closed, not as an upstream that broke.
TEST(WebSocket, AClientWritingAfterTheUpstreamClosedEndsItAsClosed) {
    websocket_echo_upstream upstream;
    sluice_config config;
    config.upstream_url = upstream.url();
    sluice_process sluice(config);

    ws_client client(sluice.port());
    ASSERT_TRUE(client.open_tunnel("/hangup"));
    client.send(1, "hang up");
    ASSERT_TRUE(upstream.wait_ended(1, 5s));
    EXPECT_TRUE(client.wait_closed(5s)) << "the upstream's close passed on";
    // The client may still write (a half-close). Its frames go on until sluice closes its
    // connection: the first reaches the upstream's closed socket, which answers with a reset,
    // and a write after that fails, ending the tunnel.
    bool refused = false;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!refused && std::chrono::steady_clock::now() < deadline) {
        try {
            client.send(1, "after the close");
        } catch (const std::exception&) {
            refused = true;
        }
        std::this_thread::sleep_for(10ms); // a frame at a time, as a client would write them
    }
    ASSERT_TRUE(refused) << "sluice kept the tunnel open";
    ASSERT_TRUE(sluice.wait_for_log("path=/hangup", 5s)) << sluice.log_text();
    const auto text = sluice.log_text();
    const auto from = text.find("path=/hangup");
    const auto line = text.substr(from, text.find('\n', from) - from);
    EXPECT_NE(line.find(" status=101 "), std::string::npos) << line;
    EXPECT_TRUE(line.ends_with(" end=-")) << line;
}

// Tunnels hold their upstream connections for as long as they last: upstream.max-tunnels keeps
// the rest for other requests. An upgrade beyond it gets 503 with Retry-After and never reaches
// the upstream; the place frees when a tunnel ends.
TEST(WebSocket, AnUpgradeBeyondMaxTunnelsGets503UntilATunnelEnds) {
    websocket_echo_upstream upstream;
    auto yaml = compose_yaml(upstream.url(), roomy_fallback_yaml(), "  workers: 1\n");
    yaml.insert(yaml.find("rate-limit:\n"), "  max-tunnels: 1\n");
    sluice_process sluice(yaml);
    const auto admin = admin_port(sluice);

    ws_client first(sluice.port());
    ASSERT_TRUE(first.open_tunnel("/first"));
    EXPECT_TRUE(series_reaches(admin, "sluice_tunnels_open", 1));

    ws_client second(sluice.port());
    second.send_raw(upgrade_request("/second"));
    const auto refused = second.read_response_header();
    EXPECT_EQ(refused.status, 503u);
    EXPECT_EQ(refused.header("Retry-After"), "1");
    EXPECT_TRUE(series_reaches(admin, "sluice_tunnels_refused_total", 1));
    EXPECT_EQ(upstream.handshakes().size(), 1u) << "the refused upgrade reached the upstream";

    // The first tunnel ends: its place is free again.
    first.send(8, std::string("\x03\xe8", 2));
    EXPECT_EQ(first.read_message().opcode, 8u);
    first.close();
    ASSERT_TRUE(series_reaches(admin, "sluice_tunnels_open", 0));
    ws_client third(sluice.port());
    ASSERT_TRUE(third.open_tunnel("/third"));
    EXPECT_EQ(upstream.handshakes().size(), 2u);
}

// An upstream that switches protocols unasked would leave the client with bytes it cannot read.
TEST(WebSocket, A101NobodyAskedForIsABadGateway) {
    recording_upstream upstream([](const recorded_request&) {
        response_plan plan;
        plan.interim = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                       "Connection: Upgrade\r\n\r\n";
        return plan;
    });
    sluice_process sluice(config_for(upstream));
    EXPECT_EQ(get(sluice.port(), "/unasked").status, 502u);
}

// A 101 that does not prove it read the request's key (an endpoint that answers with a status
// and fields it copied from the request, the key echoed) is no switch: the client gets 502, its
// connection never becomes a raw pipe to the upstream past the limiter and the checks
// ("WebSocket smuggling").
TEST(WebSocket, A101WithoutTheKeysProofIsABadGateway) {
    recording_upstream upstream([](const recorded_request&) {
        response_plan plan;
        plan.interim = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                       "Connection: Upgrade\r\nSec-WebSocket-Accept: " +
                       std::string(sample_key) + "\r\n\r\n";
        return plan;
    });
    sluice_process sluice(config_for(upstream));
    http_connection client(sluice.port());
    client.send_raw(upgrade_request("/echoed"));
    const auto response = client.read_response();
    EXPECT_EQ(response.status, 502u);
    ASSERT_EQ(upstream.requests().size(), 1u);
    EXPECT_EQ(find_header(upstream.requests()[0].headers, "Sec-WebSocket-Key"),
              std::string(sample_key))
        << "it was an upgrade request, with its key";
}

} // namespace
} // namespace sluice::test
