// SPDX-License-Identifier: Apache-2.0
// Cost-weighted limits (issue 15): reservations of cost c and their settlements, in the pure
// functions of src/limiter/ (limiter/cost.hpp and each algorithm's *_acquire / *_settle).
#include "limiter_test_util.hpp"
#include "sluice/limiter/cost.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <string>

namespace sluice::limiter::test {
namespace {

// A key's state with settlements applied as a store applies them.
class costed_key {
public:
    explicit costed_key(config::limit l)
        : limit_(std::move(l)) {}

    decision request(double now_ms, std::int64_t cost = 1) {
        auto next = state_;
        auto d = acquire(next, exists_, limit_, now_ms, cost);
        if (d.allowed) {
            state_ = std::move(next);
            exists_ = true;
        }
        return d;
    }

    std::optional<milliseconds> settle_by(double now_ms, std::int64_t delta) {
        auto next = state_;
        const auto reset = limiter::settle(next, exists_, limit_, now_ms, delta);
        if (reset) {
            state_ = std::move(next);
            exists_ = true;
        }
        return reset;
    }

private:
    config::limit limit_;
    state state_;
    bool exists_ = false;
};

config::limit leaky(std::int64_t capacity, double flow_rate, config::shaping_mode mode) {
    config::limit l;
    l.algo = config::algorithm::leaky_bucket;
    l.capacity = capacity;
    l.flow_rate = flow_rate;
    l.mode = mode;
    return l;
}

// What a peer writes as a cost (a request header, a response header or trailer): a finite
// non-negative number, rounded up; anything else is no figure, never an error or a charge.
TEST(Cost, FiguresAreFiniteNonNegativeNumbersRoundedUp) {
    EXPECT_EQ(parse_cost_figure("60"), 60);
    EXPECT_EQ(parse_cost_figure(" 10\t"), 10);
    EXPECT_EQ(parse_cost_figure("0"), 0);
    EXPECT_EQ(parse_cost_figure("2.5"), 3);
    EXPECT_EQ(parse_cost_figure("1e3"), 1000);
    EXPECT_EQ(parse_cost_figure("1e300"), max_amount) << "saturates";
    // Beyond a double's range, saturated and rounded up as within it: the figure is monotonic.
    EXPECT_EQ(parse_cost_figure("1e309"), max_amount);
    EXPECT_EQ(parse_cost_figure("10e308"), max_amount);
    EXPECT_EQ(parse_cost_figure("0.0001e400"), max_amount);
    EXPECT_EQ(parse_cost_figure(std::string(400, '9')), max_amount);
    EXPECT_EQ(parse_cost_figure(std::string(400, '9') + "e-50"), max_amount) << "1e350";
    EXPECT_EQ(parse_cost_figure("1e99999999999999999999"), max_amount);
    EXPECT_EQ(parse_cost_figure("1e-400"), 1);
    EXPECT_EQ(parse_cost_figure("123e-400"), 1);
    EXPECT_EQ(parse_cost_figure("0." + std::string(400, '0') + "1"), 1);
    EXPECT_EQ(parse_cost_figure("0e309"), 0) << "zero, however written";
    for (const char* bad : {"",
                            " ",
                            "abc",
                            "-5",
                            "-0.5",
                            "-1e309",
                            "inf",
                            "nan",
                            "+3",
                            "5x",
                            "5 5",
                            "0x10",
                            "1e309x"}) {
        EXPECT_EQ(parse_cost_figure(bad), std::nullopt) << bad;
    }
}

TEST(Cost, AmountsAreClampedToWhereDoublesAreExact) {
    EXPECT_EQ(clamp_cost(0), 1);
    EXPECT_EQ(clamp_cost(-5), 1);
    EXPECT_EQ(clamp_cost(std::numeric_limits<std::int64_t>::max()), max_amount);
    EXPECT_EQ(clamp_delta(std::numeric_limits<std::int64_t>::min()), -max_amount);
    EXPECT_EQ(settle_level(3, -10), 0);
    EXPECT_EQ(settle_level(max_amount - 1, max_amount), max_amount);
    EXPECT_EQ(settle_level(5, 7), 12);
}

TEST(TokenBucketCost, ARefundMakesRoomForTheNextReservation) {
    costed_key k(token(100, 10)); // a token every 100 ms
    const auto first = k.request(0, 60);
    ASSERT_TRUE(first.allowed);
    EXPECT_EQ(first.remaining, 40);
    EXPECT_FALSE(k.request(0, 80).allowed);
    EXPECT_EQ(k.settle_by(0, -50), milliseconds(1000)); // 10 tokens short of full
    const auto second = k.request(0, 80);
    ASSERT_TRUE(second.allowed);
    EXPECT_EQ(second.remaining, 10);
    EXPECT_EQ(second.reset_after, milliseconds(9000));
}

TEST(TokenBucketCost, ADebtRefusesUntilPaidOffAtTheRefillRate) {
    costed_key k(token(100, 10));
    ASSERT_TRUE(k.request(0, 10).allowed);
    EXPECT_EQ(k.settle_by(0, 140), milliseconds(15'000)); // tokens -50
    const auto refused = k.request(0);
    EXPECT_FALSE(refused.allowed);
    EXPECT_EQ(refused.remaining, 0) << "a debt never shows as negative room";
    EXPECT_EQ(refused.retry_after, milliseconds(5100)); // 51 tokens to come back
    EXPECT_EQ(k.request(0, 10).retry_after, milliseconds(6000));
    EXPECT_FALSE(k.request(5099).allowed);
    EXPECT_TRUE(k.request(5100).allowed);
}

TEST(TokenBucketCost, MoreThanTheCapacityNeverFits) {
    costed_key k(token(10, 1));
    const auto d = k.request(0, 11);
    EXPECT_FALSE(d.allowed);
    EXPECT_TRUE(d.never_fits);
    EXPECT_EQ(d.retry_after, milliseconds(0));
    EXPECT_EQ(d.remaining, 10) << "nothing taken";
    const auto exact = k.request(0, 10);
    EXPECT_TRUE(exact.allowed);
    EXPECT_FALSE(exact.never_fits);
}

TEST(TokenBucketCost, ARefundNeverFillsAboveCapacity) {
    costed_key k(token(10, 1));
    ASSERT_TRUE(k.request(0, 5).allowed);
    k.settle_by(0, -8);
    EXPECT_TRUE(k.request(0, 10).allowed);
    EXPECT_FALSE(k.request(0).allowed);
}

TEST(LeakyBucketCost, ShapingHoldsARequestForItsSlots) {
    costed_key k(leaky(10, 5, config::shaping_mode::shape)); // T = 200 ms
    EXPECT_EQ(k.request(0, 3).delay, milliseconds(400));     // slots 1..3: the last at 2 T
    EXPECT_EQ(k.request(0).delay, milliseconds(600));        // slot 4
    EXPECT_EQ(k.request(0, 3).delay, milliseconds(1200));    // slots 5..7
    const auto full = k.request(0, 4);
    EXPECT_FALSE(full.allowed);
    EXPECT_EQ(full.retry_after, milliseconds(200)); // one slot must leak first
    EXPECT_EQ(k.request(200, 4).delay, milliseconds(1800));
}

TEST(LeakyBucketCost, ADebtDrainsAtTheFlowRate) {
    costed_key k(leaky(5, 1, config::shaping_mode::police));
    ASSERT_TRUE(k.request(0, 2).allowed);
    k.settle_by(0, 6); // queue 8 of 5
    EXPECT_EQ(k.request(0).retry_after, milliseconds(4000));
    EXPECT_FALSE(k.request(3999).allowed);
    EXPECT_TRUE(k.request(4000).allowed);
    k.settle_by(4000, -100); // never below an empty queue
    EXPECT_EQ(k.request(4000, 5).remaining, 0);
}

TEST(FixedWindowCost, RefundsNeverGoBelowZeroAndLateOnesAdjustTheNewWindow) {
    costed_key k(windowed(config::algorithm::fixed_window, 10, milliseconds(1000)));
    ASSERT_TRUE(k.request(0, 6).allowed);
    k.settle_by(100, -20);
    EXPECT_TRUE(k.request(200, 10).allowed);
    EXPECT_FALSE(k.request(200).allowed);
    EXPECT_TRUE(k.request(200, 11).never_fits);
    // Settled after its window: the new window's count starts at 0 and stays there.
    EXPECT_EQ(k.settle_by(1100, -5), milliseconds(900));
    EXPECT_EQ(k.request(1100, 10).remaining, 0);
    k.settle_by(1200, 3); // a debt until the window ends
    const auto refused = k.request(1200);
    EXPECT_FALSE(refused.allowed);
    EXPECT_EQ(refused.retry_after, milliseconds(800));
    EXPECT_TRUE(k.request(2000, 10).allowed);
}

// The weight in the window (now - window, now] plus the cost must fit; a refused cost retries
// when enough of the oldest weight has left for all of it.
TEST(SlidingWindowCost, ACostWaitsForRoomForAllOfIt) {
    costed_key k(windowed(config::algorithm::sliding_window, 10, milliseconds(1000)));
    ASSERT_TRUE(k.request(0, 4).allowed);
    ASSERT_TRUE(k.request(200, 3).allowed);
    ASSERT_TRUE(k.request(400, 3).allowed);
    EXPECT_EQ(k.request(500).retry_after, milliseconds(500));    // the 4 at 0 leaves at 1000
    EXPECT_EQ(k.request(500, 5).retry_after, milliseconds(700)); // and the 3 at 200 at 1200
    EXPECT_FALSE(k.request(1199, 5).allowed);
    const auto d = k.request(1200, 5);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 2);
    const auto never = k.request(1200, 11);
    EXPECT_TRUE(never.never_fits);
    EXPECT_EQ(never.retry_after, milliseconds(0));
}

TEST(SlidingWindowCost, RefundsTakeFromTheOldestAndChargesAreLoggedAtTheSettlement) {
    costed_key k(windowed(config::algorithm::sliding_window, 10, milliseconds(1000)));
    ASSERT_TRUE(k.request(0, 6).allowed);
    ASSERT_TRUE(k.request(500, 4).allowed);
    // Weight 10 - 5: the 6 at 0 keeps 1; until the 4 at 500 leaves at 1500.
    EXPECT_EQ(k.settle_by(600, -5), milliseconds(900));
    ASSERT_TRUE(k.request(600, 5).allowed);
    EXPECT_FALSE(k.request(999).allowed);
    EXPECT_TRUE(k.request(1000).allowed) << "the 1 left of the 6 at 0 has left";
    EXPECT_FALSE(k.request(1000).allowed);
    // Never below an empty log.
    EXPECT_EQ(k.settle_by(1000, -100), milliseconds(0));
    ASSERT_TRUE(k.request(1000, 10).allowed);
    // A charge is logged at the settlement: weight 15, a debt of 5 that leaves the window one
    // window after the settlement, after the 10 logged at 1000.
    EXPECT_EQ(k.settle_by(1100, 5), milliseconds(1000));
    EXPECT_EQ(k.request(1100).retry_after, milliseconds(900));
    EXPECT_FALSE(k.request(1999).allowed);
    EXPECT_TRUE(k.request(2000, 5).allowed);
    EXPECT_EQ(k.request(2000).retry_after, milliseconds(100));
    EXPECT_TRUE(k.request(2100, 5).allowed);
}

TEST(AlgorithmSettle, WhatHasNothingToStore) {
    state s;
    // A refund on no state, a zero delta, an algorithm that does not settle.
    EXPECT_FALSE(settle(s, false, token(10, 1), 0, -3));
    EXPECT_FALSE(settle(s, false, token(10, 1), 0, 0));
    config::limit slots;
    slots.algo = config::algorithm::concurrency;
    slots.limit_count = 2;
    EXPECT_FALSE(settle(s, false, slots, 0, 5));
    // A charge on no state starts from a full bucket.
    EXPECT_EQ(settle(s, false, token(10, 1), 0, 4), milliseconds(4000));
    EXPECT_EQ(std::get<token_bucket_state>(s).tokens, 6);
}

// A key holding another algorithm's state belongs to the limit that wrote it (a reload changed
// the limit while the settled request ran): neither a refund nor a charge touches it. A key
// without state takes a charge as a fresh state's debt.
TEST(AlgorithmSettle, AnotherAlgorithmsStateIsLeftAlone) {
    state s = fixed_window_state{7, 0};
    EXPECT_FALSE(settle(s, true, token(10, 1), 0, -3)) << "a refund on it gives nothing back";
    EXPECT_TRUE(std::holds_alternative<fixed_window_state>(s)) << "and leaves it alone";
    EXPECT_FALSE(settle(s, true, token(10, 1), 0, 3)) << "nor does a charge take it";
    EXPECT_EQ(std::get<fixed_window_state>(s).count, 7);
    state fresh;
    EXPECT_TRUE(settle(fresh, false, token(10, 1), 0, 3));
    EXPECT_EQ(std::get<token_bucket_state>(fresh).tokens, 7);
}

} // namespace
} // namespace sluice::limiter::test
