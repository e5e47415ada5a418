// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/leaky_bucket.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace sluice::limiter {
namespace {

using std::chrono::milliseconds;

config::limit leaky(std::int64_t capacity,
                    double flow_rate,
                    config::shaping_mode mode = config::shaping_mode::shape) {
    config::limit l;
    l.algo = config::algorithm::leaky_bucket;
    l.capacity = capacity;
    l.flow_rate = flow_rate;
    l.mode = mode;
    return l;
}

// A bucket and its stored state, as a store would keep them.
struct bucket {
    explicit bucket(config::limit l)
        : limit(std::move(l)) {}

    config::limit limit;
    leaky_bucket_state state;
    bool exists = false;

    decision request(double now_ms) {
        auto s = state;
        auto d = leaky_bucket_acquire(s, exists, limit, now_ms);
        if (d.allowed) {
            state = s;
            exists = true;
        }
        return d;
    }
};

TEST(LeakyBucket, WorkedExampleFromThePage) {
    // capacity 50, flowRate 5: 30 at t=0 all admitted, leaving one every 200 ms;
    // 50 more right after: exactly 20 admitted, 30 rejected.
    bucket b(leaky(50, 5));
    for (int i = 0; i < 30; ++i) {
        auto d = b.request(1'000'000);
        ASSERT_TRUE(d.allowed) << i;
        EXPECT_EQ(d.delay, milliseconds(200 * i));
        EXPECT_EQ(d.remaining, 50 - (i + 1));
    }
    int admitted = 0;
    for (int i = 0; i < 50; ++i) {
        auto d = b.request(1'000'000);
        if (d.allowed) {
            EXPECT_EQ(d.delay, milliseconds(200 * (30 + admitted)));
            ++admitted;
        } else {
            // The next slot frees 200 ms from now: Retry-After rounds that up to 1 s.
            EXPECT_EQ(d.retry_after, milliseconds(200));
            EXPECT_EQ(d.remaining, 0);
        }
    }
    EXPECT_EQ(admitted, 20);
    EXPECT_EQ(b.state.queue_size, 50);
}

TEST(LeakyBucket, IdleBucketAdmitsExactlyCapacity) {
    bucket b(leaky(50, 5));
    int admitted = 0;
    for (int i = 0; i < 200; ++i) {
        admitted += b.request(0).allowed ? 1 : 0;
    }
    EXPECT_EQ(admitted, 50);
}

TEST(LeakyBucket, RejectedRequestsAreNotCharged) {
    bucket b(leaky(2, 1));
    ASSERT_TRUE(b.request(0).allowed);
    ASSERT_TRUE(b.request(0).allowed);
    for (int i = 0; i < 100; ++i) {
        ASSERT_FALSE(b.request(500).allowed);
    }
    // Had the rejections been charged, the queue would still be full at 1 s.
    EXPECT_TRUE(b.request(1000).allowed);
    EXPECT_FALSE(b.request(1000).allowed);
}

TEST(LeakyBucket, SteadyTwiceFlowRateIsAdmittedAtFlowRateWithoutDrift) {
    // A request every 100 ms against flowRate 5 for 60 s. Setting last_leak_time = now on each
    // request would never leak a slot at all; the correct bucket admits 5/s plus its capacity.
    for (double rate : {5.0, 3.0, 0.5, 7.3}) {
        bucket b(leaky(10, rate));
        const double interval = 1000.0 / (2 * rate);
        const double duration = 60'000;
        std::int64_t admitted = 0;
        for (double t = 0; t < duration; t += interval) {
            admitted += b.request(t).allowed ? 1 : 0;
        }
        const auto floor_expected = static_cast<std::int64_t>(rate * duration / 1000);
        EXPECT_GE(admitted, floor_expected) << "rate " << rate;
        EXPECT_LE(admitted, floor_expected + 10) << "rate " << rate;
    }
}

TEST(LeakyBucket, LeakKeepsFractionalProgressTowardNextSlot) {
    bucket b(leaky(1, 5)); // T = 200 ms
    ASSERT_TRUE(b.request(0).allowed);
    ASSERT_FALSE(b.request(150).allowed);
    // 150 ms of progress are kept: at 200 ms the slot has drained.
    EXPECT_TRUE(b.request(200).allowed);
    EXPECT_EQ(b.state.last_leak, (split_ms{200, 0}));
}

TEST(LeakyBucket, FractionalSlotsKeepLastLeakExact) {
    bucket b(leaky(3, 3)); // T = 333.33 ms
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(b.request(0).allowed);
    }
    // At 700 ms two slots (666.67 ms) have drained; L advances by exactly 2 T.
    auto d = b.request(700);
    ASSERT_TRUE(d.allowed);
    EXPECT_EQ(b.state.last_leak.whole, 666);
    EXPECT_DOUBLE_EQ(b.state.last_leak.fraction, 2 * (1000.0 / 3) - 666);
    EXPECT_EQ(b.state.queue_size, 2);
    // The new request stands at position 2: it leaves at L + T = 1000 ms, 300 ms from now.
    EXPECT_EQ(d.delay, milliseconds(300));
}

