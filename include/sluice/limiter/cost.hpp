// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice::limiter {

/**
 * Cost-weighted limits (issue 15): a request reserves a cost `c` of its limit before it is
 * forwarded and is settled by `actual - c` once its real cost is known. TOKEN_BUCKET,
 * LEAKY_BUCKET, FIXED_WINDOW and SLIDING_WINDOW weigh requests; CONCURRENCY counts every request
 * as 1 and ignores settlements (a slot is a slot: the configuration refuses `cost` on it).
 *
 * Every amount is bounded by 2^53, the configuration's largest count: the Lua script computes in
 * doubles, which hold every integer up to 2^53 exactly, so both stores then compute the same
 * integers. A cost below 1 counts as 1 (a request that reserved nothing would pass a limit that
 * has no room), a larger one as 2^53 (more than any limit holds: it never fits).
 */
inline constexpr std::int64_t max_amount = std::int64_t{1} << 53;

/// The cost a request reserves: `cost` clamped to [1, max_amount].
constexpr std::int64_t clamp_cost(std::int64_t cost) noexcept {
    return std::clamp<std::int64_t>(cost, 1, max_amount);
}

/// A settlement's `actual - reserved`, clamped to [-max_amount, max_amount].
constexpr std::int64_t clamp_delta(std::int64_t delta) noexcept {
    return std::clamp<std::int64_t>(delta, -max_amount, max_amount);
}

/**
 * `level + delta` for a level in [0, max_amount] and a clamped delta, kept in [0, max_amount]: a
 * refund never takes a level below empty, and a debt stops growing at 2^53 (years of refill).
 * Written so that no intermediate value leaves [-2^53, 2^53], where the script's doubles are
 * exact.
 */
constexpr std::int64_t settle_level(std::int64_t level, std::int64_t delta) noexcept {
    if (delta > max_amount - level) {
        return max_amount;
    }
    return std::max<std::int64_t>(level + delta, 0);
}

/**
 * A cost figure as a peer wrote it (a request's `X-Cost`, a response's `X-Usage`): a
 * non-negative decimal number, optionally surrounded by spaces or tabs, rounded up to a whole
 * amount and saturated at max_amount, also beyond a double's range (`1e309` is max_amount,
 * `1e-400` is 1). Anything else (empty, `abc`, `-5`, `inf`, `nan`, trailing bytes) is no figure:
 * nullopt, and the caller uses its fallback.
 */
std::optional<std::int64_t> parse_cost_figure(std::string_view text) noexcept;

} // namespace sluice::limiter
