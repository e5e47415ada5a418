// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/leaky_bucket.hpp"

#include "sluice/core/saturate.hpp"
#include "sluice/limiter/cost.hpp"

#include <algorithm>
#include <cmath>

namespace sluice::limiter {
namespace {

// T = 1000 / flowRate is rarely exact in binary, so a time a whole number of slots on lands a
// hair off where exact arithmetic puts it (3 x 333.333... may give 999.9999999999999). Rounding
// up to whole ms forgives 1e-6 ms of that; the leak forgives as much, or, where the times are
// so large that their own rounding is coarser (a slot of hours at a tiny flowRate), a few units
// in the last place: never a whole ms early, whatever T. The Lua script uses the same
// constants, so the stores still decide alike.
constexpr double ms_epsilon = 1e-6;
constexpr double relative_epsilon = 1e-15;

milliseconds ceil_ms(double ms) noexcept {
    return saturating_ms(std::ceil(std::max(0.0, ms - ms_epsilon)));
}

split_ms split(double now_ms) noexcept {
    const double whole = std::floor(now_ms);
    return {whole, now_ms - whole};
}

// L - now, from L's parts: (whole - now) is exact for whole-ms clocks, and the fraction is
// added at the magnitude of the difference, not of a unix time.
double offset_from(const split_ms& last, double now_ms) noexcept {
    return (last.whole - now_ms) + last.fraction;
}

// Leaks whole slots from `q` up to `now_ms`, keeping the fraction of the slot in progress in
// `last`; a clock behind `last` leaks nothing and never moves it back.
void leak(std::int64_t& q, split_ms& last, double slot_ms, double now_ms) noexcept {
    const double elapsed = (now_ms - last.whole) - last.fraction;
    if (elapsed > 0) {
        const double slots = elapsed / slot_ms;
        const double leaked =
            std::floor(slots + std::max(ms_epsilon / slot_ms, relative_epsilon * slots));
        if (leaked >= static_cast<double>(q)) {
            q = 0;
            last = split(now_ms);
        } else if (leaked > 0) {
            q -= saturating_cast<std::int64_t>(leaked); // leaked < q here
            const double moved = last.fraction + leaked * slot_ms;
            const double whole = std::floor(moved);
            last.whole += whole;
            last.fraction = moved - whole;
        }
    }
}

} // namespace

decision leak_and_admit(leaky_bucket_state& state,
                        bool exists,
                        std::int64_t capacity,
                        double flow_rate,
                        bool shaping,
                        std::optional<milliseconds> max_delay,
                        double now_ms,
                        std::int64_t cost) noexcept {
    const double slot_ms = 1000.0 / flow_rate;
    const std::int64_t c = clamp_cost(cost);
    std::int64_t q = exists ? state.queue_size : 0;
    split_ms last = exists ? state.last_leak : split(now_ms);
    leak(q, last, slot_ms, now_ms);
    const double head = offset_from(last, now_ms); // L - now

    decision d;
    d.limit = capacity;
    d.window = ceil_ms(static_cast<double>(capacity) * slot_ms);

    // The request's last slot would stand at position q + c; the head leaves at `last`. The sum
    // is one double addition of two exact integers, as the script computes it (q may be a debt
    // near 2^53, where int64 and double sums could round apart).
    const double wait_ms = head + (static_cast<double>(q) + static_cast<double>(c - 1)) * slot_ms;
    // The hold it gets: that wait, but for a clock behind L (head > 0: Redis's, stepped back by
    // NTP or after a failover to a primary whose clock is behind), which stands at L for it, as
    // nginx's limit_req takes a negative elapsed time for none. Its slot then comes a slot after
    // the last one promised, in real time, never a slot plus the clock's step: such a hold waited
    // out a step for nothing, past what the bucket holds (limits_call::delay_bound, which then
    // failed the whole batch after its charges were written). Retries and the reset stay on the
    // store's clock, where nothing leaks until it passes L.
    const double hold_ms = wait_ms - std::max(head, 0.0);
    const bool has_room = q <= capacity - c; // q + c <= capacity, without leaving 2^53
    const bool wait_fits =
        !shaping || !max_delay || hold_ms <= static_cast<double>(max_delay->count()) + ms_epsilon;

    if (c > capacity) {
        // No leak will ever make room for it: refuse without a retry estimate.
        d.allowed = false;
        d.never_fits = true;
    } else if (has_room && wait_fits) {
        q += c;
        d.allowed = true;
        d.delay = shaping ? ceil_ms(hold_ms) : milliseconds{0};
    } else {
        d.allowed = false;
        // Full: c fits once q + c - capacity more slots have leaked, the first at last + T. Too
        // long a wait: it shrinks one ms per ms (its slot's time stays as leaks free the ones
        // before it), so with max-delay a full bucket's retry waits for the later of the two.
        double until = has_room ? wait_ms - static_cast<double>(max_delay->count())
                                : head + static_cast<double>(q - (capacity - c)) * slot_ms;
        if (!has_room && shaping && max_delay) {
            until = std::max(until, wait_ms - static_cast<double>(max_delay->count()));
        }
        d.retry_after = std::max(ceil_ms(until), milliseconds{1});
    }
    d.remaining = std::max<std::int64_t>(capacity - q, 0);
    d.reset_after = ceil_ms(head + static_cast<double>(q) * slot_ms);

    state.queue_size = q;
    state.last_leak = last;
    return d;
}

milliseconds leak_and_settle(leaky_bucket_state& state,
                             bool exists,
                             double flow_rate,
                             double now_ms,
                             std::int64_t delta) noexcept {
    const double slot_ms = 1000.0 / flow_rate;
    std::int64_t q = exists ? state.queue_size : 0;
    split_ms last = exists ? state.last_leak : split(now_ms);
    // Leak first, so that a refund cannot give back slots that have leaked already (the queue
    // would otherwise end below what it holds now).
    leak(q, last, slot_ms, now_ms);
    q = settle_level(q, clamp_delta(delta));
    state.queue_size = q;
    state.last_leak = last;
    return ceil_ms(offset_from(last, now_ms) + static_cast<double>(q) * slot_ms);
}

decision leaky_bucket_acquire(leaky_bucket_state& state,
                              bool exists,
                              const config::limit& limit,
                              double now_ms,
                              std::int64_t cost) noexcept {
    return leak_and_admit(state,
                          exists,
                          limit.capacity,
                          limit.flow_rate,
                          limit.mode == config::shaping_mode::shape,
                          limit.max_delay,
                          now_ms,
                          cost);
}

milliseconds leaky_bucket_settle(leaky_bucket_state& state,
                                 bool exists,
                                 const config::limit& limit,
                                 double now_ms,
                                 std::int64_t delta) noexcept {
    return leak_and_settle(state, exists, limit.flow_rate, now_ms, delta);
}

} // namespace sluice::limiter
