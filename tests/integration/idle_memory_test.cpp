// SPDX-License-Identifier: Apache-2.0
// What sluice gives back while a connection waits (issue 17, memory): a keep-alive connection
// keeps no buffer nor request state between requests (they are its worker's), and idle past its
// grace (100 ms) it is parked without its coroutine; a held request waits without a read buffer.
// These tests check that nothing of the protocol notices: a parked connection serves a slowly
// arriving, a pipelined or no next request as before, times out and drains as before; a held
// request's body, sent during the hold, arrives intact; a held request, which waits without its
// coroutine and its memory, is forwarded as it came, and what is pipelined behind it follows.

#include "integration_util.hpp"
#include "support/admin_client.hpp"
#include "support/body_pattern.hpp"
#include "support/limit_probe.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <string_view>
#include <sys/wait.h>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

std::string yaml_for(const recording_upstream& upstream,
                     const std::string& rate_limit = roomy_fallback_yaml(),
                     const std::string& server_extra = "") {
    return compose_yaml(upstream.url(), rate_limit, server_extra);
}

/// Waits until `count` connections are parked: a connection is parked once it has idled past
/// its grace.
void wait_parked(const sluice_process& sluice, int count) {
    ASSERT_TRUE(series_reaches(admin_port(sluice), "sluice_connections_parked", count));
}

// Serves one request on `connection`, then leaves it idle until it is parked.
void park(http_connection& connection, const sluice_process& sluice) {
    connection.send("GET", "/first");
    EXPECT_EQ(connection.read_response().status, 200u);
    wait_parked(sluice, 1);
}

TEST(IdleMemory, AParkedConnectionServesASlowlyArrivingRequest) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream));
    http_connection connection(sluice.port());
    park(connection, sluice);

    // The first bytes wake the connection (it counts as parked no more while it reads the
    // header); the rest of the header comes later.
    const std::string request = format_request("GET", "/second");
    connection.send_raw(request.substr(0, 3));
    wait_parked(sluice, 0);
    connection.send_raw(request.substr(3));
    const http_response response = connection.read_response();
    EXPECT_EQ(response.status, 200u);
    EXPECT_EQ(response.header("X-Upstream-Target"), "/second");
    EXPECT_TRUE(response.keep_alive);

    // And again, parked a second time (woken, it counted as parked no more).
    wait_parked(sluice, 1);
    connection.send("GET", "/third");
    EXPECT_EQ(connection.read_response().header("X-Upstream-Target"), "/third");
    EXPECT_EQ(upstream.requests().size(), 3u);
}

TEST(IdleMemory, AParkedConnectionServesPipelinedRequestsInOrder) {
    auto upstream = echo_upstream();
    sluice_process sluice(yaml_for(upstream));
    http_connection connection(sluice.port());
    park(connection, sluice);

    const std::string body = pattern_string(3, 50'000);
    std::string batch;
    for (int i = 0; i < 3; ++i) {
        batch += format_request("POST",
                                "/pipe/" + std::to_string(i),
                                {{"Content-Length", std::to_string(body.size())}},
                                body);
    }
    connection.send_raw(batch);
    for (int i = 0; i < 3; ++i) {
        const http_response response = connection.read_response();
        EXPECT_EQ(response.status, 200u);
        EXPECT_EQ(response.header("X-Upstream-Target"), "/pipe/" + std::to_string(i));
        EXPECT_EQ(response.body_hash, hash_of(body));
    }
}

TEST(IdleMemory, AParkedConnectionTheClientClosesIsClosedAtOnce) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream));
    const auto admin = admin_port(sluice);
    {
        http_connection connection(sluice.port());
        park(connection, sluice);
        ASSERT_TRUE(series_reaches(admin, "sluice_connections_open", 1));
    }
    // Far sooner than server.idle-timeout (60 s): the parked wait hears the close.
    EXPECT_TRUE(series_reaches(admin, "sluice_connections_open", 0));
}

