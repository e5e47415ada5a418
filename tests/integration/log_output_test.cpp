// SPDX-License-Identifier: Apache-2.0
// The log's way out, on the real binary: a reader of stdout that stops reading costs log lines,
// never requests or the drain; a reload that changes logging.format writes each access line whole
// in one format, a request's that began before it included.

#include "integration_util.hpp"
#include "support/admin_client.hpp"
#include "support/limit_probe.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;

/// A pipe whose read end the test holds and never reads: a log reader that stopped.
class unread_pipe {
public:
    unread_pipe() {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) {
            throw std::runtime_error("pipe2 failed");
        }
        read_ = fds[0];
        write_ = fds[1];
    }

    ~unread_pipe() {
        close_write_end();
        ::close(read_);
    }

    unread_pipe(const unread_pipe&) = delete;
    unread_pipe& operator=(const unread_pipe&) = delete;

    int write_end() const { return write_; }

    /// Once the child has its copy.
    void close_write_end() {
        if (write_ >= 0) {
            ::close(write_);
            write_ = -1;
        }
    }

private:
    int read_ = -1;
    int write_ = -1;
};

// Issue: with stdout's reader stopped, the first worker to log blocked in its write holding
// spdlog's console mutex, then every worker and the control thread (whose drain logs "stopping"
// first): requests went unanswered and SIGTERM did nothing. Now lines are dropped and counted.
TEST(LogOutput, AStoppedStdoutReaderCostsLinesNeitherRequestsNorTheDrain) {
    recording_upstream upstream;
    unread_pipe stdout_pipe;
    constexpr auto drain_timeout = 5s;
    sluice_process sluice(compose_yaml(upstream.url(),
                                       roomy_fallback_yaml(),
                                       "  workers: 2\n  drain-timeout: 5s\n",
                                       "  level: info\n  access-log: true\n"),
                          10s,
                          sluice_binary(),
                          stdout_pipe.write_end());
    stdout_pipe.close_write_end();
    const auto admin = admin_port(sluice);

    // Each access line carries the path twice (path, key): some 1.1 KB a request, so that these
    // requests log several times what the pipe (64 KiB) and sluice's queue (1 MiB) hold.
    constexpr int clients = 4;
    constexpr int requests_each = 1000;
    const std::string padding(500, 'p');
    std::atomic<int> answered{0};
    std::mutex failure_mutex;
    std::string first_failure;
    std::vector<std::thread> threads;
    for (int c = 0; c < clients; ++c) {
        threads.emplace_back([&, c] {
            try {
                // Keep-alive; a response that does not come within 5 s fails the client.
                http_connection connection(sluice.port(), 5s);
                for (int i = 0; i < requests_each; ++i) {
                    connection.send("GET", fmt::format("/{}/{}/{}", padding, c, i));
                    const auto response = connection.read_response();
                    if (response.status != 200) {
                        throw std::runtime_error(fmt::format("status {}", response.status));
                    }
                    ++answered;
                }
            } catch (const std::exception& e) {
                std::lock_guard lock(failure_mutex);
                if (first_failure.empty()) {
                    first_failure = fmt::format("client {}: {}", c, e.what());
                }
            }
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    EXPECT_EQ(answered.load(), clients * requests_each) << first_failure;

    bool met = false;
    const auto text = wait_for_metrics(
        admin,
        [](const std::string& t) {
            return metric_or_zero(t, "sluice_log_lines_dropped_total") > 0;
        },
        5s,
        met);
    EXPECT_TRUE(met) << "no dropped lines counted:\n" << text;

    sluice.send_signal(SIGTERM);
    const auto status = sluice.wait_exit(drain_timeout);
    ASSERT_TRUE(status) << "sluice did not exit within its drain timeout";
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "wait status " << *status;
    // stderr has its own queue: the diagnostics went on while stdout was stuck.
    const auto log = sluice.log_text();
    EXPECT_NE(log.find("stopping: no new connections"), std::string::npos) << log;
    EXPECT_NE(log.find("] [info] stopped"), std::string::npos) << log;
}

// Issue: a request that began under `format: text` and ended after a reload to `json` wrote its
// text fields inside the JSON object (`{"time":…,"log":"access",client=127.0.0.1 method=GET …}`):
// its fields followed the request's configuration, the frame around them the logger's.
TEST(LogOutput, ARequestThatSpansAFormatChangeLogsOneValidJsonLine) {
    // The upstream holds /slow's response until it is destroyed, which closes the connection.
    auto upstream = std::make_unique<recording_upstream>([](const recorded_request& r) {
        response_plan plan;
        if (r.target == "/slow") {
            plan.delay = 10min;
        }
        return plan;
    });
    const auto yaml = [&](const char* format) {
        return compose_yaml(
            upstream->url(),
            roomy_fallback_yaml(),
            "",
            fmt::format("  level: info\n  format: {}\n  access-log: true\n", format));
    };
    sluice_process sluice(yaml("text"));
    http_connection slow(sluice.port());
    slow.send("GET", "/slow");
    ASSERT_TRUE(upstream->wait_for_stats(
        [](const upstream_stats& s) { return s.headers_received >= 1; }, 10s));

    replace_file(sluice.config_path(), yaml("json"));
    sluice.send_signal(SIGHUP);
    ASSERT_TRUE(sluice.wait_for_log("configuration reloaded", 10s)) << sluice.log_text();
    upstream.reset(); // the request ends now, under the new format: 502
    EXPECT_EQ(slow.read_response().status, 502u);
    slow.stream().close();
    ASSERT_TRUE(sluice.wait_for_log(R"("path":"/slow")", 10s)) << sluice.log_text();
    // Every line written in JSON (from the reload on) is one valid JSON object, the /slow
    // request's access line among them.
    constexpr const char* script = R"(import json, sys
lines = [l for l in open(sys.argv[1], encoding="utf-8") if l.startswith("{")]
slow = 0
for l in lines:
    try:
        o = json.loads(l)
    except ValueError as e:
        sys.exit("not JSON (%s): %r" % (e, l))
    slow += o.get("log") == "access" and o.get("path") == "/slow" and o.get("status") == 502
print("slow access lines:", slow)
)";
    const command_result result = stop_and_check_log(sluice, script);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("slow access lines: 1"), std::string::npos) << result.output;
}

} // namespace
} // namespace sluice::test
