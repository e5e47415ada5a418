// SPDX-License-Identifier: Apache-2.0
#pragma once

// Runs the real `sluice` binary as a child process for integration tests: writes its YAML
// config into a temporary directory, starts it with `--config`, captures stdout and stderr into
// a log file, and waits until it logs "listening on 127.0.0.1:PORT" and accepts connections.

#include "support/temp_dir.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace sluice::test {

/// The path of the sluice binary under test: $SLUICE_TEST_BINARY if set, else the one this
/// test build made (built_sluice_binary()).
std::string sluice_binary();

/**
 * The settings integration tests vary, rendered into a complete YAML config by `yaml()`.
 * Defaults: listen on 127.0.0.1:0, memory store, a leaky bucket so large it never limits
 * (police mode), admin off.
 */
struct sluice_config {
    std::string upstream_url;
    std::string listen = "127.0.0.1:0";
    std::vector<std::string> trusted_proxies;
    std::optional<std::uint64_t> max_header_size;
    std::optional<std::uint64_t> max_uri_length;
    std::optional<std::uint64_t> max_body_size;
    std::optional<std::uint64_t> request_buffer_size;
    /// As written in YAML, e.g. "500ms"; empty keeps the default.
    std::string upstream_timeout;
    /// server.idle-timeout as written in YAML; empty keeps the default.
    std::string idle_timeout;
    std::int64_t capacity = 1'000'000;
    double flow_rate = 100'000;
    std::string mode = "police"; // or "shape"
    bool x_ratelimit_headers = false;
    std::string log_level = "info";

    std::string yaml() const;
};

/// A running sluice. Destruction sends SIGTERM, then SIGKILL after a grace period.
class sluice_process {
public:
    /**
     * Writes `yaml` to a temporary sluice.yaml and starts `binary --config <it>`, then waits up
     * to `startup` for the "listening on" log line and a successful connect. Throws
     * std::runtime_error (with the log) if it exits or does not listen in time. With `stdout_fd`,
     * sluice's stdout (the access log) is that descriptor (a pipe the test holds, say) instead
     * of the log, which then has stderr alone.
     */
    explicit sluice_process(const std::string& yaml,
                            std::chrono::milliseconds startup = std::chrono::seconds(10),
                            const std::string& binary = sluice_binary(),
                            int stdout_fd = -1);

    explicit sluice_process(const sluice_config& config)
        : sluice_process(config.yaml()) {}

    ~sluice_process();
    sluice_process(const sluice_process&) = delete;
    sluice_process& operator=(const sluice_process&) = delete;

    std::uint16_t port() const { return port_; }

    pid_t pid() const { return pid_; }

    const std::string& config_path() const { return config_path_; }

    /// Everything sluice printed so far (stdout and stderr).
    std::string log_text() const;

    void send_signal(int signal) const;

    /// Waits up to `timeout` for the process to exit; its wait status, or nullopt if still up.
    std::optional<int> wait_exit(std::chrono::milliseconds timeout);

    /// Waits up to `timeout` for `text` to appear in the log.
    bool wait_for_log(const std::string& text, std::chrono::milliseconds timeout) const;

private:
    temp_dir dir_;
    std::string config_path_;
    std::string log_path_;
    pid_t pid_ = -1;
    std::optional<int> status_;
    std::uint16_t port_ = 0;
};

/// The outcome of a command run to completion.
struct command_result {
    /// The exit code when the process exited normally.
    std::optional<int> exit_code;
    /// The raw wait status; meaningful unless `timed_out`.
    int status = 0;
    bool timed_out = false;
    /// stdout and stderr, interleaved.
    std::string output;
};

/**
 * Runs `binary` with `args` (not including argv[0]) and waits up to `timeout`; kills it on
 * timeout. stdin is /dev/null.
 */
command_result run_command(const std::string& binary,
                           const std::vector<std::string>& args,
                           std::chrono::milliseconds timeout = std::chrono::seconds(10));

} // namespace sluice::test
