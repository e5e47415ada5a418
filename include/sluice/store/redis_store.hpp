// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/io/net.hpp"
#include "sluice/metrics/metrics.hpp"
#include "sluice/redis/client.hpp"
#include "sluice/store/memory_store.hpp"
#include "sluice/store/store.hpp"

#include <boost/asio/any_completion_handler.hpp>

#include <chrono>
#include <memory>
#include <optional>

namespace sluice::store {

/**
 * Limiter state in Redis, shared by every sluice instance: one store (and one `redis::client`)
 * per worker thread.
 *
 * Requests are decided by EVALSHA of src/redis/limits.lua, with every check of a request, so all
 * its limits are decided and charged atomically, with Redis `TIME` as the clock. The requests
 * that call `acquire` in one turn of the worker's event loop share one EVALSHA (at most
 * `max_batch` of them): the script decides them one after the other, exactly as separate calls
 * at that instant would, and each request still waits for exactly one round trip. A quiet worker
 * sends one request per call; a busy one pays the script's fixed costs, and Redis its per-command
 * network work, once per batch.
 *
 * The script is loaded with SCRIPT LOAD on every (re)connection, ahead of any request; should
 * Redis answer NOSCRIPT anyway (SCRIPT FLUSH, failover), the batch is sent once more with EVAL,
 * which loads it again.
 *
 * When Redis cannot decide (unavailable, timed out, an error reply), the outcome depends on
 * `redis_settings::on_failure`: `open` and `closed` return the error in `outcome.ec` (the caller
 * applies the mode); `local` decides on `local_fallback` instead and clears `ec`.
 *
 * `acquire` must be awaited on the client's executor (the worker's thread). It never completes
 * inline (an empty `checks` completes at once, posted); it never throws.
 */
class redis_store final : public store {
public:
    /**
     * Uses `client`, which must outlive the store and be started by its owner. Registers the
     * script's SCRIPT LOAD as a connect command on it. `local_fallback` may be null (then
     * `on_failure: local` acts as `open`); when set, it must outlive the store.
     */
    redis_store(redis::client& client,
                const config::redis_settings& settings,
                memory_store* local_fallback = nullptr);

    /// Owns a client on `ex` built from `settings`, and starts it.
    redis_store(executor ex,
                const config::redis_settings& settings,
                memory_store* local_fallback = nullptr);

    ~redis_store() override;

    awaitable<outcome> acquire(checks request_checks) override;

    /// Requests decided by one script call at most: bounds how long one call keeps Redis busy.
    static constexpr std::size_t max_batch = 128;

    /// For tests: pass this time (unix ms) to the script instead of letting it read Redis TIME;
    /// `std::nullopt` restores TIME.
    void set_time_override_for_test(std::optional<double> now_ms) { now_override_ = now_ms; }

    redis::client& client() noexcept { return client_; }

    /**
     * Applies what a reload may change: `ttl` (for the keys written from now on) and
     * `on_failure`. The other settings made the client's connection and need a restart. Call on
     * the client's executor.
     */
    void apply_reloadable(const config::redis_settings& settings) noexcept;

    /// Counts Redis latency and errors in `registry` (which must outlive the store); optional.
    void set_metrics(metrics::registry* registry) noexcept { metrics_ = registry; }

private:
    struct batch;
    using batch_ptr = std::shared_ptr<batch>;

    void enqueue(checks&& request_checks, net::any_completion_handler<void(outcome)> handler);
    void flush();
    void send(batch_ptr b);
    void complete(batch& b, error_code ec, const redis::reply& r);
    outcome fail(checks& request_checks, error_code ec);

    std::unique_ptr<redis::client> owned_client_;
    redis::client& client_;
    std::chrono::milliseconds ttl_;
    config::failure_mode on_failure_;
    memory_store* local_fallback_;
    std::optional<double> now_override_;
    metrics::registry* metrics_ = nullptr;
    /// The batch taking requests until its flush runs; null when none is open.
    batch_ptr open_;
    /// Lets posted flushes and reply callbacks notice that the store is gone.
    std::shared_ptr<redis_store*> self_;
};

/**
 * A started Redis store that owns its client: what the app builds once per worker, on that
 * worker's executor. `local_fallback` serves `on_failure: local` and may be null otherwise.
 */
std::unique_ptr<store>
make_redis_store(executor ex, const config::redis_settings& settings, memory_store* local_fallback);

} // namespace sluice::store
