// SPDX-License-Identifier: Apache-2.0
// The process's life and what it reports, on the real binary (issue 11): a start-up failure after
// the workers started ends with a message and exit code 1; a forced stop with requests in flight
// exits cleanly (run it under ASan to see the frames' buffers go back to a live pool); the
// upstream metrics count what the forwarder saw; a failing accept neither spins nor floods the
// log; a reload applies rate-limit.redis's ttl and failure-mode, and refuses what needs a restart.

#include "integration_util.hpp"
#include "support/admin_client.hpp"
#include "support/limit_probe.hpp"
#include "support/redis_server.hpp"
#include "support/resp_client.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

/// A limit that never refuses anything in a test.
constexpr const char* never_limits = "  fallback: { capacity: 1000000, flowRate: 100000 }\n";

/// "exit code N", "signal N" or "still running", for failure messages.
std::string describe_status(const std::optional<int>& status) {
    if (!status) {
        return "still running";
    }
    if (WIFEXITED(*status)) {
        return fmt::format("exit code {}", WEXITSTATUS(*status));
    }
    if (WIFSIGNALED(*status)) {
        return fmt::format("signal {}", WTERMSIG(*status));
    }
    return fmt::format("wait status {}", *status);
}

TEST(LifecycleStart, AdminPortInUseEndsWithTheMessageAndExitCodeOne) {
    // Something else holds the admin port (no SO_REUSEPORT: sluice's bind must fail).
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::acceptor holder(
        ioc, {boost::asio::ip::make_address("127.0.0.1"), 0}, /*reuse_addr=*/false);
    const auto taken = holder.local_endpoint().port();

    recording_upstream upstream;
    temp_dir dir;
    // Two workers, so that threads run when the admin listener fails.
    const std::string yaml = fmt::format("server:\n  listen: \"127.0.0.1:0\"\n  workers: 2\n"
                                         "upstream:\n  url: \"{}\"\n"
                                         "rate-limit:\n{}"
                                         "admin:\n  listen: \"127.0.0.1:{}\"\n",
                                         upstream.url(),
                                         never_limits,
                                         taken);
    const auto path = dir.write_file("sluice.yaml", yaml);
    const auto result = run_command(sluice_binary(), {"--config", path}, 20s);
    ASSERT_FALSE(result.timed_out) << result.output;
    ASSERT_TRUE(result.exit_code.has_value())
        << "killed by a signal (" << describe_status(result.status) << "):\n"
        << result.output;
    EXPECT_EQ(*result.exit_code, 1) << result.output;
    EXPECT_NE(result.output.find(fmt::format("cannot listen on admin.listen 127.0.0.1:{}", taken)),
              std::string::npos)
        << result.output;
    // It got as far as starting the workers: the failure really came after them.
    EXPECT_NE(result.output.find("listening on 127.0.0.1:"), std::string::npos) << result.output;
}

/// How the stop that does not wait for the drain comes.
enum class forced_stop {
    second_signal, // SIGTERM twice
    drain_timeout, // SIGTERM once, with a drain timeout shorter than the requests
};

