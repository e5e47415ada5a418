// SPDX-License-Identifier: Apache-2.0
#include "sluice/http/verdict.hpp"

#include "sluice/http/rate_limit_headers.hpp"
#include "sluice/limiter/cost.hpp"

#include <algorithm>

namespace sluice::http {
namespace {

// The lowest remaining among the limits `eligible` accepts; ties go to the first.
template <typename Eligible>
int most_restrictive(std::span<const config::limit> limits,
                     const store::outcome& outcome,
                     Eligible eligible) noexcept {
    int best = -1;
    for (std::size_t i = 0; i < limits.size(); ++i) {
        if (!eligible(limits[i])) {
            continue;
        }
        if (best < 0 || outcome.decisions[i].remaining <
                            outcome.decisions[static_cast<std::size_t>(best)].remaining) {
            best = static_cast<int>(i);
        }
    }
    return best;
}

// A refusal that only means "wait for a slot": a CONCURRENCY limit in mode shape that may wait.
bool may_queue(const config::limit& limit) noexcept {
    return limit.algo == config::algorithm::concurrency &&
           limit.mode == config::shaping_mode::shape &&
           (!limit.max_delay || limit.max_delay->count() > 0);
}

// The store gave no decision (or not one per limit): redis.on-failure says what that means.
verdict store_failed(config::failure_mode on_failure) noexcept {
    verdict v;
    if (on_failure == config::failure_mode::closed) {
        v.what = verdict::kind::failed_closed;
        v.retry_after = 1;
    } else {
        v.what = verdict::kind::failed_open;
    }
    return v;
}

} // namespace

verdict decide(std::span<const config::limit> limits,
               const store::outcome& outcome,
               config::failure_mode on_failure) noexcept {
    if (outcome.ec || outcome.decisions.size() != limits.size()) {
        return store_failed(on_failure);
    }
    verdict v;
    std::chrono::milliseconds longest_retry{0};
    bool refused = false;
    bool only_queues = true;   // every refusal may wait for a slot
    bool rate_refused = false; // a limit with a clock refused: Retry-After has an estimate
    for (std::size_t i = 0; i < limits.size(); ++i) {
        const auto& d = outcome.decisions[i];
        if (limits[i].dry_run) {
            continue;
        }
        if (!d.allowed) {
            if (d.never_fits) {
                // No wait admits it: say which limit, and promise no retry.
                if (!v.never_fits) {
                    v.refused_by = static_cast<int>(i);
                }
                v.never_fits = true;
            } else if (!v.never_fits && (!refused || d.retry_after > longest_retry)) {
                v.refused_by = static_cast<int>(i);
            }
            refused = true;
            longest_retry = std::max(longest_retry, d.retry_after);
            rate_refused = rate_refused || !d.in_flight;
            if (!may_queue(limits[i])) {
                only_queues = false;
            } else if (v.wait_for < 0) {
                v.wait_for = static_cast<int>(i);
            }
        } else {
            v.delay = std::max(v.delay, d.delay);
        }
    }
    if (refused && only_queues && !v.never_fits) {
        v.what = verdict::kind::queued;
        v.delay = std::chrono::milliseconds{0};
    } else if (refused) {
        v.what = verdict::kind::rejected;
        v.wait_for = -1;
        v.delay = std::chrono::milliseconds{0};
        v.retry_after = rate_refused && !v.never_fits ? retry_after_seconds(longest_retry) : 0;
    } else if (v.delay.count() > 0) {
        v.what = verdict::kind::delayed;
    }

    v.headers_from =
        most_restrictive(limits, outcome, [](const config::limit& l) { return !l.dry_run; });
    if (v.headers_from < 0) {
        v.headers_from =
            most_restrictive(limits, outcome, [](const config::limit&) { return true; });
    }
    return v;
}

bool refused_only_for_waiting(std::span<const config::limit> limits,
                              const store::outcome& outcome,
                              std::span<const std::int64_t> costs) noexcept {
    if (outcome.ec || outcome.decisions.size() != limits.size()) {
        return false;
    }
    bool refused = false;
    for (std::size_t i = 0; i < limits.size(); ++i) {
        const auto& limit = limits[i];
        const auto& d = outcome.decisions[i];
        if (limit.dry_run || d.allowed) {
            continue;
        }
        refused = true;
        if (may_queue(limit)) {
            continue;
        }
        const bool shapes = limit.algo == config::algorithm::leaky_bucket &&
                            limit.mode == config::shaping_mode::shape;
        // Without max-delay, a refusal with room can only be the forbidden wait. With it, the
        // wait is ceil(wait - epsilon) ms, so it fits exactly when the configured check would
        // have let it (see leak_and_admit).
        const std::int64_t cost = i < costs.size() ? limiter::clamp_cost(costs[i]) : 1;
        if (!shapes || d.remaining < cost ||
            (limit.max_delay && d.retry_after > *limit.max_delay)) {
            return false;
        }
    }
    return refused;
}

std::string_view to_string(verdict::kind what) noexcept {
    switch (what) {
    case verdict::kind::allowed:
        return "allowed";
    case verdict::kind::delayed:
        return "delayed";
    case verdict::kind::queued:
        return "queued";
    case verdict::kind::rejected:
        return "rejected";
    case verdict::kind::failed_open:
        return "failed_open"; // as the metric's decision label spells it
    case verdict::kind::failed_closed:
        return "failed_closed";
    }
    return "unknown";
}

} // namespace sluice::http
