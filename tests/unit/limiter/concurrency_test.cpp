// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/algorithm.hpp"

#include <gtest/gtest.h>

namespace sluice::limiter {
namespace {

config::limit slots(std::int64_t n) {
    config::limit l;
    l.algo = config::algorithm::concurrency;
    l.limit_count = n;
    return l;
}

TEST(Concurrency, AdmitsUpToTheLimitAndReportsFreeSlots) {
    const auto l = slots(2);
    concurrency_state s;
    auto d = concurrency_acquire(s, l);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 1);
    EXPECT_EQ(d.limit, 2);
    EXPECT_TRUE(d.in_flight);
    EXPECT_EQ(d.window.count(), 0);
    EXPECT_EQ(d.reset_after.count(), 0);
    EXPECT_TRUE(concurrency_acquire(s, l).allowed);
    d = concurrency_acquire(s, l);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.remaining, 0);
    EXPECT_EQ(d.retry_after.count(), 0) << "no estimate of when a slot frees";
    EXPECT_EQ(s.in_flight, 2) << "a refusal takes nothing";
}

TEST(Concurrency, ReleaseFreesOneSlotAndNeverGoesBelowZero) {
    const auto l = slots(1);
    state current;
    EXPECT_TRUE(acquire(current, false, l, 0).allowed);
    EXPECT_FALSE(acquire(current, true, l, 0).allowed);
    EXPECT_TRUE(release(current, 0)) << "the key holds no slot any more";
    EXPECT_TRUE(acquire(current, true, l, 0).allowed);
    EXPECT_TRUE(release(current, 0));
    EXPECT_TRUE(release(current, 0));
    EXPECT_EQ(std::get<concurrency_state>(current).in_flight, 0);
}

// A slot of an earlier count of the key (another epoch) gives nothing back to this one.
TEST(Concurrency, ASlotOfAnotherCountGivesNothingBack) {
    state current = concurrency_state{1, 7};
    EXPECT_FALSE(release(current, 6));
    EXPECT_EQ(std::get<concurrency_state>(current).in_flight, 1);
    EXPECT_TRUE(release(current, 7));
}

TEST(Concurrency, ReleasingAnotherAlgorithmsStateChangesNothing) {
    state current = token_bucket_state{3, 0};
    EXPECT_FALSE(release(current, 0));
    EXPECT_EQ(std::get<token_bucket_state>(current).tokens, 3);
}

} // namespace
} // namespace sluice::limiter