TEST(IdleMemory, AParkedConnectionIsClosedAtTheIdleTimeout) {
    recording_upstream upstream;
    constexpr auto idle_timeout = 3s;
    sluice_process sluice(yaml_for(upstream, roomy_fallback_yaml(), "  idle-timeout: 3s\n"));
    http_connection connection(sluice.port());
    // Before the request: its response, from which the idle time counts, ends after this.
    const auto sent = std::chrono::steady_clock::now();
    park(connection, sluice);
    // Parked, it is still closed: within 10 s of the parking (a parked connection that forgot
    // its timeout would stay open)...
    ASSERT_TRUE(connection.wait_closed(10s)) << "a parked connection outlived idle-timeout";
    // ...and not before the idle timeout, counted from a moment after `sent`: timers never fire
    // early, and the deadline is taken from coarse_clock::latest_now(), at or after the steady
    // time but for a late kernel tick (50 ms allowed, as CoarseClock's test does). What a
    // connection closed at its parking (one grace, 100 ms, after the response) or when its
    // grace ended would fail by almost 3 s. Whether the timeout counts from the response or
    // from the parking (100 ms later) is not asserted: a scheduling delay can be as long.
    constexpr auto late_tick = 50ms;
    EXPECT_GE(std::chrono::steady_clock::now() - sent, idle_timeout - late_tick);
}

TEST(IdleMemory, ADrainClosesParkedConnectionsAtOnce) {
    recording_upstream upstream;
    sluice_process sluice(yaml_for(upstream));
    http_connection connection(sluice.port());
    park(connection, sluice);
    const auto signalled = std::chrono::steady_clock::now();
    sluice.send_signal(SIGTERM);
    EXPECT_TRUE(connection.wait_closed(5s));
    const auto status = sluice.wait_exit(10s);
    ASSERT_TRUE(status) << "sluice did not exit";
    EXPECT_TRUE(WIFEXITED(*status));
    EXPECT_EQ(WEXITSTATUS(*status), 0);
    // drain-timeout is 30 s: a parked connection must not make the drain wait for it.
    EXPECT_LT(std::chrono::steady_clock::now() - signalled, 5s);
    EXPECT_EQ(sluice.log_text().find("drain timeout"), std::string::npos);
}

// A held request waits without a read buffer; a body sent during the hold is read then (or
// after it) and reaches the upstream byte for byte.
TEST(IdleMemory, AHeldRequestsBodySentDuringTheHoldArrivesIntact) {
    recording_upstream upstream;
    // One slot every 500 ms: the first request goes at once, the second is held.
    sluice_process sluice(yaml_for(upstream, "  fallback: { capacity: 10, flowRate: 2 }\n"));
    const auto admin = admin_port(sluice);

    http_connection head(sluice.port());
    head.send("GET", "/held-body");
    EXPECT_EQ(head.read_response().status, 200u);

    constexpr std::uint64_t seed = 17;
    constexpr std::uint64_t size = 200'000; // more than a held request reads ahead (16 KiB)
    http_connection held(sluice.port());
    held.send_raw(format_request("POST", "/held-body", {{"Content-Length", std::to_string(size)}}));
    ASSERT_TRUE(series_reaches(admin, "sluice_held_requests", 1));
    held.send_pattern_body(seed, size, false);
    const http_response response = held.read_response();
    EXPECT_EQ(response.status, 200u);
    ASSERT_TRUE(upstream.wait_for_count(2, 10s));
    const auto requests = upstream.requests();
    ASSERT_EQ(requests.size(), 2u);
    EXPECT_EQ(requests[1].method, "POST");
    EXPECT_EQ(requests[1].body_size, size);
    EXPECT_EQ(requests[1].body_hash, pattern_hash(seed, size));
}

/// A rule that holds every request under /held/ behind the one before it, on one key: one slot
/// every 500 ms; the access log on.
std::string held_yaml(const recording_upstream& upstream) {
    return compose_yaml(
        upstream.url(),
        "  rules:\n"
        "    - name: held\n"
        "      match: { path: /held/* }\n"
        "      limits:\n"
        "        - { algorithm: LEAKY_BUCKET, capacity: 10, flowRate: 2, key: [ip] }\n",
        "",
        "  level: info\n  access-log: true\n");
}

