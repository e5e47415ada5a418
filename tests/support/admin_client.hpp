// SPDX-License-Identifier: Apache-2.0
#pragma once

// Helpers for tests that watch a running sluice from the outside: its admin listener (/metrics,
// /healthz, /readyz), its config file (rewritten for SIGHUP), and small Python checks over what
// it printed. Header-only: every function is inline.

#include "support/http_client.hpp"
#include "support/sluice_process.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/wait.h>
#include <thread>
#include <vector>

namespace sluice::test {

/// The admin block that every config of these tests carries: any free port on loopback.
inline constexpr const char* admin_any_port_yaml = "admin:\n  listen: \"127.0.0.1:0\"\n";

/// Debian's interpreter, which is where python3-prometheus-client installs its module.
inline constexpr const char* system_python = "/usr/bin/python3";

/**
 * The admin port sluice logged ("admin listening on 127.0.0.1:PORT"), waiting up to `timeout`
 * for the line. Throws std::runtime_error (with the log) if it never appears.
 */
inline std::uint16_t admin_port(const sluice_process& sluice,
                                std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    if (!sluice.wait_for_log("admin listening on", timeout)) {
        throw std::runtime_error("no admin listener in the log:\n" + sluice.log_text());
    }
    const std::string log = sluice.log_text();
    const std::regex line(R"(admin listening on 127\.0\.0\.1:(\d+))");
    std::smatch match;
    if (!std::regex_search(log, match, line)) {
        throw std::runtime_error("admin listener not on 127.0.0.1:\n" + log);
    }
    return static_cast<std::uint16_t>(std::stoul(match[1].str()));
}

/// The body of GET /metrics; throws unless the answer is 200.
inline std::string scrape_metrics(std::uint16_t admin) {
    const http_response response = get(admin, "/metrics");
    if (response.status != 200) {
        throw std::runtime_error("/metrics answered " + std::to_string(response.status));
    }
    return response.body;
}

/**
 * The value of the sample `series` in Prometheus text, where `series` is written as sluice
 * renders it: `name` or `name{label="v",...}` with the labels in sluice's order. nullopt when
 * no line holds it.
 */
inline std::optional<double> metric_value(const std::string& text, std::string_view series) {
    std::size_t at = 0;
    while (at < text.size()) {
        const std::size_t end = std::min(text.find('\n', at), text.size());
        const std::string_view line(text.data() + at, end - at);
        if (line.size() > series.size() && line.substr(0, series.size()) == series &&
            line[series.size()] == ' ') {
            try {
                return std::stod(std::string(line.substr(series.size() + 1)));
            } catch (const std::exception&) {
                return std::nullopt;
            }
        }
        at = end + 1;
    }
    return std::nullopt;
}

/// `metric_value` or 0 when the series is absent (a rule's counters appear with its first use).
inline double metric_or_zero(const std::string& text, std::string_view series) {
    return metric_value(text, series).value_or(0.0);
}

/**
 * Scrapes /metrics until `done(text)` holds or `timeout` passes; returns the last text scraped
 * and sets `met`. Counters move after a response is written, so tests wait rather than read once.
 */
inline std::string wait_for_metrics(std::uint16_t admin,
                                    const std::function<bool(const std::string&)>& done,
                                    std::chrono::milliseconds timeout,
                                    bool& met) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        std::string text = scrape_metrics(admin);
        met = done(text);
        if (met || std::chrono::steady_clock::now() >= deadline) {
            return text;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

/// Whether the series `series` (a gauge, or a counter) reaches `value` within 5 s, as /metrics
/// says (the last scrape when not).
inline ::testing::AssertionResult
series_reaches(std::uint16_t admin, std::string_view series, double value) {
    bool met = false;
    const auto text = wait_for_metrics(
        admin,
        [series, value](const std::string& t) { return metric_or_zero(t, series) == value; },
        std::chrono::seconds(5),
        met);
    if (met) {
        return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "expected " << series << " " << value << ":\n" << text;
}

/**
 * Waits up to `timeout` until GET `path` on the admin port answers `status`. Returns the last
 * status seen (0 when the listener could not be reached).
 */
inline unsigned wait_for_admin_status(std::uint16_t admin,
                                      const std::string& path,
                                      unsigned status,
                                      std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        unsigned seen = 0;
        try {
            seen = get(admin, path).status;
        } catch (const std::exception&) {
            seen = 0;
        }
        if (seen == status || std::chrono::steady_clock::now() >= deadline) {
            return seen;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

/**
 * Replaces the file at `path` with `text` in one step (written beside it, then renamed), so
 * that a process reading it on SIGHUP sees the old file or the new one, never half of one.
 */
inline void replace_file(const std::string& path, const std::string& text) {
    const std::string next = path + ".next";
    {
        std::ofstream out(next, std::ios::binary | std::ios::trunc);
        out << text;
        if (!out.flush()) {
            throw std::runtime_error("cannot write " + next);
        }
    }
    std::filesystem::rename(next, path);
}

/**
 * Runs `script` with Debian's python3 (`python3 -c script args...`), stdout and stderr
 * interleaved in the result.
 */
inline command_result run_python(const std::string& script,
                                 const std::vector<std::string>& args = {},
                                 std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    std::vector<std::string> argv = {"-c", script};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(system_python, argv, timeout);
}

/**
 * Stops `sluice` with SIGTERM, waits up to `timeout` for it to exit, then runs the Python `script`
 * over everything it printed (the log's file is sys.argv[1]). The script's result; a result
 * without an exit code, saying why, when sluice did not exit with 0.
 */
inline command_result
stop_and_check_log(sluice_process& sluice,
                   const std::string& script,
                   std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    sluice.send_signal(SIGTERM);
    const auto status = sluice.wait_exit(timeout);
    if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
        command_result stopped;
        stopped.output = status ? "sluice ended with wait status " + std::to_string(*status)
                                : std::string("sluice did not exit after SIGTERM");
        return stopped;
    }
    temp_dir dir;
    return run_python(script, {dir.write_file("sluice.log", sluice.log_text())});
}

} // namespace sluice::test
