// SPDX-License-Identifier: Apache-2.0
#include "support/sluice_process.hpp"

#include "support/build_paths.hpp"
#include "support/fd_stream.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <iostream>
#include <regex>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace sluice::test {

namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Polling interval for conditions that offer nothing to block on (a child's log, its exit).
constexpr milliseconds poll_interval{10};

// The config every integration test starts from; {{NAME}} marks are replaced by `yaml()`.
constexpr const char* config_template = R"(# written by sluice_process
server:
  listen: "{{LISTEN}}"
  trusted-proxies: [{{TRUSTED}}]
{{SERVER_EXTRA}}
upstream:
  url: "{{UPSTREAM}}"
{{UPSTREAM_EXTRA}}
rate-limit:
  store: memory
  x-ratelimit-headers: {{X_HEADERS}}
  fallback:
    algorithm: LEAKY_BUCKET
    capacity: {{CAPACITY}}
    flowRate: {{FLOW_RATE}}
    mode: {{MODE}}
logging:
  level: {{LOG_LEVEL}}
admin:
  enabled: false
)";

void replace_all(std::string& text, const std::string& mark, const std::string& value) {
    for (auto at = text.find(mark); at != std::string::npos; at = text.find(mark, at)) {
        text.replace(at, mark.size(), value);
        at += value.size();
    }
}

// fork + exec with stdout and stderr into `log_path` (stdout into `stdout_fd` instead when it is
// one). Everything the child runs between fork and exec is async-signal-safe, because the test
// process has threads.
pid_t spawn(const std::string& binary,
            const std::vector<std::string>& args,
            const std::string& log_path,
            int stdout_fd = -1) {
    std::vector<std::string> storage;
    storage.push_back(binary);
    storage.insert(storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& arg : storage) {
        argv.push_back(arg.data());
    }
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
        throw std::runtime_error("fork failed");
    }
    if (pid == 0) {
        // Die with the test process, so that a crashed test leaves no sluice behind.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) {
            ::_exit(126);
        }
        const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int null = ::open("/dev/null", O_RDONLY);
        if (log < 0 || null < 0 || ::dup2(null, 0) < 0 ||
            ::dup2(stdout_fd >= 0 ? stdout_fd : log, 1) < 0 || ::dup2(log, 2) < 0) {
            ::_exit(126);
        }
        ::execv(binary.c_str(), argv.data());
        static constexpr char message[] = "exec failed\n";
        [[maybe_unused]] const auto n = ::write(2, message, sizeof message - 1);
        ::_exit(127);
    }
    return pid;
}

// Reaps `pid` if it exited within `timeout`.
std::optional<int> wait_pid(pid_t pid, milliseconds timeout) {
    const auto deadline = steady_clock::now() + timeout;
    for (;;) {
        int status = 0;
        const pid_t done = ::waitpid(pid, &status, WNOHANG);
        if (done == pid) {
            return status;
        }
        if (done < 0 && errno != EINTR) {
            return std::nullopt;
        }
        if (steady_clock::now() >= deadline) {
            return std::nullopt;
        }
        std::this_thread::sleep_for(poll_interval);
    }
}