// Starts requests that stay mid-forward (the upstream holds every response until the test ends:
// each request's frame holds a relay buffer and an upstream connection), stops sluice without
// waiting for them, and expects a clean exit. Under ASan, a frame destroyed after the buffer pool
// it returns its buffer to shows as a leak or a use after free, and sluice exits 1.
void expect_clean_forced_stop(forced_stop how) {
    recording_upstream upstream([](const recorded_request&) {
        response_plan plan;
        plan.delay = 10min;
        return plan;
    });
    const std::string server_extra = how == forced_stop::drain_timeout
                                         ? "  workers: 2\n  drain-timeout: 200ms\n"
                                         : "  workers: 2\n";
    sluice_process sluice(compose_yaml(upstream.url(), never_limits, server_extra));
    constexpr std::size_t in_flight = 6;
    std::vector<std::unique_ptr<http_connection>> clients;
    for (std::size_t i = 0; i < in_flight; ++i) {
        clients.push_back(std::make_unique<http_connection>(sluice.port()));
        clients.back()->send("GET", "/slow/" + std::to_string(i));
    }
    ASSERT_TRUE(upstream.wait_for_stats(
        [](const upstream_stats& s) { return s.headers_received >= in_flight; }, 10s))
        << sluice.log_text();

    sluice.send_signal(SIGTERM);
    ASSERT_TRUE(sluice.wait_for_log("stopping: no new connections", 10s)) << sluice.log_text();
    if (how == forced_stop::second_signal) {
        sluice.send_signal(SIGTERM);
    }
    const auto status = sluice.wait_exit(20s);
    ASSERT_TRUE(status.has_value()) << "did not stop:\n" << sluice.log_text();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << describe_status(status) << "\n"
                                                                 << sluice.log_text();
    EXPECT_EQ(sluice.log_text().find("Sanitizer"), std::string::npos) << sluice.log_text();
    EXPECT_NE(sluice.log_text().find(how == forced_stop::second_signal ? "second stop signal"
                                                                       : "drain timeout"),
              std::string::npos)
        << sluice.log_text();
    EXPECT_NE(sluice.log_text().find("stopped"), std::string::npos) << sluice.log_text();
}

// Admin connections that send nothing do not hold the process past its drain (their reads
// waited out 10 s before), and the admin listener serves at most 64 at once: one more takes the
// place of the one that has waited longest for its request, so that idle ones can neither take
// the descriptors the proxy's listener needs nor keep a probe out.
TEST(LifecycleStop, IdleAdminConnectionsNeitherHoldTheExitNorGrowPastTheirCap) {
    recording_upstream upstream;
    sluice_process sluice(compose_yaml(upstream.url(), never_limits));
    const auto admin = admin_port(sluice);
    std::vector<std::unique_ptr<http_connection>> idle;
    for (int i = 0; i < 64 + 3; ++i) {
        idle.push_back(std::make_unique<http_connection>(admin, 5s));
    }
    // The three accepted past the cap closed the three that had waited longest, in their order.
    for (int i = 0; i < 3; ++i) {
        EXPECT_TRUE(idle[static_cast<std::size_t>(i)]->wait_closed(5s)) << "served past the cap";
    }
    ASSERT_TRUE(sluice.wait_for_log("connections served at once", 5s)) << sluice.log_text();

    const auto stopping = std::chrono::steady_clock::now();
    sluice.send_signal(SIGTERM);
    const auto status = sluice.wait_exit(5s);
    ASSERT_TRUE(status.has_value()) << "held by the idle admin connections\n" << sluice.log_text();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << describe_status(status);
    EXPECT_LT(std::chrono::steady_clock::now() - stopping, 2s);
}

TEST(LifecycleStop, SecondSignalWithRequestsMidForwardExitsCleanly) {
    expect_clean_forced_stop(forced_stop::second_signal);
}

TEST(LifecycleStop, DrainTimeoutWithRequestsMidForwardExitsCleanly) {
    expect_clean_forced_stop(forced_stop::drain_timeout);
}

/// Counts of the upstream series in a /metrics text.
struct upstream_counts {
    double none = 0;
    double s2xx = 0;
    double s4xx = 0;
    double s5xx = 0;
    double latency_count = 0;
    double connect_errors = 0;
    double timeouts = 0;
    double bad_requests = 0;
};

upstream_counts upstream_counts_of(const std::string& text) {
    upstream_counts c;
    c.none = metric_or_zero(text, R"(sluice_upstream_responses_total{code="none"})");
    c.s2xx = metric_or_zero(text, R"(sluice_upstream_responses_total{code="2xx"})");
    c.s4xx = metric_or_zero(text, R"(sluice_upstream_responses_total{code="4xx"})");
    c.s5xx = metric_or_zero(text, R"(sluice_upstream_responses_total{code="5xx"})");
    c.latency_count = metric_or_zero(text, "sluice_upstream_latency_seconds_count");
    c.connect_errors = metric_or_zero(text, "sluice_upstream_connect_errors_total");
    c.timeouts = metric_or_zero(text, "sluice_upstream_timeouts_total");
    c.bad_requests = metric_or_zero(text, "sluice_bad_requests_total");
    return c;
}

