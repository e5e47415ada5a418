// SPDX-License-Identifier: Apache-2.0
#include "store/limits_call.hpp"

#include "sluice/core/saturate.hpp"

#include <charconv>
#include <cmath>

namespace sluice::store::limits_call {
namespace {

using std::chrono::milliseconds;

// The buckets' rounding in src/limiter/leaky_bucket.cpp, epsilon included: capacity x T is
// rarely exact in binary (21 x 1000 / 0.7 gives 30000.000000000004), and a plain ceil would
// report a window one ms longer than the memory store does.
milliseconds bucket_ceil_ms(double ms) noexcept {
    constexpr double ms_epsilon = 1e-6;
    return saturating_ms(std::ceil(std::max(0.0, ms - ms_epsilon)));
}

// The policy's quota and window, as the C++ algorithms report them (no round trip needed).
void describe_policy(const config::limit& l, limiter::decision& d) noexcept {
    switch (l.algo) {
    case config::algorithm::leaky_bucket:
        d.limit = l.capacity;
        d.window = bucket_ceil_ms(static_cast<double>(l.capacity) * (1000.0 / l.flow_rate));
        break;
    case config::algorithm::token_bucket:
        d.limit = l.capacity;
        d.window = bucket_ceil_ms(static_cast<double>(l.capacity) * (1000.0 / l.refill_rate));
        break;
    case config::algorithm::fixed_window:
    case config::algorithm::sliding_window:
        d.limit = l.limit_count;
        d.window = l.window;
        break;
    case config::algorithm::concurrency:
        d.limit = l.limit_count;
        d.in_flight = true;
        break;
    }
}

// Whether a request of cost `cost` can never fit `l` (decision::never_fits): the script refuses
// it without a retry estimate, and the flag follows from the check alone, as the policy does.
bool never_fits(const config::limit& l, std::int64_t cost) noexcept {
    const auto c = limiter::clamp_cost(cost);
    switch (l.algo) {
    case config::algorithm::leaky_bucket:
    case config::algorithm::token_bucket:
        return c > l.capacity;
    case config::algorithm::fixed_window:
    case config::algorithm::sliding_window:
        return c > l.limit_count;
    case config::algorithm::concurrency:
        break;
    }
    return false;
}

} // namespace

int algorithm_code(config::algorithm a) noexcept {
    switch (a) {
    case config::algorithm::leaky_bucket:
        return 1;
    case config::algorithm::token_bucket:
        return 2;
    case config::algorithm::fixed_window:
        return 3;
    case config::algorithm::sliding_window:
        return 4;
    case config::algorithm::concurrency:
        return 5;
    }
    return 0;
}

std::string format_double(double x) {
    char buffer[32];
    const auto end = std::to_chars(buffer, buffer + sizeof buffer, x).ptr;
    return std::string(buffer, end);
}

std::pair<std::string, std::string> parameters(const config::limit& l) {
    switch (l.algo) {
    case config::algorithm::leaky_bucket:
        return {std::to_string(l.capacity), format_double(l.flow_rate)};
    case config::algorithm::token_bucket:
        return {std::to_string(l.capacity), format_double(l.refill_rate)};
    case config::algorithm::fixed_window:
    case config::algorithm::sliding_window:
        break;
    case config::algorithm::concurrency:
        return {std::to_string(l.limit_count), std::to_string(l.lease.count())};
    }
    return {std::to_string(l.limit_count), std::to_string(l.window.count())};
}

void write_definition(redis::command_writer& w, const config::limit& l) {
    const auto [p1, p2] = parameters(l);
    w.arg(algorithm_code(l.algo));
    w.arg(p1);
    w.arg(p2);
    w.arg(l.mode == config::shaping_mode::shape ? "0" : "1");
    w.arg(l.max_delay ? l.max_delay->count() : std::int64_t{-1});
    w.arg(l.dry_run ? "1" : "0");
}

std::string_view definition_texts::of(const config::limit& l) {
    auto it = texts_.find(&l);
    if (it != texts_.end() && it->second.said == limit_fields{l}) {
        return it->second.text;
    }
    if (it == texts_.end() && texts_.size() >= max_texts) {
        texts_.clear(); // the limits of configs long gone
    }
    std::string text;
    auto w = redis::command_writer::arguments_only(text);
    write_definition(w, l);
    const auto at = texts_.insert_or_assign(&l, entry{limit_fields{l}, std::move(text)}).first;
    return at->second.text;
}

definition_texts::limit_fields::limit_fields(const config::limit& l)
    : algo(l.algo)
    , capacity(l.capacity)
    , limit_count(l.limit_count)
    , flow_rate(l.flow_rate)
    , refill_rate(l.refill_rate)
    , window(l.window)
    , lease(l.lease)
    , mode(l.mode)
    , max_delay(l.max_delay)
    , dry_run(l.dry_run) {}

milliseconds delay_bound(const config::limit& l) noexcept {
    if (l.algo != config::algorithm::leaky_bucket || l.mode != config::shaping_mode::shape) {
        return milliseconds{0};
    }
    const double slot_ms = 1000.0 / l.flow_rate;
    const double bound_ms = l.max_delay ? static_cast<double>(l.max_delay->count()) + slot_ms
                                        : (static_cast<double>(l.capacity) + 1.0) * slot_ms;
    return bucket_ceil_ms(bound_ms + 1.0); // saturates
}

bool delays_within_bounds(std::string_view packed,
                          std::size_t field,
                          const checks& request_checks,
                          std::size_t stride) noexcept {
    for (const auto& c : request_checks) {
        const auto delay = field_at(packed, field + 4);
        if (delay < 0 || delay > delay_bound(*c.limit).count()) {
            return false;
        }
        field += stride;
    }
    return true;
}

void decisions_at(std::string_view packed,
                  std::size_t field,
                  const checks& request_checks,
                  std::size_t stride,
                  outcome& out) {
    // Emptied in place: assigning outcome{} moved two empty small_vectors over it, a costly
    // no-op (130 instructions a request).
    out.ec = {};
    out.decisions.clear();
    out.slots.clear();
    out.local = false;
    for (const auto& c : request_checks) {
        limiter::decision d;
        describe_policy(*c.limit, d);
        d.allowed = field_at(packed, field) == 1;
        d.remaining = field_at(packed, field + 1);
        d.reset_after = duration_at(packed, field + 2);
        d.retry_after = duration_at(packed, field + 3);
        d.delay = milliseconds{field_at(packed, field + 4)};
        d.never_fits = never_fits(*c.limit, c.cost);
        out.decisions.push_back(d);
        field += stride;
    }
}

bool admitted(const checks& request_checks, const outcome& out) noexcept {
    for (std::size_t i = 0; i < request_checks.size(); ++i) {
        if (!out.decisions[i].allowed && !request_checks[i].limit->dry_run) {
            return false;
        }
    }
    return true;
}

std::vector<give_back_entry> give_backs_at(std::string_view packed,
                                           std::size_t field,
                                           const checks& request_checks,
                                           const outcome& out,
                                           std::size_t stride) {
    std::vector<give_back_entry> entries;
    if (!admitted(request_checks, out)) {
        return entries;
    }
    for (std::size_t i = 0; i < request_checks.size(); ++i, field += stride) {
        const auto& c = request_checks[i];
        const bool last = std::none_of(request_checks.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                                       request_checks.end(),
                                       [&](const check& later) { return later.key == c.key; });
        if (out.decisions[i].allowed && last && c.limit->algo != config::algorithm::concurrency) {
            entries.push_back({c.key,
                               c.limit,
                               limiter::clamp_cost(c.cost),
                               {field_at(packed, field + reply_fields),
                                field_at(packed, field + reply_fields + 1)}});
        }
    }
    return entries;
}

} // namespace sluice::store::limits_call
