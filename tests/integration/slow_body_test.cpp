// SPDX-License-Identifier: Apache-2.0
// Slow request bodies (issue 11, item 18): a body must arrive within server.body-timeout as a
// whole, not merely a byte per idle-timeout, and one worker never has more than
// upstream.max-connections connections to the upstream, however many clients trickle bodies.

#include "integration_util.hpp"
#include "support/admin_client.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

/// One worker, so that the per-worker cap is the process's; the given body-timeout,
/// max-connections, upstream timeout and request-buffer-size (`0`: bodies stream from their
/// first block); no limiting; the admin listener on any free port.
std::string slow_config(const recording_upstream& upstream,
                        std::string_view body_timeout,
                        int max_connections,
                        std::string_view upstream_timeout,
                        std::string_view request_buffer = "16KiB") {
    return fmt::format("server:\n"
                       "  listen: \"127.0.0.1:0\"\n"
                       "  workers: 1\n"
                       "  body-timeout: {}\n"
                       "  request-buffer-size: {}\n"
                       "upstream:\n"
                       "  url: \"{}\"\n"
                       "  timeout: {}\n"
                       "  max-connections: {}\n"
                       "rate-limit:\n"
                       "  fallback:\n"
                       "    algorithm: LEAKY_BUCKET\n"
                       "    capacity: 1000000\n"
                       "    flowRate: 100000\n"
                       "    mode: police\n"
                       "{}",
                       body_timeout,
                       request_buffer,
                       upstream.url(),
                       upstream_timeout,
                       max_connections,
                       admin_any_port_yaml);
}

