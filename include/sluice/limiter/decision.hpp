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
    /// Requests that could still be admitted now (`r` of RateLimit).
    std::int64_t remaining = 0;
    /// Until the limit is fully reset: queue drained, bucket full, window over (`t`).
    milliseconds reset_after{0};
    /// Rejected only: until a retry can be admitted.
    milliseconds retry_after{0};
    /// Admitted, shaping only: hold the request this long before forwarding it.
    milliseconds delay{0};
    /// A CONCURRENCY decision: `remaining` counts free slots; no window, nothing resets on a
    /// clock (no `t`), no `retry_after`.
    bool in_flight = false;

    friend bool operator==(const decision&, const decision&) = default;
};

} // namespace sluice::limiter
