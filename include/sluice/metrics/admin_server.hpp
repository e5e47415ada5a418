// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/io/net.hpp"
#include "sluice/metrics/metrics.hpp"

#include <functional>
#include <memory>

namespace sluice::metrics {

/**
 * The admin listener, on its own address (never the proxy's port):
 *   GET /metrics  the registry in the Prometheus text format
 *   GET /healthz  200 while the process runs
 *   GET /readyz   200 when `ready()` says so, else 503
 * It serves one request per connection (admin traffic is a scrape every few seconds), at most 64
 * connections at once (a new one closes the one that has waited longest for its request head),
 * and runs on whichever io_context it is given.
 */
class admin_server {
public:
    using readiness = std::function<bool()>;

    admin_server(executor ex, const registry& metrics, readiness ready);
    ~admin_server();

    /// Binds `address`; returns the error (address in use, say) for the caller to report.
    error_code listen(const config::endpoint_address& address);

    /// The bound port (useful with port 0).
    std::uint16_t port() const;

    /// Starts accepting on the executor given at construction, until `stop()`.
    void start();

    /// Stops accepting and closes the connections being served (on the executor given at
    /// construction): nothing of the admin listener outlives a drain.
    void stop();

    struct impl; // shared with the connections it serves, so public to the .cpp's free functions

private:
    std::shared_ptr<impl> impl_;
};

} // namespace sluice::metrics
