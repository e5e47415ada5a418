// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <cstdint>

namespace sluice::limiter {

using std::chrono::milliseconds;

/**
 * What a limit decided for one request. Everything the response headers and the shaping step
 * need comes from here, computed in the same atomic step as the admission.
 */
struct decision {
    bool allowed = false;
    /// The policy's quota (`q` of RateLimit-Policy): capacity, or requests per window.
    std::int64_t limit = 0;
    /// The policy's window (`w` of RateLimit-Policy).
    milliseconds window{0};
    /// Requests (of a cost-weighted limit: units of cost) that could still be admitted now (`r`
    /// of RateLimit); never below 0, also while a settlement left a debt.
    std::int64_t remaining = 0;
    /// Until the limit is fully reset: queue drained, bucket full, window over (`t`).
    milliseconds reset_after{0};
    /// Rejected only: until a retry of the same cost can be admitted (0 when it never can).
    milliseconds retry_after{0};
    /// Admitted, shaping only: hold the request this long before forwarding it.
    milliseconds delay{0};
    /// A CONCURRENCY decision: `remaining` counts free slots; no window, nothing resets on a
    /// clock (no `t`), no `retry_after`.
    bool in_flight = false;
    /// Rejected: the request's cost exceeds what the limit can ever hold (capacity, or limit per
    /// window), so no retry will fit: nothing was charged and `retry_after` is 0 (answer without
    /// Retry-After).
    bool never_fits = false;

    friend bool operator==(const decision&, const decision&) = default;
};

} // namespace sluice::limiter
