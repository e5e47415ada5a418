// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/algorithm.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace sluice::limiter {
namespace {

using std::chrono::milliseconds;

config::limit token(std::int64_t capacity, double refill_rate) {
    config::limit l;
    l.algo = config::algorithm::token_bucket;
    l.capacity = capacity;
    l.refill_rate = refill_rate;
    return l;
}

config::limit windowed(config::algorithm algo, std::int64_t count, milliseconds window) {
    config::limit l;
    l.algo = algo;
    l.limit_count = count;
    l.window = window;
    return l;
}

// A key's stored state, committed only on admission, as a store keeps it.
class key_state {
public:
    explicit key_state(config::limit l)
        : limit_(std::move(l)) {}

    decision request(double now_ms) {
        auto next = state_;
        auto d = acquire(next, exists_, limit_, now_ms);
        if (d.allowed) {
            state_ = std::move(next);
            exists_ = true;
        }
        return d;
    }

private:
    config::limit limit_;
    state state_;
    bool exists_ = false;
};

TEST(TokenBucket, AllowsABurstOfCapacityThenTheRefillRate) {
    key_state k(token(10, 2)); // one token every 500 ms
    for (int i = 0; i < 10; ++i) {
        auto d = k.request(0);
        ASSERT_TRUE(d.allowed);
        EXPECT_EQ(d.delay, milliseconds(0)); // a token bucket never holds requests
    }
    auto rejected = k.request(100);
    ASSERT_FALSE(rejected.allowed);
    EXPECT_EQ(rejected.retry_after, milliseconds(400));
    EXPECT_TRUE(k.request(500).allowed);
    EXPECT_FALSE(k.request(999).allowed);
    EXPECT_TRUE(k.request(1000).allowed);
}

TEST(TokenBucket, RefillDoesNotDrift) {
    // Steady 2 x refillRate for 60 s: refillRate x 60 plus the initial burst, no fewer.
    key_state k(token(5, 4));
    std::int64_t admitted = 0;
    for (double t = 0; t < 60'000; t += 125) {
        admitted += k.request(t).allowed ? 1 : 0;
    }
    EXPECT_GE(admitted, 240);
    EXPECT_LE(admitted, 245);
}

TEST(TokenBucket, FullBucketDoesNotOverfill) {
    key_state k(token(3, 1));
    ASSERT_TRUE(k.request(0).allowed);
    // A long idle period refills to capacity, not beyond.
    int admitted = 0;
    for (int i = 0; i < 10; ++i) {
        admitted += k.request(100'000).allowed ? 1 : 0;
    }
    EXPECT_EQ(admitted, 3);
}

TEST(FixedWindow, CountsPerAlignedWindow) {
    key_state k(windowed(config::algorithm::fixed_window, 3, milliseconds(1000)));
    EXPECT_TRUE(k.request(1000).allowed);
    EXPECT_TRUE(k.request(1500).allowed);
    auto third = k.request(1999);
    EXPECT_TRUE(third.allowed);
    EXPECT_EQ(third.remaining, 0);
    EXPECT_EQ(third.reset_after, milliseconds(1));
    auto fourth = k.request(1999);
    EXPECT_FALSE(fourth.allowed);
    EXPECT_EQ(fourth.retry_after, milliseconds(1));
    EXPECT_TRUE(k.request(2000).allowed); // a new window
}

TEST(FixedWindow, RejectionsAreNotCounted) {
    key_state k(windowed(config::algorithm::fixed_window, 1, milliseconds(1000)));
    EXPECT_TRUE(k.request(0).allowed);
    for (int i = 0; i < 5; ++i) {
        EXPECT_FALSE(k.request(10).allowed);
    }
    auto next = k.request(1000);
    EXPECT_TRUE(next.allowed);
    EXPECT_EQ(next.remaining, 0);
}

TEST(SlidingWindow, NeverAdmitsMoreThanLimitInAnyWindow) {
    const auto window = milliseconds(1000);
    const std::int64_t limit = 7;
    key_state k(windowed(config::algorithm::sliding_window, limit, window));
    std::mt19937 random(42);
    std::uniform_int_distribution<int> gap(0, 60);
    std::vector<double> admitted;
    double t = 0;
    for (int i = 0; i < 5000; ++i) {
        t += gap(random);
        if (k.request(t).allowed) {
            admitted.push_back(t);
        }
    }
    ASSERT_GT(admitted.size(), 100u);
    // Sweep: every window [a_i, a_i + window) starting at an admission holds at most `limit`.
    for (std::size_t i = 0, j = 0; i < admitted.size(); ++i) {
        while (j < admitted.size() && admitted[j] < admitted[i] + 1000) {
            ++j;
        }
        ASSERT_LE(static_cast<std::int64_t>(j - i), limit) << "window starting at " << admitted[i];
    }
}

TEST(SlidingWindow, RetryAfterIsWhenTheOldestLeaves) {
    key_state k(windowed(config::algorithm::sliding_window, 2, milliseconds(1000)));
    EXPECT_TRUE(k.request(100).allowed);
    EXPECT_TRUE(k.request(300).allowed);
    auto d = k.request(400);
    ASSERT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after, milliseconds(700));
    EXPECT_FALSE(k.request(1099).allowed);
    EXPECT_TRUE(k.request(1100).allowed);
}

TEST(Algorithm, StateOfAnotherAlgorithmCountsAsNone) {
    state s = fixed_window_state{5, 0};
    auto l = token(2, 1);
    auto d = acquire(s, true, l, 0);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 1);
    EXPECT_TRUE(std::holds_alternative<token_bucket_state>(s));
}

} // namespace
} // namespace sluice::limiter
