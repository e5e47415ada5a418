// SPDX-License-Identifier: Apache-2.0
#include "support/limited_sluice.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace sluice::test {

namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Copies what the tests look at out of a response.
void record(exchange& e, const http_response& response) {
    e.received = response.received;
    e.status = response.status;
    e.retry_after = response.header("Retry-After");
    e.rate_limit = response.header("RateLimit");
}

} // namespace

std::string limited_config::yaml() const {
    std::string text = "# written by limited_config\n"
                       "server:\n"
                       "  listen: \"127.0.0.1:0\"\n";
    if (!header_timeout.empty()) {
        text += fmt::format("  header-timeout: {}\n", header_timeout);
    }
    if (!drain_timeout.empty()) {
        text += fmt::format("  drain-timeout: {}\n", drain_timeout);
    }
    text += fmt::format("upstream:\n"
                        "  url: \"{}\"\n"
                        "rate-limit:\n"
                        "  store: {}\n",
                        upstream_url,
                        store);
    if (max_held) {
        text += fmt::format("  max-held: {}\n", *max_held);
    }
    text += fmt::format("  fallback:\n"
                        "    algorithm: LEAKY_BUCKET\n"
                        "    capacity: {}\n"
                        "    flowRate: {}\n"
                        "    mode: {}\n",
                        capacity,
                        flow_rate,
                        mode);
    if (!max_delay.empty()) {
        text += fmt::format("    max-delay: {}\n", max_delay);
    }
    if (store == "redis") {
        text += fmt::format("  redis:\n"
                            "    host: 127.0.0.1\n"
                            "    port: {}\n"
                            "    ttl: {}\n"
                            "    timeout: {}\n"
                            "    failure-mode: {}\n",
                            redis_port,
                            redis_ttl,
                            redis_timeout,
                            failure_mode);
    }
    text += fmt::format("logging:\n"
                        "  level: {}\n"
                        "  access-log: {}\n",
                        log_level,
                        access_log ? "true" : "false");
    text += admin ? "admin:\n  listen: \"127.0.0.1:0\"\n" : "admin:\n  enabled: false\n";
    return text;
}

bool eventually(const std::function<bool()>& done, milliseconds timeout, milliseconds poll) {
    const auto deadline = steady_clock::now() + timeout;
    for (;;) {
        if (done()) {
            return true;
        }
        if (steady_clock::now() >= deadline) {
            return false;
        }
        // Polling a condition with a deadline: another process's state offers no wake-up.
        std::this_thread::sleep_for(poll);
    }
}

request_burst::request_burst(std::vector<planned_request> plan, milliseconds timeout)
    : plan_(std::move(plan)) {
    for (const auto& p : plan_) {
        connections_.push_back(std::make_unique<http_connection>(p.port, timeout));
    }
    results_.resize(plan_.size());
}

request_burst::~request_burst() {
    for (auto& reader : readers_) {
        if (reader.joinable()) {
            reader.join();
        }
    }
}

steady_time request_burst::fire() {
    const auto first = steady_clock::now();
    for (std::size_t i = 0; i < plan_.size(); ++i) {
        results_[i].target = plan_[i].target;
        results_[i].port = plan_[i].port;
        results_[i].sent = steady_clock::now();
        connections_[i]->send("GET", plan_[i].target);
    }
    for (std::size_t i = 0; i < plan_.size(); ++i) {
        readers_.emplace_back([this, i] {
            error_code ec;
            auto response = connections_[i]->try_read_response(ec);
            if (response) {
                record(results_[i], *response);
            } else {
                results_[i].received = steady_clock::now();
                results_[i].error = ec.message();
            }
        });
    }
    return first;
}

std::vector<exchange> request_burst::collect() {
    for (auto& reader : readers_) {
        reader.join();
    }
    readers_.clear();
    return results_;
}

traffic::traffic(std::vector<std::uint16_t> ports,
                 std::string target,
                 milliseconds interval,
                 milliseconds timeout)
    : target_(std::move(target))
    , interval_(interval)
    , timeout_(timeout) {
    for (const auto port : ports) {
        threads_.emplace_back([this, port] { run(port); });
    }
}

traffic::~traffic() {
    stop();
}

std::size_t traffic::completed_since(steady_time since) const {
    const std::lock_guard lock(mutex_);
    return static_cast<std::size_t>(std::count_if(
        results_.begin(), results_.end(), [since](const exchange& e) { return e.sent >= since; }));
}

std::vector<exchange> traffic::stop() {
    {
        const std::lock_guard lock(mutex_);
        stop_ = true;
    }
    stopping_.notify_all();
    for (auto& thread : threads_) {
        if (thread.joinable()) {
            thread.join();
        }
    }
    const std::lock_guard lock(mutex_);
    return results_;
}

void traffic::run(std::uint16_t port) {
    std::unique_ptr<http_connection> connection;
    auto next = steady_clock::now();
    for (;;) {
        {
            // Pacing: wait for the next send time, or for stop().
            std::unique_lock lock(mutex_);
            if (stopping_.wait_until(lock, next, [this] { return stop_; })) {
                return;
            }
        }
        exchange e;
        e.target = target_;
        e.port = port;
        e.sent = steady_clock::now();
        try {
            if (!connection) {
                connection = std::make_unique<http_connection>(port, timeout_);
            }
            connection->send("GET", target_);
            error_code ec;
            if (auto response = connection->try_read_response(ec)) {
                record(e, *response);
                if (!response->keep_alive) {
                    connection.reset();
                }
            } else {
                e.received = steady_clock::now();
                e.error = ec.message();
                connection.reset();
            }
        } catch (const std::exception& error) {
            e.received = steady_clock::now();
            e.error = error.what();
            connection.reset();
        }
        {
            const std::lock_guard lock(mutex_);
            results_.push_back(std::move(e));
        }
        next = std::max(next + interval_, steady_clock::now());
    }
}

std::string statuses_of(const std::vector<exchange>& exchanges) {
    std::string text;
    for (const auto& e : exchanges) {
        text += std::to_string(e.status) + (e.error.empty() ? "" : "(" + e.error + ")") + " ";
    }
    return text;
}

} // namespace sluice::test
