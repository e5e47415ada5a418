// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/io/net.hpp"
#include "sluice/limiter/decision.hpp"

#include <boost/container/small_vector.hpp>

#include <optional>
#include <string>

namespace sluice::store {

/// One limit to decide for a request, under its derived key (`rate-limit:<ip>:<endpoint>`).
struct check {
    std::string key;
    /// Points into the caller's config snapshot, which the caller keeps alive until completion.
    const config::limit* limit = nullptr;
};

using checks = boost::container::small_vector<check, 2>;

/// One decision per check, in order; `ec` set when the store could not decide at all.
struct outcome {
    error_code ec;
    boost::container::small_vector<limiter::decision, 2> decisions;
};

/**
 * Where limiter state lives. Implementations: `memory_store` (in-process, shared by all workers)
 * and `redis_store` (one per worker, Lua scripts, shared by every sluice instance).
 *
 * `acquire` decides all checks of one request atomically: either every limit admits and each is
 * charged, or none is charged (a limit with `dry_run` never blocks the others). It never throws;
 * it completes on the awaiting coroutine's executor and may complete without suspending.
 */
class store {
public:
    virtual ~store() = default;

    virtual awaitable<outcome> acquire(checks request_checks) = 0;

    /**
     * The same decision made without suspending, for a store that can (the memory store);
     * nullopt: this store cannot, co_await `acquire` instead. Lets a caller skip a coroutine
     * frame per request.
     */
    virtual std::optional<outcome> try_acquire_now(const checks& request_checks) {
        (void)request_checks;
        return std::nullopt;
    }
};

} // namespace sluice::store
