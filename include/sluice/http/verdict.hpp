// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/store/store.hpp"

#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>

namespace sluice::http {

/// What the proxy does with one request, given the store's decisions for its limits.
struct verdict {
    enum class kind {
        allowed,       // forward at once
        delayed,       // hold for `delay`, then forward (shaping)
        queued,        // wait for a free slot of limit `wait_for` (CONCURRENCY, shape), then
                       // decide again
        rejected,      // 429
        failed_open,   // the store could not decide; forward (failure mode open)
        failed_closed, // the store could not decide; 503 (failure mode closed)
    };
    kind what = kind::allowed;
    /// delayed: how long to hold the request (the longest wait among enforced limits).
    std::chrono::milliseconds delay{0};
    /// rejected, failed_closed: the Retry-After seconds (the longest among refusing limits);
    /// 0 (no Retry-After) when only CONCURRENCY limits refused: when a slot frees depends on
    /// the upstream, so there is no honest estimate.
    std::int64_t retry_after = 0;
    /// queued: the index of the CONCURRENCY limit whose slot to wait for, else -1.
    int wait_for = -1;
    /// rejected: the index of the refusing enforced limit with the longest wait (named in the
    /// 429's body), else -1; a limit the request's cost can never fit comes first.
    int refused_by = -1;
    /// rejected: the request's cost exceeds the capacity of limit `refused_by`, so it can never
    /// be admitted: no Retry-After (`retry_after` 0).
    bool never_fits = false;
    /// The decision whose values go into the RateLimit headers, or -1 for none.
    int headers_from = -1;

    /// The limits admitted the request (at once, or after a hold): what it charged stands,
    /// its CONCURRENCY slots are taken.
    bool admitted() const noexcept { return what == kind::allowed || what == kind::delayed; }
};

/**
 * Folds the decisions of one request's limits (one per entry of `limits`, in order) into a
 * verdict:
 *
 * - an enforced limit (not `dry_run`) that refuses makes it `rejected`; Retry-After is the
 *   longest `retry_after` among the refusing enforced limits, in whole seconds rounded up, at
 *   least 1; a dry-run limit never rejects and never delays;
 * - but when every enforced limit that refuses is a CONCURRENCY limit in mode shape whose
 *   `max-delay` is not 0, it is `queued` (waiting for the first of them) instead;
 * - otherwise the longest `delay` among enforced limits makes it `delayed` when above zero;
 * - a store error (`outcome.ec`, or a decision count that does not match) gives `failed_open` or
 *   `failed_closed` after `on_failure` (`local` is the store's own business; if an error still
 *   arrives it is treated as `open`). Retry-After is then 1.
 *
 * The header decision is the most restrictive (lowest remaining) among the enforced limits, or
 * among all limits when every one is dry-run. Cost: one pass, no allocation.
 */
verdict decide(std::span<const config::limit> limits,
               const store::outcome& outcome,
               config::failure_mode on_failure) noexcept;

/**
 * For an outcome the store decided with waiting forbidden (every enforced shaping limit given
 * `max-delay: 0`, because `rate-limit.max-held` was reached): whether each enforced limit that
 * refused would have admitted the request with a wait, i.e. is a shaping LEAKY_BUCKET that had
 * room (remaining >= the request's cost for it, `costs[i]`; 1 where `costs` has none) and whose
 * wait (the refusal's `retry_after`) fits the `max-delay` of `limits`, the limits as configured, or
 * a CONCURRENCY limit in mode shape whose configured `max-delay` is not 0 (it would have queued).
 * Such a request is refused for the cap (503), not for its limits (429). False when there is no
 * such refusal.
 */
bool refused_only_for_waiting(std::span<const config::limit> limits,
                              const store::outcome& outcome,
                              std::span<const std::int64_t> costs = {}) noexcept;

/// The access-log word for a verdict: allowed, delayed, queued, rejected, failed_open,
/// failed_closed (as the metric's decision label spells them; queued is never logged: a queued
/// request ends as one of the others).
std::string_view to_string(verdict::kind what) noexcept;

} // namespace sluice::http
