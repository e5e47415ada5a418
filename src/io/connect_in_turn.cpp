// SPDX-License-Identifier: Apache-2.0
#include "sluice/io/connect_in_turn.hpp"

#include <algorithm>

namespace sluice {

bool recent_failures::failed_lately(const tcp::endpoint& endpoint, time_point now) const {
    return std::any_of(failures_.begin(), failures_.end(), [&](const auto& f) {
        return f.first == endpoint && now - f.second < fail_timeout;
    });
}

std::vector<tcp::endpoint> recent_failures::order(std::span<const tcp::endpoint> endpoints,
                                                  time_point now) const {
    std::vector<tcp::endpoint> ordered(endpoints.begin(), endpoints.end());
    std::stable_partition(ordered.begin(), ordered.end(), [&](const tcp::endpoint& e) {
        return !failed_lately(e, now);
    });
    return ordered;
}

void recent_failures::failed(const tcp::endpoint& endpoint, time_point now) {
    const auto known = std::find_if(
        failures_.begin(), failures_.end(), [&](const auto& f) { return f.first == endpoint; });
    if (known != failures_.end()) {
        known->second = now;
        return;
    }
    if (failures_.size() == max_remembered) {
        failures_.erase(
            std::min_element(failures_.begin(), failures_.end(), [](const auto& a, const auto& b) {
                return a.second < b.second;
            }));
    }
    failures_.emplace_back(endpoint, now);
}

void recent_failures::succeeded(const tcp::endpoint& endpoint) {
    std::erase_if(failures_, [&](const auto& f) { return f.first == endpoint; });
}

awaitable<error_code> connect_in_turn(timed_stream& stream,
                                      std::span<const tcp::endpoint> endpoints,
                                      std::chrono::steady_clock::time_point deadline,
                                      recent_failures& failures) {
    const auto ordered = failures.order(endpoints, std::chrono::steady_clock::now());
    error_code ec = net::error::host_not_found;
    for (std::size_t i = 0; i < ordered.size(); ++i) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) {
            ec = beast::error::timeout;
            break;
        }
        const auto tries_left = static_cast<long>(ordered.size() - i);
        stream.expires_at(now + (deadline - now) / tries_left);
        if (i > 0) {
            error_code ignored;
            stream.socket().close(ignored); // the last attempt's socket; the next opens another
        }
        auto [attempt] = co_await stream.async_connect(ordered[i]);
        ec = attempt;
        if (!ec) {
            failures.succeeded(ordered[i]);
            break;
        }
        if (ec != net::error::operation_aborted) { // not a failure of the address: a stop
            failures.failed(ordered[i], std::chrono::steady_clock::now());
        }
    }
    stream.expires_at(deadline);
    co_return ec;
}

} // namespace sluice