/// Sends one byte of body on each connection every `period` until stopped (errors ignored: a
/// connection sluice closed just stops taking them), from its own thread, so that the test can
/// block reading the answers meanwhile.
class trickler {
public:
    trickler(std::vector<http_connection*> connections, std::chrono::milliseconds period)
        : thread_([this, connections = std::move(connections), period] {
            while (!stop_.load()) {
                for (auto* c : connections) {
                    (void)::send(c->stream().native_handle(), "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
                }
                std::this_thread::sleep_for(period);
            }
        }) {}

    ~trickler() {
        stop_.store(true);
        thread_.join();
    }

    trickler(const trickler&) = delete;
    trickler& operator=(const trickler&) = delete;

private:
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

/// Expects `response` to be the 408 of a body-timeout of 1 s counted from `sent` (the body's
/// first read comes right after the header): not before, and within 2 s of scheduling slack.
void expect_408_at_body_timeout(const std::optional<http_response>& response,
                                const error_code& ec,
                                clock_type::time_point sent) {
    ASSERT_TRUE(response) << ec.message();
    EXPECT_EQ(response->status, 408u);
    EXPECT_GE(response->received - sent, 1s);
    EXPECT_LT(response->received - sent, 3s);
}

constexpr std::string_view slow_header = "POST /slow HTTP/1.1\r\n"
                                         "Host: test\r\n"
                                         "Content-Length: 1000\r\n"
                                         "\r\n";

/// `n` connections that have each sent `slow_header`, for a trickler to feed their bodies.
struct slow_clients {
    slow_clients(std::uint16_t port, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) {
            connections.push_back(std::make_unique<http_connection>(port, 10s));
            raw.push_back(connections.back().get());
            connections.back()->send_raw(slow_header);
        }
    }

    std::vector<std::unique_ptr<http_connection>> connections;
    std::vector<http_connection*> raw;
};

/// Sends `slow_header` and trickles its body a byte every 100 ms (each read well inside
/// idle-timeout), and expects the 408 of a body-timeout of 1 s.
void expect_trickled_body_cut_off(const sluice_process& sluice) {
    http_connection client(sluice.port(), 10s);
    const auto sent = clock_type::now();
    client.send_raw(slow_header);
    error_code ec;
    std::optional<http_response> response;
    {
        trickler bytes({&client}, 100ms);
        response = client.try_read_response(ec);
    }
    expect_408_at_body_timeout(response, ec, sent);
}

// A body that never starts is answered 408 once body-timeout (1 s) passed, with nothing sent
// upstream; it used to wait for idle-timeout (60 s).
TEST(SlowBody, SilentBodyGets408WithNothingUpstream) {
    recording_upstream upstream;
    sluice_process sluice(slow_config(upstream, "1s", 8, "30s"));

    http_connection client(sluice.port(), 10s);
    const auto sent = clock_type::now();
    client.send_raw(slow_header);
    error_code ec;
    const auto response = client.try_read_response(ec);
    expect_408_at_body_timeout(response, ec, sent);
    EXPECT_TRUE(client.wait_closed(5s));
    EXPECT_EQ(upstream.stats().connections, 0u);
}

// A body trickled a byte every 100 ms (each read well inside idle-timeout) is cut off when
// body-timeout (1 s) has passed since it began: 408. It fits server.request-buffer-size, so
// the upstream never heard of it.
TEST(SlowBody, TrickledBodyIsCutOffAtBodyTimeout) {
    recording_upstream upstream;
    sluice_process sluice(slow_config(upstream, "1s", 8, "30s"));

    expect_trickled_body_cut_off(sluice);
    ASSERT_TRUE(upstream.wait_quiet(5s));
    EXPECT_EQ(upstream.stats().connections, 0u);
}

// The same body streamed (request-buffer-size: 0): its header and first bytes went upstream,
// so at body-timeout the upstream request is aborted.
TEST(SlowBody, TrickledBodyStreamedIsAbortedUpstreamAtBodyTimeout) {
    recording_upstream upstream;
    sluice_process sluice(slow_config(upstream, "1s", 8, "30s", "0"));

    expect_trickled_body_cut_off(sluice);
    ASSERT_TRUE(upstream.wait_for_stats([](const upstream_stats& s) { return s.broken == 1; }, 5s))
        << "the upstream request was not aborted";
    EXPECT_EQ(upstream.requests().size(), 0u);
}

// A request refused before its body was read (a bad path: 400) keeps its connection when its
// small body can be read and dropped; one trickled a byte every 100 ms (each read well inside
// idle-timeout) is dropped only until body-timeout (1 s): the answer comes then, and the
// connection closes. It used to be read for as long as the client kept trickling.
TEST(SlowBody, ARefusedRequestsTrickledBodyIsReadOnlyUntilBodyTimeout) {
    recording_upstream upstream;
    sluice_process sluice(slow_config(upstream, "1s", 8, "30s"));

    http_connection client(sluice.port(), 10s);
    const auto sent = clock_type::now();
    client.send_raw("POST /%zz HTTP/1.1\r\nHost: test\r\nContent-Length: 1000\r\n\r\n");
    error_code ec;
    std::optional<http_response> response;
    {
        trickler bytes({&client}, 100ms);
        response = client.try_read_response(ec);
    }
    ASSERT_TRUE(response) << ec.message();
    EXPECT_EQ(response->status, 400u);
    EXPECT_GE(response->received - sent, 1s);
    EXPECT_LT(response->received - sent, 3s); // 1 s, and 2 s of scheduling slack
    EXPECT_TRUE(client.wait_closed(5s));
    EXPECT_EQ(upstream.stats().connections, 0u);
}

// Ten clients trickle bodies into one worker capped at 3 upstream connections, with bodies
// streamed (request-buffer-size: 0): 3 get one (and 408 at body-timeout, 3 s), the other 7 wait
// for one for upstream.timeout (1 s) and get 503. The upstream never sees more than 3
// connections (it used to see one per client).
TEST(SlowBody, SlowBodiesCannotHoldMoreThanMaxConnections) {
    constexpr std::size_t clients = 10;
    constexpr std::size_t cap = 3;
    recording_upstream upstream;
    sluice_process sluice(slow_config(upstream, "3s", static_cast<int>(cap), "1s", "0"));

    slow_clients slow(sluice.port(), clients);
    std::vector<unsigned> statuses;
    {
        trickler bytes(slow.raw, 100ms);
        for (auto& c : slow.connections) {
            error_code ec;
            const auto response = c->try_read_response(ec);
            statuses.push_back(response ? response->status : 0);
        }
    }
    EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 503u), clients - cap);
    EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 408u), cap);
    ASSERT_TRUE(upstream.wait_quiet(5s));
    EXPECT_EQ(upstream.stats().connections, cap);
    EXPECT_EQ(upstream.requests().size(), 0u);
    // Each answer is counted for what it was, sluice's own 503s and 408s (counted just after
    // the answer is written: wait for the counts rather than race them).
    bool met = false;
    const auto metrics = wait_for_metrics(
        admin_port(sluice),
        [&](const std::string& t) {
            return metric_or_zero(t, "sluice_upstream_busy_total") == double(clients - cap) &&
                   metric_or_zero(t, "sluice_client_timeouts_total") == double(cap);
        },
        5s,
        met);
    EXPECT_TRUE(met) << metrics;
    EXPECT_EQ(metric_or_zero(metrics, "sluice_upstream_timeouts_total"), 0.0) << metrics;
}

