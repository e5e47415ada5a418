// SPDX-License-Identifier: Apache-2.0
// One instance per address (issue 12): a second sluice started on the address a running one
// listens on (proxy or admin port) ends with `cannot listen on ADDRESS: address in use` and exit
// code 1, instead of sharing the port with SO_REUSEPORT (two memory stores: every limit doubled);
// the first one keeps answering. The workers share the one listening socket: a drain closes every
// worker's descriptor of it, so the port stops accepting.

#include "integration_util.hpp"
#include "support/admin_client.hpp"
#include "support/limit_probe.hpp"
#include "support/limited_sluice.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

/// A limit that never refuses anything in a test.
constexpr const char* never_limits = "  fallback: { capacity: 1000000, flowRate: 100000 }\n";

/// A config on `listen` with two workers (so that several threads hold the listening socket) and
/// the admin listener on `admin`.
std::string two_worker_yaml(const std::string& upstream_url,
                            const std::string& listen,
                            const std::string& admin) {
    return fmt::format("server:\n  listen: \"{}\"\n  workers: 2\n"
                       "upstream:\n  url: \"{}\"\n"
                       "rate-limit:\n{}"
                       "admin:\n  listen: \"{}\"\n",
                       listen,
                       upstream_url,
                       never_limits,
                       admin);
}

/// Runs a second sluice with `yaml` to completion (it must not start) and checks how it ended.
void expect_refused_start(const std::string& yaml, const std::string& message) {
    temp_dir dir;
    const auto path = dir.write_file("second.yaml", yaml);
    const auto result = run_command(sluice_binary(), {"--config", path}, 20s);
    ASSERT_FALSE(result.timed_out) << "the second instance kept running:\n" << result.output;
    ASSERT_TRUE(result.exit_code.has_value()) << "killed by a signal:\n" << result.output;
    EXPECT_EQ(*result.exit_code, 1) << result.output;
    EXPECT_NE(result.output.find(message), std::string::npos)
        << "expected \"" << message << "\" in:\n"
        << result.output;
}

/// Every one of `count` requests, each on its own connection, is answered 200 by the proxy.
void expect_all_answered(std::uint16_t port, int count) {
    std::vector<std::unique_ptr<http_connection>> connections;
    for (int i = 0; i < count; ++i) {
        connections.push_back(std::make_unique<http_connection>(port));
        connections.back()->send("GET", "/after/" + std::to_string(i));
    }
    for (auto& c : connections) {
        EXPECT_EQ(c->read_response().status, 200u);
    }
}

TEST(LifecycleSingleInstance, SecondInstanceOnTheProxyPortExitsWithAddressInUse) {
    recording_upstream upstream;
    sluice_process first(two_worker_yaml(upstream.url(), "127.0.0.1:0", "127.0.0.1:0"));
    const auto port = first.port();
    EXPECT_EQ(get(port, "/before").status, 200u);

    // The second has its own free admin port: only the proxy port collides.
    expect_refused_start(
        two_worker_yaml(upstream.url(), fmt::format("127.0.0.1:{}", port), "127.0.0.1:0"),
        fmt::format("cannot listen on 127.0.0.1:{}: address in use", port));

    // The first still owns the port, on every connection (a second process sharing the port
    // would have taken some of them, and left with them).
    expect_all_answered(port, 16);
    EXPECT_EQ(upstream.requests().size(), 17u);
}

TEST(LifecycleSingleInstance, SecondInstanceOnTheAdminPortExitsWithAddressInUse) {
    recording_upstream upstream;
    sluice_process first(two_worker_yaml(upstream.url(), "127.0.0.1:0", "127.0.0.1:0"));
    const auto admin = admin_port(first);

    expect_refused_start(
        two_worker_yaml(upstream.url(), "127.0.0.1:0", fmt::format("127.0.0.1:{}", admin)),
        fmt::format("cannot listen on admin.listen 127.0.0.1:{}: address in use", admin));

    EXPECT_EQ(wait_for_admin_status(admin, "/healthz", 200, 5s), 200u);
    expect_all_answered(first.port(), 4);
}

// The workers share one socket through their own descriptors: a drain must close all of them
// (and take each out of its worker's epoll set) for the kernel to stop accepting.
TEST(LifecycleSingleInstance, DrainStopsAcceptingOnTheSharedSocket) {
    // The upstream holds one request, so that sluice stays up, draining, while the test looks.
    recording_upstream upstream([](const recorded_request&) {
        response_plan plan;
        plan.delay = 10min;
        return plan;
    });
    sluice_process sluice(compose_yaml(upstream.url(), never_limits, "  workers: 2\n"));
    http_connection held(sluice.port());
    held.send("GET", "/held");
    ASSERT_TRUE(upstream.wait_for_stats(
        [](const upstream_stats& s) { return s.headers_received >= 1; }, 10s))
        << sluice.log_text();

    sluice.send_signal(SIGTERM);
    ASSERT_TRUE(sluice.wait_for_log("stopping: no new connections", 10s)) << sluice.log_text();
    boost::asio::io_context ioc;
    const boost::asio::ip::tcp::endpoint endpoint(boost::asio::ip::make_address("127.0.0.1"),
                                                  sluice.port());
    const bool refused = eventually(
        [&] {
            boost::asio::ip::tcp::socket probe(ioc);
            boost::system::error_code ec;
            probe.connect(endpoint, ec);
            return ec == boost::asio::error::connection_refused;
        },
        5s,
        20ms);
    EXPECT_TRUE(refused) << "the port still accepts connections while draining\n"
                         << sluice.log_text();
    EXPECT_FALSE(sluice.wait_exit(0ms).has_value()) << "stopped before the held request ended";
}

} // namespace
} // namespace sluice::test