// A held request waits without its coroutine and its memory, its header's bytes kept as they
// came (issue 17): after its hold it is parsed again and forwarded as it was sent (method,
// target, every field in order, the body that came with it), answered with its RateLimit
// fields, counted and logged once, as a held request.
TEST(IdleMemory, AHeldRequestIsForwardedIntactAfterItsHold) {
    recording_upstream upstream;
    sluice_process sluice(held_yaml(upstream));
    const auto admin = admin_port(sluice);

    http_connection head(sluice.port());
    head.send("GET", "/held/head");
    EXPECT_EQ(head.read_response().status, 200u);

    // Small enough to come in the header's read: the request waits with it in the buffer.
    const std::string body = pattern_string(5, 600);
    http_connection held(sluice.port());
    held.send_raw(format_request("POST",
                                 "/held/x?q=1&r=%2F",
                                 {{"X-One", "a"},
                                  {"X-Two", "b"},
                                  {"x-two", "c"},
                                  {"Content-Type", "text/plain"},
                                  {"Content-Length", std::to_string(body.size())}},
                                 body));
    ASSERT_TRUE(series_reaches(admin, "sluice_held_requests", 1));
    const http_response response = held.read_response();
    EXPECT_EQ(response.status, 200u);
    EXPECT_TRUE(response.keep_alive);
    const auto limits = view_of(response);
    EXPECT_EQ(limits.policy, "held");
    EXPECT_EQ(limits.quota, 10);
    EXPECT_TRUE(limits.remaining);
    EXPECT_TRUE(series_reaches(admin, "sluice_held_requests", 0));

    ASSERT_TRUE(upstream.wait_for_count(2, 10s));
    const auto requests = upstream.requests();
    ASSERT_EQ(requests.size(), 2u);
    const auto& forwarded = requests[1];
    EXPECT_EQ(forwarded.method, "POST");
    EXPECT_EQ(forwarded.target, "/held/x?q=1&r=%2F");
    EXPECT_EQ(forwarded.header("X-One"), "a");
    EXPECT_EQ(forwarded.header("Content-Type"), "text/plain");
    std::vector<std::string> twos; // both fields, in their order
    for (const auto& [name, value] : forwarded.headers) {
        if (name == "X-Two" || name == "x-two") {
            twos.push_back(value);
        }
    }
    EXPECT_EQ(twos, (std::vector<std::string>{"b", "c"}));
    EXPECT_EQ(forwarded.body_size, body.size());
    EXPECT_EQ(forwarded.body_hash, hash_of(body));
    // At least a slot after the head, which was forwarded at once.
    EXPECT_GE(forwarded.arrival - requests[0].arrival, 400ms);

    // A request is counted when it ends, after its response is written: the response can reach
    // the client before the count is made.
    ASSERT_TRUE(
        series_reaches(admin, "sluice_requests_total{decision=\"delayed\",rule=\"held\"}", 1));
    const auto text = scrape_metrics(admin);
    EXPECT_EQ(metric_or_zero(text, "sluice_held_requests_total"), 1);
    EXPECT_EQ(metric_or_zero(text, "sluice_held_abandoned_total"), 0);
    EXPECT_EQ(metric_or_zero(text, "sluice_requests_total{decision=\"delayed\",rule=\"held\"}"), 1);
    EXPECT_EQ(metric_or_zero(text, "sluice_requests_total{decision=\"allowed\",rule=\"held\"}"), 1);
    ASSERT_TRUE(sluice.wait_for_log("method=POST path=/held/x ", 5s)) << sluice.log_text();
    const auto log = sluice.log_text();
    const auto at = log.find("method=POST path=/held/x ");
    const auto line = log.substr(at, log.find('\n', at) - at);
    EXPECT_NE(line.find(" decision=delayed status=200 "), std::string::npos) << line;
    EXPECT_EQ(line.find(" delay_ms=0 "), std::string::npos) << line;
    EXPECT_EQ(line.find(" key=- "), std::string::npos) << line;
}

