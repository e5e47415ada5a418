// SPDX-License-Identifier: Apache-2.0
// Checks on the test harness itself, against the recording upstream directly (no sluice): if
// these fail, the proxy tests' verdicts mean nothing.

#include "integration_util.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <sys/wait.h>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

TEST(Harness, PatternIsDeterministicAndSliceable) {
    const std::string whole = pattern_string(42, 1000);
    std::string pieces(1000, '\0');
    fill_pattern(42, 0, pieces.data(), 3);
    fill_pattern(42, 3, pieces.data() + 3, 500);
    fill_pattern(42, 503, pieces.data() + 503, 497);
    EXPECT_EQ(whole, pieces);
    EXPECT_NE(whole, pattern_string(43, 1000));
    EXPECT_EQ(pattern_hash(42, 1000), hash_of(whole));
    EXPECT_EQ(hash_of(""), fnv1a64::offset_basis);
    EXPECT_EQ(hash_of("a"), 0xaf63dc4c8601ec8cULL); // the published FNV-1a 64 test vector
}

TEST(Harness, UpstreamHashesContentLengthAndChunkedUploads) {
    recording_upstream upstream;
    http_connection connection(upstream.port());
    for (const std::uint64_t size : {0ULL, 1ULL, 70'000ULL, 8ULL * 1024 * 1024}) {
        for (const bool chunked : {false, true}) {
            const header_list framing = chunked
                                            ? header_list{{"Transfer-Encoding", "chunked"}}
                                            : header_list{{"Content-Length", std::to_string(size)}};
            connection.send_raw(format_request("POST", "/up", framing));
            connection.send_pattern_body(size, size, chunked, 10'000);
            EXPECT_EQ(connection.read_response().status, 200u);
        }
    }
    const auto requests = upstream.requests();
    ASSERT_EQ(requests.size(), 8u);
    for (std::size_t i = 0; i < requests.size(); ++i) {
        const std::uint64_t size = requests[i].body_size;
        EXPECT_EQ(requests[i].body_hash, pattern_hash(size, size)) << i;
        EXPECT_EQ(requests[i].chunked, i % 2 == 1);
        EXPECT_EQ(requests[i].connection, 0u);
    }
    EXPECT_EQ(requests[6].body_size, 8u * 1024 * 1024);
}

TEST(Harness, UpstreamServesPatternDownloadsAndEchoes) {
    recording_upstream upstream([](const recorded_request& request) {
        response_plan plan;
        if (request.target == "/echo") {
            plan.kind = response_plan::body_kind::echo;
        } else {
            plan.kind = response_plan::body_kind::pattern;
            plan.pattern_size = 3'000'000;
            plan.pattern_seed = 9;
            plan.chunked = request.target == "/chunked";
        }
        return plan;
    });
    http_connection connection(upstream.port());
    for (const std::string target : {"/plain", "/chunked"}) {
        connection.send("GET", target);
        const http_response response = connection.read_response(false, 0);
        EXPECT_EQ(response.body_size, 3'000'000u);
        EXPECT_EQ(response.body_hash, pattern_hash(9, 3'000'000));
        EXPECT_EQ(response.chunked, target == "/chunked");
        EXPECT_TRUE(response.body.empty());
    }
    connection.send("POST", "/echo", {}, "hello upstream");
    const http_response echo = connection.read_response();
    EXPECT_EQ(echo.body, "hello upstream");
    EXPECT_EQ(echo.header("X-Upstream-Target"), "/echo");
}

TEST(Harness, UpstreamAnswersPipelinedRequestsInOrder) {
    recording_upstream upstream;
    http_connection connection(upstream.port());
    std::string batch;
    for (int i = 0; i < 5; ++i) {
        batch += format_request("GET", "/p" + std::to_string(i));
    }
    connection.send_raw(batch);
    for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(connection.read_response().header("X-Upstream-Target"), "/p" + std::to_string(i));
    }
    ASSERT_TRUE(upstream.wait_for_count(5, 1s));
    EXPECT_EQ(upstream.stats().connections, 1u);
}

TEST(Harness, UpstreamCountsBrokenRequests) {
    recording_upstream upstream;
    {
        http_connection connection(upstream.port());
        connection.send_raw("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc");
    }
    {
        http_connection connection(upstream.port());
        connection.send_raw("GARBAGE\r\n\r\n");
        EXPECT_TRUE(connection.wait_closed(5s));
    }
    EXPECT_EQ(get(upstream.port(), "/fine").status, 200u);
    // The first connection's end is seen on its own thread, maybe after the third one's.
    EXPECT_TRUE(upstream.wait_for_stats([](const upstream_stats& s) { return s.broken == 2; }, 5s));
    const upstream_stats stats = upstream.stats();
    EXPECT_EQ(stats.connections, 3u);
    EXPECT_EQ(stats.headers_received, 2u);
    EXPECT_EQ(stats.completed, 1u);
    EXPECT_EQ(stats.broken, 2u);
}

TEST(Harness, UpstreamIsQuietOnlyWhenEverythingSentWasProcessed) {
    recording_upstream upstream;
    EXPECT_TRUE(upstream.wait_quiet(1s));
    http_connection idle(upstream.port());
    EXPECT_TRUE(upstream.wait_quiet(1s)) << "an idle connection is quiet";
    http_connection partial(upstream.port());
    partial.send_raw("GET /half HTTP/1.1\r\nHost:");
    EXPECT_FALSE(upstream.wait_quiet(100ms)) << "a request is half read";
    partial.send_raw(" x\r\n\r\n");
    EXPECT_EQ(partial.read_response().status, 200u);
    EXPECT_TRUE(upstream.wait_quiet(1s));
    partial.stream().close();
    ASSERT_TRUE(upstream.wait_quiet(1s));
    EXPECT_EQ(upstream.stats().headers_received, 1u);
    EXPECT_EQ(upstream.stats().broken, 0u);
}

TEST(Harness, UpstreamStopsPromptlyDuringADelay) {
    const auto start = std::chrono::steady_clock::now();
    {
        recording_upstream upstream([](const recorded_request&) {
            response_plan plan;
            plan.delay = 30s;
            return plan;
        });
        http_connection connection(upstream.port());
        connection.send("GET", "/slow");
        ASSERT_TRUE(upstream.wait_for_count(1, 5s));
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(Harness, ClientTimesOutInsteadOfHanging) {
    recording_upstream upstream([](const recorded_request&) {
        response_plan plan;
        plan.delay = 10s;
        return plan;
    });
    http_connection connection(upstream.port(), 200ms);
    connection.send("GET", "/slow");
    error_code ec;
    EXPECT_FALSE(connection.try_read_response(ec));
    EXPECT_EQ(ec, boost::asio::error::timed_out);
}

TEST(Harness, StructuredFieldItemsParse) {
    const auto policy = parse_sf_item(R"("default";q=50;w=10)");
    ASSERT_TRUE(policy);
    EXPECT_EQ(policy->name, "default");
    EXPECT_EQ(policy->integer("q"), 50);
    EXPECT_EQ(policy->integer("w"), 10);
    const auto limit = parse_sf_item(R"("default";r=20;t=6, "other";r=1;t=1)");
    ASSERT_TRUE(limit);
    EXPECT_EQ(limit->integer("r"), 20);
    EXPECT_EQ(limit->integer("t"), 6);
    EXPECT_FALSE(limit->integer("x"));
    EXPECT_FALSE(parse_sf_item(R"("unterminated;r=1)"));
}

TEST(Harness, ConfigTemplateRendersEveryField) {
    sluice_config config;
    config.upstream_url = "http://127.0.0.1:1234";
    config.trusted_proxies = {"127.0.0.1/32", "10.0.0.0/8"};
    config.max_header_size = 1024;
    config.upstream_timeout = "500ms";
    config.flow_rate = 0.2;
    config.mode = "shape";
    const std::string yaml = config.yaml();
    EXPECT_NE(yaml.find(R"(trusted-proxies: ["127.0.0.1/32", "10.0.0.0/8"])"), std::string::npos);
    EXPECT_NE(yaml.find("  max-header-size: 1024\n"), std::string::npos);
    EXPECT_NE(yaml.find("  timeout: 500ms\n"), std::string::npos);
    EXPECT_NE(yaml.find("flowRate: 0.2\n"), std::string::npos);
    EXPECT_NE(yaml.find("mode: shape\n"), std::string::npos);
    EXPECT_EQ(yaml.find("{{"), std::string::npos) << yaml;
}

// A stand-in for sluice: logs the config path and the "listening on" line, accepts connections,
// and exits 3 on SIGTERM.
constexpr const char* fake_sluice = R"(#!/usr/bin/env python3
import signal, socket, sys
signal.signal(signal.SIGTERM, lambda *args: sys.exit(3))
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print("config", sys.argv[2])
print("[info] listening on 127.0.0.1:%d" % s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    c.close()
)";

std::string write_script(const temp_dir& dir, const std::string& text) {
    const std::string path = dir.write_file("fake-sluice", text);
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path;
}

TEST(Harness, ProcessStartsReportsItsPortAndStops) {
    if (run_command("/usr/bin/env", {"python3", "-c", "pass"}).exit_code != 0) {
        GTEST_SKIP() << "no python3";
    }
    temp_dir dir;
    sluice_process process("a: b\n", 10s, write_script(dir, fake_sluice));
    EXPECT_GT(process.port(), 0);
    EXPECT_NO_THROW(fd_stream::connect_loopback(process.port()));
    EXPECT_NE(process.log_text().find("config " + process.config_path()), std::string::npos);
    EXPECT_EQ(read_text_file(process.config_path()), "a: b\n");
    EXPECT_FALSE(process.wait_exit(0ms));
    process.send_signal(SIGTERM);
    const auto status = process.wait_exit(5s);
    ASSERT_TRUE(status);
    EXPECT_TRUE(WIFEXITED(*status));
    EXPECT_EQ(WEXITSTATUS(*status), 3);
}

TEST(Harness, ProcessThatExitsDuringStartupThrowsWithItsLog) {
    temp_dir dir;
    const std::string script = write_script(dir, "#!/bin/sh\necho boom-$1\nexit 2\n");
    try {
        sluice_process process("x: 1\n", 10s, script);
        ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("boom---config"), std::string::npos) << e.what();
    }
}

TEST(Harness, RunCommandCapturesOutputAndExitCode) {
    const command_result result = run_command("/bin/sh", {"-c", "echo out; echo err >&2; exit 4"});
    EXPECT_EQ(result.exit_code, 4);
    EXPECT_FALSE(result.timed_out);
    EXPECT_NE(result.output.find("out"), std::string::npos);
    EXPECT_NE(result.output.find("err"), std::string::npos);
    const command_result slow = run_command("/bin/sleep", {"10"}, 200ms);
    EXPECT_TRUE(slow.timed_out);
    EXPECT_FALSE(slow.exit_code);
}

TEST(Harness, FreePortHasNoListener) {
    EXPECT_THROW(fd_stream::connect_loopback(free_port()), boost::system::system_error);
}

} // namespace
} // namespace sluice::test