TEST(LeakyBucket, ABusyQueueAtUnixTimeKeepsItsTimelineForADay) {
    // flowRate 6 (T = 166.67 ms) for a day, the queue never empty: L moves on 518,400 slots from
    // a unix time. As one double, L rounded to 2^-12 ms at every slot, the same way each time,
    // and ended about 42 ms late, refusing requests exactly as their slot freed long before.
    bucket b(leaky(2, 6, config::shaping_mode::police));
    const double t0 = 1'700'000'000'000;
    ASSERT_TRUE(b.request(t0).allowed);
    ASSERT_TRUE(b.request(t0).allowed);
    constexpr std::int64_t slots = 518'400;
    for (std::int64_t k = 1; k <= slots; ++k) {
        // Slot k frees at t0 + k x 1000 / 6: the first whole ms from then on (every third one
        // exactly on it) finds one slot free, and fills it again.
        const auto at = t0 + static_cast<double>((k * 1000 + 5) / 6);
        ASSERT_TRUE(b.request(at).allowed) << "slot " << k;
        ASSERT_EQ(b.state.queue_size, 2);
    }
    // 518,400 slots of 1000 / 6 ms are 86,400,000 ms exactly.
    EXPECT_NEAR((b.state.last_leak.whole - t0) + b.state.last_leak.fraction, 86'400'000, 1e-6);
    const double next = t0 + 86'400'000 + 1000.0 / 6;
    EXPECT_FALSE(b.request(std::floor(next)).allowed);
    EXPECT_TRUE(b.request(std::ceil(next)).allowed);
}

TEST(LeakyBucket, TimeRunningBackwardsNeverMovesLastLeakBack) {
    bucket b(leaky(5, 1));
    ASSERT_TRUE(b.request(10'000).allowed);
    ASSERT_TRUE(b.request(10'000).allowed);
    auto d = b.request(4'000);
    ASSERT_TRUE(d.allowed);
    EXPECT_EQ(b.state.last_leak, (split_ms{10'000, 0}));
    EXPECT_EQ(b.state.queue_size, 3);
    // Nothing leaked, and the hold counts as if the clock stood at last_leak: the third request
    // is two slots after the head, not two slots plus the clock's 6 s step (8 s; nginx's
    // limit_req likewise takes a negative elapsed time for none). The reset counts on the
    // store's clock: the queue is empty when it reaches 10 s + 3 slots.
    EXPECT_EQ(d.delay, milliseconds(2'000));
    EXPECT_EQ(d.reset_after, milliseconds(9'000));
}

TEST(LeakyBucket, RetryAfterIsTheTimeUntilTheNextSlotFrees) {
    bucket b(leaky(1, 0.5)); // T = 2000 ms
    ASSERT_TRUE(b.request(0).allowed);
    auto d = b.request(300);
    ASSERT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after, milliseconds(1700));
    EXPECT_EQ(d.reset_after, milliseconds(1700));
    EXPECT_TRUE(b.request(2000).allowed);
}

TEST(LeakyBucket, ResetIsTheTimeUntilTheQueueIsEmpty) {
    bucket b(leaky(10, 5));
    decision d;
    for (int i = 0; i < 4; ++i) {
        d = b.request(0);
    }
    EXPECT_EQ(d.reset_after, milliseconds(800));
    EXPECT_EQ(d.limit, 10);
    EXPECT_EQ(d.window, milliseconds(2000));
}

TEST(LeakyBucket, PoliceModeForwardsAtOnce) {
    bucket b(leaky(3, 1, config::shaping_mode::police));
    for (int i = 0; i < 3; ++i) {
        auto d = b.request(0);
        ASSERT_TRUE(d.allowed);
        EXPECT_EQ(d.delay, milliseconds(0));
    }
    EXPECT_FALSE(b.request(0).allowed);
}

TEST(LeakyBucket, MaxDelayRejectsWaitsThatWouldExceedIt) {
    auto l = leaky(50, 5);
    l.max_delay = milliseconds(1000);
    bucket b(l);
    // Delays 0, 200, ..., 1000 fit; the seventh would wait 1200 ms.
    for (int i = 0; i < 6; ++i) {
        ASSERT_TRUE(b.request(0).allowed) << i;
    }
    auto d = b.request(0);
    ASSERT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after, milliseconds(200));
    EXPECT_EQ(b.state.queue_size, 6);
    EXPECT_TRUE(b.request(200).allowed);
}

// Issue 11 item 16: the smallest rate the loader accepts for a capacity (a full drain of
// max_duration_ms, 3.2e12 ms) still limits: the second request waits a whole slot.
TEST(LeakyBucket, SmallestAcceptedRateStillLimits) {
    // capacity 1: the loader's smallest flowRate is 0.000000000313 (1000 / 3.2e12, rounded up).
    bucket b(leaky(1, 0.000000000313, config::shaping_mode::police));
    auto first = b.request(1'000);
    ASSERT_TRUE(first.allowed);
    const auto slot = 1000.0 / b.limit.flow_rate;
    EXPECT_NEAR(static_cast<double>(first.window.count()), slot, 1);
    for (double t : {1'000.0, 1e6, 1e9, slot / 2}) {
        auto d = b.request(t);
        EXPECT_FALSE(d.allowed) << t;
        EXPECT_GT(d.retry_after, milliseconds(0)) << t;
    }
    EXPECT_TRUE(b.request(1'000 + slot).allowed);
}

// A rate the loader rejects, built in code: every duration saturates instead of wrapping into
// a negative (undefined behaviour before: a double above 9.2e18 cast to int64).
TEST(LeakyBucket, AbsurdRateSaturatesEveryDuration) {
    bucket b(leaky(50, 0.0000000000000001));
    auto first = b.request(0);
    ASSERT_TRUE(first.allowed);
    EXPECT_EQ(first.window, milliseconds::max());
    EXPECT_EQ(first.reset_after, milliseconds::max());
    auto second = b.request(0);
    ASSERT_TRUE(second.allowed);
    EXPECT_EQ(second.delay, milliseconds::max()); // held "forever", never forwarded at once
    for (int i = 2; i < 50; ++i) {
        ASSERT_TRUE(b.request(0).allowed);
    }
    auto refused = b.request(1e9);
    EXPECT_FALSE(refused.allowed);
    EXPECT_EQ(refused.retry_after, milliseconds::max());
}

} // namespace
} // namespace sluice::limiter
