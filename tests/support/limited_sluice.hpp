// SPDX-License-Identifier: Apache-2.0
#pragma once

// Helpers for end-to-end tests of limiting and shaping on the real binary: a config with a
// leaky-bucket fallback on either store plus an admin listener (read it with admin_client.hpp),
// bursts whose responses are timed one by one, and steady client traffic on threads.

#include "support/admin_client.hpp"
#include "support/http_client.hpp"
#include "support/sluice_process.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace sluice::test {

using steady_time = std::chrono::steady_clock::time_point;

/**
 * A sluice config whose fallback limit is a LEAKY_BUCKET on the memory or the Redis store, with
 * the shaping knobs, and the admin listener on 127.0.0.1:0 (enabled by default, unlike
 * `sluice_config`). Keys that are left empty are left out of the YAML (sluice's defaults).
 */
struct limited_config {
    std::string upstream_url;
    /// "memory" or "redis".
    std::string store = "memory";
    std::uint16_t redis_port = 0;
    std::string redis_ttl = "60s";
    /// Generous by default so that a loaded test machine never turns a slow reply into a
    /// failure-mode decision; failure tests set the 50ms default explicitly.
    std::string redis_timeout = "1s";
    /// "closed" by default, so that a store failure shows up as a 503 instead of silently
    /// loosening the limit a test measures.
    std::string failure_mode = "closed";
    std::int64_t capacity = 50;
    double flow_rate = 5;
    std::string mode = "shape";
    /// e.g. "1s"; empty: no max-delay.
    std::string max_delay;
    std::optional<std::int64_t> max_held;
    /// server.header-timeout, e.g. "1s"; empty: the default.
    std::string header_timeout;
    /// server.drain-timeout, e.g. "2s"; empty: the default.
    std::string drain_timeout;
    bool admin = true;
    bool access_log = false;
    std::string log_level = "info";

    std::string yaml() const;
};

/**
 * Polls `done` until it holds or `timeout` passes (for conditions that offer nothing to block
 * on, such as a counter in another process). True when it held.
 */
bool eventually(const std::function<bool()>& done,
                std::chrono::milliseconds timeout,
                std::chrono::milliseconds poll = std::chrono::milliseconds(5));

/// What a client saw of one request.
struct exchange {
    std::string target;
    /// The port it was sent to (which sluice instance).
    std::uint16_t port = 0;
    steady_time sent;
    /// When the response header arrived, or when the request failed.
    steady_time received;
    /// 0 when there was no response (the `error` says why).
    unsigned status = 0;
    std::optional<std::string> retry_after;
    std::optional<std::string> rate_limit;
    std::string error;

    std::chrono::milliseconds latency() const {
        return std::chrono::duration_cast<std::chrono::milliseconds>(received - sent);
    }
};

/// One request of a burst: a GET of `target` on its own connection to 127.0.0.1:port.
struct planned_request {
    std::uint16_t port = 0;
    std::string target;
};

/**
 * A burst of GETs, each on its own connection, opened up front so that firing costs only the
 * writes. `fire()` writes every request in plan order, then reads each connection on its own
 * thread, so that every response is timed when it arrives, not when the test gets to it (a
 * held request blocks its connection for its whole delay).
 */
class request_burst {
public:
    explicit request_burst(std::vector<planned_request> plan,
                           std::chrono::milliseconds timeout = std::chrono::seconds(30));
    ~request_burst();
    request_burst(const request_burst&) = delete;
    request_burst& operator=(const request_burst&) = delete;

    /// Sends every request and starts the readers; returns when the first write began.
    steady_time fire();

    /// Waits for every response; the results in plan order.
    std::vector<exchange> collect();

private:
    std::vector<planned_request> plan_;
    std::vector<std::unique_ptr<http_connection>> connections_;
    std::vector<exchange> results_;
    std::vector<std::thread> readers_;
};

/**
 * Steady client traffic: one thread per entry of `ports`, each sending GET `target` every
 * `interval` on a keep-alive connection (re-opened after an error or a close), never catching up
 * on missed sends. Every exchange is recorded.
 */
class traffic {
public:
    traffic(std::vector<std::uint16_t> ports,
            std::string target,
            std::chrono::milliseconds interval,
            std::chrono::milliseconds timeout = std::chrono::seconds(10));
    ~traffic();
    traffic(const traffic&) = delete;
    traffic& operator=(const traffic&) = delete;

    /// Exchanges completed so far that were sent at or after `since`.
    std::size_t completed_since(steady_time since) const;

    /// Stops every thread (each finishes its request in flight) and returns all exchanges.
    std::vector<exchange> stop();

private:
    void run(std::uint16_t port);

    std::string target_;
    std::chrono::milliseconds interval_;
    std::chrono::milliseconds timeout_;
    mutable std::mutex mutex_;
    std::condition_variable stopping_;
    bool stop_ = false;
    std::vector<exchange> results_;
    std::vector<std::thread> threads_;
};

/// Every exchange's status (with its error, if any), for assertion messages.
std::string statuses_of(const std::vector<exchange>& exchanges);

} // namespace sluice::test