// Requests pipelined behind a held one wait in the connection's buffer with its header, and are
// served in order after it; an absolute-form target held is forwarded in origin-form with its
// authority as Host, as at once.
TEST(IdleMemory, RequestsPipelinedBehindAHeldOneFollowItInOrder) {
    recording_upstream upstream;
    sluice_process sluice(held_yaml(upstream));
    http_connection connection(sluice.port());
    connection.send("GET", "/held/head");
    EXPECT_EQ(connection.read_response().status, 200u);

    const std::string body = pattern_string(9, 700);
    connection.send_raw(
        format_request("GET", "http://origin.example/held/0?a=b", {{"Host", "x"}}) +
        format_request("POST", "/held/1", {{"Content-Length", std::to_string(body.size())}}, body) +
        format_request("GET", "/held/2"));
    for (int i = 0; i < 3; ++i) {
        const http_response response = connection.read_response();
        EXPECT_EQ(response.status, 200u) << i;
        EXPECT_TRUE(response.keep_alive) << i;
    }
    ASSERT_TRUE(upstream.wait_for_count(4, 10s));
    const auto requests = upstream.requests();
    ASSERT_EQ(requests.size(), 4u);
    EXPECT_EQ(requests[1].target, "/held/0?a=b");
    EXPECT_EQ(requests[1].header("Host"), "origin.example");
    EXPECT_EQ(count_header(requests[1].headers, "Host"), 1u);
    EXPECT_EQ(requests[2].method, "POST");
    EXPECT_EQ(requests[2].target, "/held/1");
    EXPECT_EQ(requests[2].body_hash, hash_of(body));
    EXPECT_EQ(requests[3].target, "/held/2");
    for (std::size_t i = 1; i < requests.size(); ++i) {
        EXPECT_GE(requests[i].arrival - requests[i - 1].arrival, 400ms) << i;
    }
}

// A stop that does not wait for held requests (the drain's deadline passes) destroys their
// waits unrun: each request, held without its coroutine, ends as a suspended one's would (its
// limiter made again gives back and settles), and sluice exits cleanly (under ASan: without a
// leak or a use after free).
TEST(IdleMemory, HeldRequestsCutByTheDrainTimeoutEndCleanly) {
    recording_upstream upstream;
    sluice_process sluice(compose_yaml(upstream.url(),
                                       "  rules:\n"
                                       "    - name: held\n"
                                       "      match: { path: /held/* }\n"
                                       "      limits:\n"
                                       "        - { algorithm: LEAKY_BUCKET, capacity: 10, "
                                       "flowRate: 0.01, key: [ip] }\n",
                                       "  workers: 2\n  drain-timeout: 200ms\n"));
    const auto admin = admin_port(sluice);
    http_connection head(sluice.port());
    head.send("GET", "/held/head");
    EXPECT_EQ(head.read_response().status, 200u);
    std::vector<std::unique_ptr<http_connection>> held;
    for (int i = 0; i < 3; ++i) {
        held.push_back(std::make_unique<http_connection>(sluice.port()));
        held.back()->send("GET", "/held/" + std::to_string(i));
    }
    ASSERT_TRUE(series_reaches(admin, "sluice_held_requests", 3));

    sluice.send_signal(SIGTERM);
    const auto status = sluice.wait_exit(20s);
    ASSERT_TRUE(status) << "sluice did not exit:\n" << sluice.log_text();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << sluice.log_text();
    EXPECT_NE(sluice.log_text().find("drain timeout"), std::string::npos) << sluice.log_text();
    EXPECT_EQ(sluice.log_text().find("Sanitizer"), std::string::npos) << sluice.log_text();
    EXPECT_EQ(upstream.requests().size(), 1u) << "a held request was forwarded";
}

} // namespace
} // namespace sluice::test