bool can_connect(std::uint16_t port) {
    try {
        fd_stream::connect_loopback(port);
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

} // namespace

std::string sluice_binary() {
    // scripts/test runs the integration tests once more against another build of the binary
    // (the release build, a ThreadSanitizer build) without building the tests again.
    if (const char* other = std::getenv("SLUICE_TEST_BINARY"); other != nullptr && *other != 0) {
        return other;
    }
    return built_sluice_binary();
}

std::string sluice_config::yaml() const {
    std::string text = config_template;
    std::string trusted;
    for (const auto& cidr : trusted_proxies) {
        trusted += (trusted.empty() ? "\"" : ", \"") + cidr + "\"";
    }
    std::string server_extra;
    if (max_header_size) {
        server_extra += fmt::format("  max-header-size: {}\n", *max_header_size);
    }
    if (max_uri_length) {
        server_extra += fmt::format("  max-uri-length: {}\n", *max_uri_length);
    }
    if (max_body_size) {
        server_extra += fmt::format("  max-body-size: {}\n", *max_body_size);
    }
    if (request_buffer_size) {
        server_extra += fmt::format("  request-buffer-size: {}\n", *request_buffer_size);
    }
    if (!idle_timeout.empty()) {
        server_extra += fmt::format("  idle-timeout: {}\n", idle_timeout);
    }
    std::string upstream_extra;
    if (!upstream_timeout.empty()) {
        upstream_extra += fmt::format("  timeout: {}\n", upstream_timeout);
    }
    replace_all(text, "{{LISTEN}}", listen);
    replace_all(text, "{{TRUSTED}}", trusted);
    replace_all(text, "{{SERVER_EXTRA}}\n", server_extra);
    replace_all(text, "{{UPSTREAM}}", upstream_url);
    replace_all(text, "{{UPSTREAM_EXTRA}}\n", upstream_extra);
    replace_all(text, "{{X_HEADERS}}", x_ratelimit_headers ? "true" : "false");
    replace_all(text, "{{CAPACITY}}", std::to_string(capacity));
    replace_all(text, "{{FLOW_RATE}}", fmt::format("{}", flow_rate));
    replace_all(text, "{{MODE}}", mode);
    replace_all(text, "{{LOG_LEVEL}}", log_level);
    return text;
}

sluice_process::sluice_process(const std::string& yaml,
                               std::chrono::milliseconds startup,
                               const std::string& binary,
                               int stdout_fd)
    : config_path_(dir_.write_file("sluice.yaml", yaml))
    , log_path_(dir_.file("sluice.log")) {
    pid_ = spawn(binary, {"--config", config_path_}, log_path_, stdout_fd);
    const std::regex listening(R"(listening on 127\.0\.0\.1:(\d+))");
    const auto deadline = steady_clock::now() + startup;
    while (steady_clock::now() < deadline) {
        if (auto status = wait_pid(pid_, milliseconds(0))) {
            status_ = status;
            throw std::runtime_error(fmt::format(
                "sluice exited during start-up (wait status {}); log:\n{}", *status, log_text()));
        }
        const std::string log = log_text();
        std::smatch match;
        if (std::regex_search(log, match, listening)) {
            const auto port = static_cast<std::uint16_t>(std::stoul(match[1].str()));
            if (port != 0 && can_connect(port)) {
                port_ = port;
                return;
            }
        }
        std::this_thread::sleep_for(poll_interval);
    }
    // No destructor runs for a constructor that throws: stop the child here.
    ::kill(pid_, SIGKILL);
    status_ = wait_pid(pid_, std::chrono::seconds(10));
    throw std::runtime_error(
        fmt::format("sluice did not listen within {} ms; log:\n{}", startup.count(), log_text()));
}

sluice_process::~sluice_process() {
    if (!status_ && pid_ > 0) {
        ::kill(pid_, SIGTERM);
        if (!wait_exit(std::chrono::seconds(3))) {
            ::kill(pid_, SIGKILL);
            wait_exit(std::chrono::seconds(10));
        }
    }
    // A failing test is diagnosed from sluice's side too: show the end of its log.
    if (testing::Test::HasFailure()) {
        constexpr std::size_t tail = 8 * 1024;
        const std::string log = log_text();
        std::cerr << "---- sluice log (" << config_path_ << ")"
                  << (log.size() > tail ? ", last 8 KiB" : "") << " ----\n"
                  << (log.size() > tail ? log.substr(log.size() - tail) : log) << "---- end ----\n";
    }
}

std::string sluice_process::log_text() const {
    return read_text_file(log_path_);
}

void sluice_process::send_signal(int signal) const {
    if (!status_) {
        ::kill(pid_, signal);
    }
}

std::optional<int> sluice_process::wait_exit(std::chrono::milliseconds timeout) {
    if (!status_) {
        status_ = wait_pid(pid_, timeout);
    }
    return status_;
}

bool sluice_process::wait_for_log(const std::string& text,
                                  std::chrono::milliseconds timeout) const {
    const auto deadline = steady_clock::now() + timeout;
    for (;;) {
        if (log_text().find(text) != std::string::npos) {
            return true;
        }
        if (steady_clock::now() >= deadline) {
            return false;
        }
        std::this_thread::sleep_for(poll_interval);
    }
}

command_result run_command(const std::string& binary,
                           const std::vector<std::string>& args,
                           std::chrono::milliseconds timeout) {
    temp_dir dir;
    const std::string log_path = dir.file("output.log");
    const pid_t pid = spawn(binary, args, log_path);
    command_result result;
    auto status = wait_pid(pid, timeout);
    if (!status) {
        result.timed_out = true;
        ::kill(pid, SIGKILL);
        status = wait_pid(pid, std::chrono::seconds(10));
    }
    result.status = status.value_or(-1);
    if (status && WIFEXITED(*status)) {
        result.exit_code = WEXITSTATUS(*status);
    }
    result.output = read_text_file(log_path);
    return result;
}

} // namespace sluice::test