// Bodies that fit server.request-buffer-size (the default, 16 KiB) are read whole before the
// upstream is contacted: ten clients trickling theirs into a worker capped at one upstream
// connection hold none of it, so a request whose body came whole is answered at once meanwhile
// (streamed, it waited upstream.timeout behind them and got 503), and the ten get 408 at
// body-timeout with nothing sent upstream.
TEST(SlowBody, BufferedSlowBodiesHoldNoUpstreamConnection) {
    constexpr std::size_t clients = 10;
    recording_upstream upstream;
    sluice_process sluice(slow_config(upstream, "3s", 1, "1s"));

    slow_clients slow(sluice.port(), clients);
    std::vector<unsigned> statuses;
    {
        trickler bytes(slow.raw, 100ms);
        http_connection whole(sluice.port(), 10s);
        whole.send_raw("POST /whole HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\nhello");
        error_code ec;
        const auto answer = whole.try_read_response(ec);
        ASSERT_TRUE(answer) << ec.message();
        EXPECT_EQ(answer->status, 200u);
        for (auto& c : slow.connections) {
            const auto response = c->try_read_response(ec);
            statuses.push_back(response ? response->status : 0);
        }
    }
    EXPECT_EQ(std::count(statuses.begin(), statuses.end(), 408u), clients);
    ASSERT_TRUE(upstream.wait_quiet(5s));
    const auto requests = upstream.requests();
    ASSERT_EQ(requests.size(), 1u);
    EXPECT_EQ(requests[0].target, "/whole");
    EXPECT_EQ(requests[0].body_prefix, "hello");
    EXPECT_EQ(upstream.stats().connections, 1u);
    EXPECT_EQ(upstream.stats().broken, 0u);
}

// A body read ahead (server.request-buffer-size) is counted in sluice_request_body_buffer_bytes
// from its first read, with nothing upstream meanwhile, and freed once the request has gone
// upstream: a response that goes on (its body 3 s behind its head here, as a token stream's)
// does not keep it. Were it freed only with the request, the gauge would reach 0 as the
// response ended, not seconds before.
TEST(SlowBody, ABufferedBodyIsCountedWhileItComesAndFreedOnceSent) {
    constexpr std::size_t body_size = 10'000;
    static constexpr auto body_delay = 3s;
    recording_upstream upstream([](const recorded_request&) {
        response_plan plan;
        plan.body_delay = body_delay;
        return plan;
    });
    sluice_process sluice(slow_config(upstream, "30s", 8, "30s"));
    const auto admin = admin_port(sluice);
    const auto buffered = [](const std::string& t) {
        return metric_or_zero(t, "sluice_request_body_buffer_bytes");
    };

    http_connection client(sluice.port(), 30s);
    client.send_raw(fmt::format("POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n\r\n",
                                body_size));
    client.send_raw(std::string(body_size / 2, 'a'));
    bool met = false;
    auto metrics = wait_for_metrics(
        admin, [&](const std::string& t) { return buffered(t) >= double(body_size); }, 5s, met);
    ASSERT_TRUE(met) << metrics;
    EXPECT_EQ(upstream.stats().connections, 0u);

    client.send_raw(std::string(body_size / 2, 'b'));
    metrics = wait_for_metrics(
        admin, [&](const std::string& t) { return buffered(t) == 0.0; }, 10s, met);
    const auto freed = clock_type::now();
    ASSERT_TRUE(met) << metrics;
    error_code ec;
    const auto response = client.try_read_response(ec);
    const auto ended = clock_type::now();
    ASSERT_TRUE(response) << ec.message();
    EXPECT_EQ(response->status, 200u);
    EXPECT_EQ(response->body, "ok");
    EXPECT_GE(ended - freed, body_delay - 2s) << "freed only as the response ended";
    const auto requests = upstream.requests();
    ASSERT_EQ(requests.size(), 1u);
    EXPECT_EQ(requests[0].body_prefix,
              std::string(body_size / 2, 'a') + std::string(body_size / 2, 'b'));
}

} // namespace
} // namespace sluice::test
