// SPDX-License-Identifier: Apache-2.0
// The memory store's arithmetic over any sequence of clock readings (forward, still or back) and
// requests, for each algorithm. Requests carry costs and are settled (issue 15) on the
// algorithms that weigh them. Properties, checked after every request (abort on violation):
// - the admitted cost never exceeds what the limit allows over the time seen plus the refunds
//   settled: capacity + elapsed x rate for the buckets, limit per window (or per window length)
//   for the windows (a charge only makes admissions harder; a refund gives back at most its
//   amount, less when clamped at an empty level);
// - the state never goes back (a bucket's last leak, a fixed window's start, the log's clock),
//   settlements included;
// - 0 <= remaining <= the quota, also in a debt; a cost above the quota never fits (refused, no
//   retry estimate), and no other cost is flagged so;
// - the store decides exactly as the algorithm does on its own with a state it never forgets,
//   settlements included: forgetting a key changes no decision (a shard that has forgotten a key
//   reads its clock as never going back, so the time seen is that clock's), and a sweep forgets
//   the key exactly when its state has reset.
//
// Input: a header (algorithm, capacity or limit, rate or window, mode, max-delay), then steps: a
// signed clock step in ms (2 bytes), a fraction of a ms, and a byte whose low three bits are the
// number of requests, bit 3 asks for a sweep first (else bit 7 for one slice of the periodic
// sweep's pass), bit 4 for a settlement first (2 more bytes: a signed delta), and bits 5-6 pick
// the requests' cost: 1, small (1 more byte), up to the quota (2 more bytes), or above it (2 more
// bytes).
#include "sluice/core/clock.hpp"
#include "sluice/limiter/algorithm.hpp"
#include "sluice/limiter/cost.hpp"
#include "sluice/store/memory_store.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

namespace {

using namespace sluice;

[[noreturn]] void fail(const char* what, double a, double b) {
    std::fprintf(stderr, "memory_store_fuzz: %s (%.17g vs %.17g)\n", what, a, b);
    std::abort();
}

class reader {
public:
    reader(const std::uint8_t* data, std::size_t size)
        : data_(data)
        , size_(size) {}

    bool empty() const { return at_ >= size_; }

    std::uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }

    std::uint16_t u16() {
        const auto high = byte();
        return static_cast<std::uint16_t>(high << 8 | byte());
    }

private:
    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t at_ = 0;
};

config::limit limit_from(reader& in) {
    config::limit l;
    const auto algo = in.byte() % 4;
    const std::int64_t count = 1 + in.u16() % 512;
    const auto parameter = in.u16();
    const auto options = in.byte();
    const auto max_delay = in.u16();
    switch (algo) {
    case 0:
        l.algo = config::algorithm::leaky_bucket;
        l.capacity = count;
        l.flow_rate = (1.0 + parameter) / 64; // 1/64 .. 1024 per second
        l.mode = (options & 1) != 0 ? config::shaping_mode::police : config::shaping_mode::shape;
        if ((options & 2) != 0 && l.mode == config::shaping_mode::shape) {
            l.max_delay = std::chrono::milliseconds(max_delay);
        }
        break;
    case 1:
        l.algo = config::algorithm::token_bucket;
        l.capacity = count;
        l.refill_rate = (1.0 + parameter) / 64;
        break;
    case 2:
        l.algo = config::algorithm::fixed_window;
        l.limit_count = count;
        l.window = std::chrono::milliseconds(1 + parameter);
        break;
    default:
        l.algo = config::algorithm::sliding_window;
        l.limit_count = count;
        l.window = std::chrono::milliseconds(1 + parameter);
        break;
    }
    return l;
}

/// The most the limit may admit over clock readings spanning [first, last] (whole ms).
double allowance(const config::limit& l, double first, double last) {
    switch (l.algo) {
    case config::algorithm::leaky_bucket:
    case config::algorithm::token_bucket: {
        const double rate = l.algo == config::algorithm::leaky_bucket ? l.flow_rate : l.refill_rate;
        // Both roundings tolerate 1e-9 of a slot; a hair above the exact bound is not a breach.
        return static_cast<double>(l.capacity) + (last - first) * rate / 1000 + 1e-6;
    }
    case config::algorithm::fixed_window: {
        const auto w = static_cast<double>(l.window.count());
        return static_cast<double>(l.limit_count) *
               (std::floor(last / w) - std::floor(first / w) + 1);
    }
    case config::algorithm::sliding_window: {
        const auto w = static_cast<double>(l.window.count());
        return static_cast<double>(l.limit_count) * std::ceil((last - first + 1) / w);
    }
    case config::algorithm::concurrency:
        // Not generated here: its slots come back by release, not with time.
        return static_cast<double>(l.limit_count);
    }
    return 0;
}

/// What a request of any cost can be charged at most: capacity, or limit per window.
std::int64_t quota_of(const config::limit& l) {
    return l.algo == config::algorithm::leaky_bucket || l.algo == config::algorithm::token_bucket
               ? l.capacity
               : l.limit_count;
}

/// The requests' cost for a step's flags (bits 5-6), reading what it needs.
std::int64_t cost_from(reader& in, std::uint8_t flags, std::int64_t quota) {
    switch ((flags >> 5) & 3) {
    case 0:
        return 1;
    case 1:
        return 1 + in.byte() % 8;
    case 2:
        return 1 + in.u16() % quota;
    default:
        return quota + 1 + in.u16();
    }
}

