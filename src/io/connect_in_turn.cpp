// SPDX-License-Identifier: Apache-2.0
#include "sluice/io/connect_in_turn.hpp"

namespace sluice {

awaitable<error_code> connect_in_turn(timed_stream& stream,
                                      std::span<const tcp::endpoint> endpoints,
                                      std::chrono::steady_clock::time_point deadline) {
    error_code ec = net::error::host_not_found;
    for (std::size_t i = 0; i < endpoints.size(); ++i) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) {
            ec = beast::error::timeout;
            break;
        }
        const auto tries_left = static_cast<long>(endpoints.size() - i);
        stream.expires_at(now + (deadline - now) / tries_left);
        if (i > 0) {
            error_code ignored;
            stream.socket().close(ignored); // the last attempt's socket; the next opens another
        }
        auto [attempt] = co_await stream.async_connect(endpoints[i]);
        ec = attempt;
        if (!ec) {
            break;
        }
    }
    stream.expires_at(deadline);
    co_return ec;
}

} // namespace sluice
