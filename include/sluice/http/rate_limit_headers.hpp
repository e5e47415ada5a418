// SPDX-License-Identifier: Apache-2.0
#pragma once

// The rate-limit response headers, in the structured-field form of
// draft-ietf-httpapi-ratelimit-headers (-08 and later):
//
//   RateLimit-Policy: "api";q=50;w=10
//   RateLimit: "api";r=17;t=4
//
// and, when `rate-limit.x_ratelimit_headers` asks for them, the older X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset.

#include "sluice/limiter/decision.hpp"

#include <boost/beast/http/fields.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::http {

class response_head; // sluice/http/response_head.hpp

/// Whole seconds, rounded up; never negative (`t`, `w`, X-RateLimit-Reset).
std::int64_t ceil_seconds(std::chrono::milliseconds duration) noexcept;

/// Retry-After seconds: rounded up and at least 1, so that a client never retries at once.
std::int64_t retry_after_seconds(std::chrono::milliseconds duration) noexcept;

/**
 * The RateLimit-Policy value for one limit: `"<name>";q=<limit>;w=<window seconds>`. `w` is left
 * out when the window is zero. The name becomes an sf-string: '"' and '\' are escaped, and any
 * byte outside printable ASCII (which an sf-string cannot carry) becomes '_'.
 */
std::string policy_value(std::string_view name, const limiter::decision& decision);

/// The RateLimit value for one limit: `"<name>";r=<remaining>;t=<reset seconds, rounded up>`.
std::string rate_limit_value(std::string_view name, const limiter::decision& decision);

/**
 * Sets RateLimit-Policy and RateLimit from `decision` (replacing any the upstream sent), and the
 * three X-RateLimit-* fields when `x_ratelimit` is true. The caller picks the decision: for a
 * request under several limits, the most restrictive one (lowest remaining).
 */
void set_rate_limit_headers(boost::beast::http::fields& fields,
                            std::string_view name,
                            const limiter::decision& decision,
                            bool x_ratelimit);

/**
 * `set_rate_limit_headers` for a caller that writes the header itself: the same fields are
 * appended to `lines` as header lines ("Name: value\r\n"), to be written after `head`'s fields,
 * from which any the upstream sent are removed (one pass over the fields, no allocation).
 */
void append_rate_limit_lines(response_head& head,
                             std::string& lines,
                             std::string_view name,
                             const limiter::decision& decision,
                             bool x_ratelimit);

/// The 429 body: `{"error":"rate_limited","limit":"<rule>","limit_index":<i>,"retry_after":<s>}`,
/// naming the rule (or "fallback") and which of its limits refused (0-based, as in the config).
std::string rejection_body(std::string_view name, int limit_index, std::int64_t retry_after);

/// The 429 body of a request whose cost can never fit limit `limit_index`: the same fields,
/// `"retry_after":null`, and the cost asked and the limit's capacity:
/// `{..."retry_after":null,"cost":200,"capacity":100}`.
std::string
never_fits_body(std::string_view name, int limit_index, std::int64_t cost, std::int64_t capacity);

/// The 429 body of a request refused by cost-weighted limit `limit_index` (its cost does not fit
/// now): the same fields, then the cost asked and what the limit has left, in its own units:
/// `{..."retry_after":3,"cost":80,"remaining":40}`.
std::string cost_rejection_body(std::string_view name,
                                int limit_index,
                                std::int64_t retry_after,
                                std::int64_t cost,
                                std::int64_t remaining);

} // namespace sluice::http