/// The part of the state that must never move back, or NaN when the state has none.
double progress(const limiter::state& s) {
    if (const auto* leaky = std::get_if<limiter::leaky_bucket_state>(&s)) {
        return leaky->last_leak.approx();
    }
    if (const auto* token = std::get_if<limiter::token_bucket_state>(&s)) {
        return token->last_refill.approx();
    }
    if (const auto* fixed = std::get_if<limiter::fixed_window_state>(&s)) {
        return fixed->window_start_ms;
    }
    if (const auto* sliding = std::get_if<limiter::sliding_window_state>(&s)) {
        return sliding->clock_ms;
    }
    return std::nan("");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    reader in(data, size);
    const auto limit = limit_from(in);
    manual_clock clock(1e9);
    store::memory_store table(clock, 4);
    const std::string key = "rate-limit:10.0.0.1:/";
    const std::int64_t quota = quota_of(limit);
    const bool weighs = limiter::settles(limit.algo);

    // The algorithm on its own, on a state never forgotten; whether the store holds the key, and
    // the store's clock floor for its shard (-inf until a sweep forgets the key).
    limiter::state mirror;
    bool mirror_exists = false;
    double mirror_idle_at = 0;
    bool stored = false;
    double clock_floor = -HUGE_VAL;

    double first = std::floor(clock.now_ms());
    double last = first;
    double admitted = 0;
    double refunded = 0;
    double last_progress = -HUGE_VAL;
    const auto check_progress = [&] {
        const double p = progress(mirror);
        if (!std::isnan(p)) {
            if (p < last_progress) {
                fail("the state went back", p, last_progress);
            }
            last_progress = p;
        }
    };
    for (int step = 0; step < 4096 && !in.empty(); ++step) {
        const auto delta = static_cast<std::int16_t>(in.u16());
        const double fraction = in.byte() / 256.0;
        const auto flags = in.byte();
        clock.set(std::max(0.0, clock.now_ms() + delta + fraction));
        const double reading = std::floor(clock.now_ms());
        const bool may_forget = stored && mirror_idle_at <= reading;
        if ((flags & 8) != 0) {
            // Forgets the key exactly when its state has reset; the shard's clock then never
            // goes back.
            const auto forgotten = table.sweep();
            if (forgotten != (may_forget ? 1u : 0u)) {
                fail("the sweep forgot", static_cast<double>(forgotten), may_forget ? 1 : 0);
            }
            if (may_forget) {
                stored = false;
                clock_floor = std::max(clock_floor, reading);
            }
        } else if ((flags & 128) != 0) {
            // One slice of the periodic pass (a bucket at most), between requests: it may
            // forget the key only once its state has reset.
            const auto forgotten = table.sweep_slice(1).forgotten;
            if (forgotten > (may_forget ? 1u : 0u)) {
                fail("a sweep slice forgot", static_cast<double>(forgotten), may_forget ? 1 : 0);
            }
            if (forgotten == 1) {
                stored = false;
                clock_floor = std::max(clock_floor, reading);
            }
        }
        // The store's reading: its shard's clock once it has forgotten the key.
        const double now = clock_floor == -HUGE_VAL ? reading : std::max(clock_floor, reading);
        if (clock_floor != -HUGE_VAL) {
            clock_floor = now;
        }
        first = std::min(first, now);
        last = std::max(last, now);
        if ((flags & 16) != 0) {
            // A settlement: the store and the algorithm on its own settle alike. The store keeps
            // what it settles unless it gives back on a key it does not hold.
            const auto amount = static_cast<std::int16_t>(in.u16());
            const store::settlement a{key, &limit, amount, false};
            table.settle(std::span(&a, 1));
            auto next = mirror;
            const auto reset = limiter::settle(next, mirror_exists, limit, now, amount);
            if (reset) {
                mirror = next;
                mirror_exists = true;
                mirror_idle_at = now + static_cast<double>(reset->count());
                stored = stored || amount > 0;
                check_progress();
            }
            if (weighs && amount < 0) {
                refunded -= amount;
            }
        }
        const std::int64_t cost = cost_from(in, flags, quota);
        const store::checks request{store::check{key, &limit, cost}};
        for (int i = 0, n = 1 + (flags & 7); i < n; ++i) {
            const auto out = table.acquire_now(request);
            if (out.ec || out.decisions.size() != 1) {
                fail("the memory store failed", 0, 0);
            }
            const auto& d = out.decisions[0];
            auto next = mirror;
            const auto expected = limiter::acquire(next, mirror_exists, limit, now, cost);
            if (!(d == expected)) {
                fail("the store and the algorithm disagree; remaining",
                     static_cast<double>(d.remaining),
                     static_cast<double>(expected.remaining));
            }
            if (d.remaining < 0 || d.remaining > quota) {
                fail("remaining out of [0, quota]",
                     static_cast<double>(d.remaining),
                     static_cast<double>(quota));
            }
            const bool never = weighs && cost > quota;
            if (d.never_fits != never || (never && (d.allowed || d.retry_after.count() != 0))) {
                fail("a cost above the quota must never fit, and only such a cost",
                     static_cast<double>(cost),
                     static_cast<double>(quota));
            }
            if (!d.allowed) {
                continue;
            }
            mirror = next;
            mirror_exists = true;
            mirror_idle_at = now + static_cast<double>(d.reset_after.count());
            stored = true;
            admitted += static_cast<double>(weighs ? limiter::clamp_cost(cost) : 1);
            const double bound = allowance(limit, first, last) + refunded;
            if (admitted > bound) {
                fail("admitted more than the limit allows", admitted, bound);
            }
            check_progress();
        }
    }
    return 0;
}