/// Scrapes until sluice has counted `requests` requests in the fallback rule.
std::string metrics_after(std::uint16_t admin, double requests) {
    bool met = false;
    auto text = wait_for_metrics(
        admin,
        [requests](const std::string& t) {
            return metric_or_zero(t,
                                  R"(sluice_requests_total{decision="allowed",rule="fallback"})") >=
                   requests;
        },
        10s,
        met);
    EXPECT_TRUE(met) << text;
    return text;
}

TEST(LifecycleMetrics, ClientBodyFailuresAreNotUpstreamResponses) {
    recording_upstream upstream;
    sluice_process sluice(compose_yaml(upstream.url(), never_limits, "  max-body-size: 100\n"));
    const auto admin = admin_port(sluice);

    // A chunked body broken in its first chunk (found by the forwarder): 400.
    {
        http_connection client(sluice.port());
        client.send_raw("POST /broken HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "zz\r\n");
        EXPECT_EQ(client.read_response().status, 400u);
    }
    // A chunked body larger than max-body-size (found by the forwarder): 413.
    {
        http_connection client(sluice.port());
        client.send_raw("POST /large HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                        chunk_encode(std::string(1000, 'a'), 1000));
        EXPECT_EQ(client.read_response().status, 413u);
    }
    // One real upstream response.
    EXPECT_EQ(get(sluice.port(), "/ok").status, 200u);

    const auto c = upstream_counts_of(metrics_after(admin, 3));
    EXPECT_EQ(c.s2xx, 1);
    EXPECT_EQ(c.s4xx, 0) << "sluice's own 400/413 counted as upstream responses";
    EXPECT_EQ(c.none, 0);
    EXPECT_EQ(c.latency_count, 1) << "only the upstream's response has an upstream latency";
    EXPECT_EQ(c.bad_requests, 2);
    EXPECT_EQ(upstream.stats().completed, 1u);
}

TEST(LifecycleMetrics, OnlyAFailedConnectIsAConnectError) {
    // An upstream that reads the request and closes without answering, once; then nothing
    // listens on its port (connections are refused).
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::acceptor acceptor(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
    const auto port = acceptor.local_endpoint().port();
    // Not inherited by sluice (fork and exec), which would keep the port listening.
    ::fcntl(acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
    std::thread closer([&] {
        boost::asio::ip::tcp::socket socket(ioc);
        acceptor.accept(socket);
        std::string request;
        char data[4096];
        boost::system::error_code ec;
        while (request.find("\r\n\r\n") == std::string::npos && !ec) {
            const auto n = socket.read_some(boost::asio::buffer(data), ec);
            request.append(data, n);
        }
        socket.close(ec);
        acceptor.close(ec);
    });

    sluice_process sluice(compose_yaml(fmt::format("http://127.0.0.1:{}", port), never_limits));
    const auto admin = admin_port(sluice);
    EXPECT_EQ(get(sluice.port(), "/dropped").status, 502u);
    closer.join();
    EXPECT_EQ(get(sluice.port(), "/refused").status, 502u);

    const auto c = upstream_counts_of(metrics_after(admin, 2));
    EXPECT_EQ(c.connect_errors, 1) << "a connection that broke is not a connect error";
    EXPECT_EQ(c.none, 2) << "neither got a response from the upstream";
    EXPECT_EQ(c.s5xx, 0) << "sluice's own 502s counted as upstream responses";
    EXPECT_EQ(c.latency_count, 0);
    EXPECT_EQ(c.timeouts, 0);
}

/// CPU time (user + system) process `pid` has used so far.
std::chrono::milliseconds cpu_time(pid_t pid) {
    std::ifstream in(fmt::format("/proc/{}/stat", pid));
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Fields after the command name (which is in parentheses and may hold spaces): state is
    // field 3, utime 14, stime 15.
    std::istringstream fields(stat.substr(stat.rfind(')') + 2));
    std::string field;
    long long utime = 0;
    long long stime = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i) {
        if (i == 14) {
            utime = std::stoll(field);
        } else if (i == 15) {
            stime = std::stoll(field);
        }
    }
    const auto ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
    return std::chrono::milliseconds(static_cast<long long>((utime + stime) * 1000.0 / ticks));
}

std::size_t count_of(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
        ++n;
    }
    return n;
}

TEST(LifecycleAccept, OutOfDescriptorsTheAdminListenerPausesAndLogsBounded) {
#if defined(__SANITIZE_ADDRESS__)
    // UBSan's vptr check opens a pipe to probe memory the first time it meets a type: with no
    // descriptor left it reports a false "invalid vptr" and stops sluice. scripts/test runs this
    // test against the release and ThreadSanitizer binaries instead.
    if (std::getenv("SLUICE_TEST_BINARY") == nullptr) {
        GTEST_SKIP() << "needs a binary without UBSan's vptr check (SLUICE_TEST_BINARY)";
    }
#endif
    recording_upstream upstream;
    sluice_process sluice(compose_yaml(upstream.url(), never_limits, "  workers: 1\n"));
    const auto admin = admin_port(sluice);
    ASSERT_EQ(get(admin, "/healthz").status, 200u);

    // No descriptor for sluice (a limit of 0: however many it has open, and whatever it closes
    // meanwhile): the admin's next accept fails with EMFILE, and the connection stays queued, so
    // every accept after it fails too.
    rlimit before{};
    ASSERT_EQ(::prlimit(sluice.pid(), RLIMIT_NOFILE, nullptr, &before), 0);
    rlimit exhausted = before;
    exhausted.rlim_cur = 0;
    ASSERT_EQ(::prlimit(sluice.pid(), RLIMIT_NOFILE, &exhausted, nullptr), 0);
    fd_stream queued = fd_stream::connect_loopback(admin);
    ASSERT_TRUE(sluice.wait_for_log("admin: accept failed", 10s)) << sluice.log_text();

    // Watch it for `window`. The warning goes through a throttle of one line a second: at most
    // 1 + window / 1 s lines within it (counted from the window's start: how long the wait for
    // the first line took, on a loaded machine, is not the throttle's business). Paused 100 ms
    // after each failure, the loop costs next to no CPU (it spun a whole core before).
    constexpr auto window = 2500ms;
    const auto lines_before = count_of(sluice.log_text(), "admin: accept failed");
    const auto cpu_before = cpu_time(sluice.pid());
    std::this_thread::sleep_for(window);
    const auto cpu_used = cpu_time(sluice.pid()) - cpu_before;
    const auto lines = count_of(sluice.log_text(), "admin: accept failed") - lines_before;
    ASSERT_EQ(::prlimit(sluice.pid(), RLIMIT_NOFILE, &before, nullptr), 0);

    EXPECT_LE(lines, 1u + static_cast<std::size_t>(window / 1s))
        << sluice.log_text().substr(0, 4096);
    EXPECT_LT(cpu_used, window / 4) << "the accept loop spins";
    // With descriptors back, the queued connection is served.
    EXPECT_EQ(wait_for_admin_status(admin, "/healthz", 200, 10s), 200u);
}

/// A config on the Redis store at `redis_port` with these `ttl` and `failure-mode`.
std::string redis_yaml(const recording_upstream& upstream,
                       std::uint16_t redis_port,
                       const std::string& ttl,
                       const std::string& failure_mode) {
    return compose_yaml(upstream.url(),
                        fmt::format("  store: redis\n"
                                    "  redis:\n"
                                    "    host: 127.0.0.1\n"
                                    "    port: {}\n"
                                    "    ttl: {}\n"
                                    "    timeout: 500ms\n"
                                    "    failure-mode: {}\n",
                                    redis_port,
                                    ttl,
                                    failure_mode) +
                            never_limits,
                        "  workers: 2\n");
}

/// The largest PTTL (ms) of the keys in Redis; -3 when there are none.
long long longest_pttl(resp_client& redis) {
    long long longest = -3;
    const auto keys = redis.command({"KEYS", "*"});
    for (const auto& key : keys.elements) {
        longest = std::max(longest, redis.command({"PTTL", key.text}).integer);
    }
    return longest;
}

TEST(LifecycleReload, RedisTtlAndFailureModeApplyAndConnectionSettingsAreRefused) {
    if (!redis_server::available()) {
        GTEST_SKIP() << "redis-server not found";
    }
    redis_server redis;
    resp_client inspect(redis.port());
    recording_upstream upstream;
    sluice_process sluice(redis_yaml(upstream, redis.port(), "2h", "local"));
    ASSERT_EQ(get(sluice.port(), "/a").status, 200u);
    EXPECT_GT(longest_pttl(inspect), 60'000) << "the key lives for ttl 2h";

    // ttl and failure-mode apply on reload, to the store and the request path alike.
    replace_file(sluice.config_path(), redis_yaml(upstream, redis.port(), "30s", "closed"));
    sluice.send_signal(SIGHUP);
    ASSERT_TRUE(sluice.wait_for_log("configuration reloaded", 10s)) << sluice.log_text();
    // Each worker takes the new configuration when it gets to it: on a fresh connection after
    // the reload it has. Requests on both workers (keys expire anew with each update).
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    long long pttl = longest_pttl(inspect);
    while (pttl > 30'000 && std::chrono::steady_clock::now() < deadline) {
        inspect.command({"FLUSHALL"});
        for (int i = 0; i < 4; ++i) {
            ASSERT_EQ(get(sluice.port(), "/a").status, 200u);
        }
        pttl = longest_pttl(inspect);
    }
    EXPECT_LE(pttl, 30'000) << "the store still writes the old ttl";
    EXPECT_GT(pttl, 0);

    // Settings the Redis connection was made with need a restart: the reload is refused, with
    // the key named, and the running configuration stays.
    const auto moved =
        redis_yaml(upstream, static_cast<std::uint16_t>(redis.port() + 1), "30s", "open");
    replace_file(sluice.config_path(), moved);
    sluice.send_signal(SIGHUP);
    EXPECT_TRUE(sluice.wait_for_log("reload refused", 10s)) << sluice.log_text();
    EXPECT_NE(sluice.log_text().find("rate-limit.redis.port (" +
                                     where_in(sluice.config_path(), moved, "    port:") + ")"),
              std::string::npos)
        << sluice.log_text();
    EXPECT_EQ(count_of(sluice.log_text(), "configuration reloaded"), 1u) << sluice.log_text();

    // A file that leaves Redis for the memory store, its redis section dropped: the store is
    // what changed, and what the refusal names (it named rate-limit.redis.host).
    replace_file(sluice.config_path(),
                 compose_yaml(upstream.url(), never_limits, "  workers: 2\n"));
    sluice.send_signal(SIGHUP);
    EXPECT_TRUE(sluice.wait_for_log(
        "changing rate-limit.store (not in " + sluice.config_path() + ") needs a restart", 10s))
        << sluice.log_text();
    EXPECT_EQ(sluice.log_text().find("rate-limit.redis.host"), std::string::npos)
        << sluice.log_text();
    EXPECT_EQ(count_of(sluice.log_text(), "configuration reloaded"), 1u) << sluice.log_text();

    // Redis gone, failure-mode closed (not local, not open): 503 on every worker.
    redis.stop();
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(get(sluice.port(), "/down").status, 503u)
            << "the store still falls back to the memory store";
    }
}

} // namespace
} // namespace sluice::test
