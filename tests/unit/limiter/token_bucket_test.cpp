// SPDX-License-Identifier: Apache-2.0
// TOKEN_BUCKET (src/limiter/token_bucket.cpp).
#include "limiter_test_util.hpp"

#include <gtest/gtest.h>

namespace sluice::limiter::test {
namespace {

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

} // namespace
} // namespace sluice::limiter::test
