// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/errc.hpp"
#include "sluice/http/verdict.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace sluice::http {
namespace {

using std::chrono::milliseconds;
using kind = verdict::kind;

limiter::decision admit(std::int64_t remaining, milliseconds delay = milliseconds(0)) {
    limiter::decision d;
    d.allowed = true;
    d.limit = 10;
    d.remaining = remaining;
    d.delay = delay;
    return d;
}

limiter::decision refuse(milliseconds retry_after) {
    limiter::decision d;
    d.allowed = false;
    d.limit = 10;
    d.remaining = 0;
    d.retry_after = retry_after;
    return d;
}

config::limit enforced() {
    return config::limit{};
}

config::limit dry_run() {
    config::limit l;
    l.dry_run = true;
    return l;
}

store::outcome outcome_of(std::vector<limiter::decision> decisions) {
    store::outcome o;
    o.decisions.assign(decisions.begin(), decisions.end());
    return o;
}

config::limit slots(config::shaping_mode mode, std::optional<milliseconds> max_delay = {}) {
    config::limit l;
    l.algo = config::algorithm::concurrency;
    l.limit_count = 2;
    l.mode = mode;
    l.max_delay = max_delay;
    return l;
}

limiter::decision no_slot() {
    limiter::decision d;
    d.limit = 2;
    d.in_flight = true;
    return d;
}

// CONCURRENCY in mode shape: a refusal by it alone means "wait for a slot", naming the limit
// to wait for; with another limit refusing too, or in police mode, or with max-delay 0, it is a
// rejection, with no Retry-After unless a limit with a clock refused.
TEST(Decide, AConcurrencyRefusalQueuesInShapeModeOnly) {
    const std::vector shaped{enforced(), slots(config::shaping_mode::shape)};
    auto v = decide(shaped, outcome_of({admit(5), no_slot()}), config::failure_mode::open);
    EXPECT_EQ(v.what, kind::queued);
    EXPECT_EQ(v.wait_for, 1);

    const std::vector policed{slots(config::shaping_mode::police)};
    v = decide(policed, outcome_of({no_slot()}), config::failure_mode::open);
    EXPECT_EQ(v.what, kind::rejected);
    EXPECT_EQ(v.retry_after, 0) << "no honest estimate: no Retry-After";
    EXPECT_EQ(v.refused_by, 0);

    const std::vector never_wait{slots(config::shaping_mode::shape, milliseconds(0))};
    v = decide(never_wait, outcome_of({no_slot()}), config::failure_mode::open);
    EXPECT_EQ(v.what, kind::rejected);

    v = decide(
        shaped, outcome_of({refuse(milliseconds(1'500)), no_slot()}), config::failure_mode::open);
    EXPECT_EQ(v.what, kind::rejected);
    EXPECT_EQ(v.retry_after, 2) << "the window's wait is a real estimate";
    EXPECT_EQ(v.wait_for, -1);
}

// At rate-limit.max-held, a request that would have waited for a slot is refused for the cap.
TEST(RefusedOnlyForWaiting, AConcurrencyLimitThatWouldHaveQueued) {
    const std::vector configured{slots(config::shaping_mode::shape)};
    EXPECT_TRUE(refused_only_for_waiting(configured, outcome_of({no_slot()})));
    const std::vector policed{slots(config::shaping_mode::police)};
    EXPECT_FALSE(refused_only_for_waiting(policed, outcome_of({no_slot()})));
}

TEST(Decide, AllowsWhenEveryLimitAdmits) {
    const std::vector limits{enforced(), enforced()};
    const auto v = decide(limits, outcome_of({admit(7), admit(3)}), config::failure_mode::open);
    EXPECT_EQ(v.what, kind::allowed);
    EXPECT_EQ(v.delay, milliseconds(0));
    EXPECT_EQ(v.headers_from, 1); // the lowest remaining
}

TEST(Decide, RejectsWhenAnEnforcedLimitRefusesWithTheLongestRetry) {
    const std::vector limits{enforced(), enforced(), enforced()};
    const auto v =
        decide(limits,
               outcome_of({refuse(milliseconds(1'200)), admit(5), refuse(milliseconds(2'001))}),
               config::failure_mode::open);
    EXPECT_EQ(v.what, kind::rejected);
    EXPECT_EQ(v.retry_after, 3);
    EXPECT_EQ(v.refused_by, 2);   // the refusing limit with the longest wait is named in the 429
    EXPECT_EQ(v.headers_from, 0); // remaining 0, first of the ties
}

TEST(Decide, RetryAfterIsAtLeastOneSecond) {
    const std::vector limits{enforced()};
    const auto v =
        decide(limits, outcome_of({refuse(milliseconds(0))}), config::failure_mode::open);
    EXPECT_EQ(v.what, kind::rejected);
    EXPECT_EQ(v.retry_after, 1);
}

TEST(Decide, ADryRunLimitNeitherRejectsNorDelays) {
    const std::vector limits{dry_run(), enforced()};
    const auto refused = decide(
        limits, outcome_of({refuse(milliseconds(5'000)), admit(4)}), config::failure_mode::open);
    EXPECT_EQ(refused.what, kind::allowed);
    EXPECT_EQ(refused.headers_from, 1); // headers describe the enforced limit

    const auto delayed = decide(
        limits, outcome_of({admit(1, milliseconds(900)), admit(4)}), config::failure_mode::open);
    EXPECT_EQ(delayed.what, kind::allowed);
    EXPECT_EQ(delayed.delay, milliseconds(0));
}

TEST(Decide, DelaysByTheLongestEnforcedWait) {
    const std::vector limits{enforced(), enforced()};
    const auto v = decide(limits,
                          outcome_of({admit(8, milliseconds(200)), admit(2, milliseconds(1'400))}),
                          config::failure_mode::open);
    EXPECT_EQ(v.what, kind::delayed);
    EXPECT_EQ(v.delay, milliseconds(1'400));
}

TEST(Decide, HeadersComeFromDryRunLimitsWhenThereIsNothingElse) {
    const std::vector limits{dry_run(), dry_run()};
    const auto v = decide(limits, outcome_of({admit(6), admit(2)}), config::failure_mode::open);
    EXPECT_EQ(v.what, kind::allowed);
    EXPECT_EQ(v.headers_from, 1);
}

TEST(Decide, FollowsTheFailureModeOnAStoreError) {
    const std::vector limits{enforced()};
    store::outcome failed;
    failed.ec = make_error_code(errc::redis_timeout);

    const auto open = decide(limits, failed, config::failure_mode::open);
    EXPECT_EQ(open.what, kind::failed_open);
    EXPECT_EQ(open.headers_from, -1);

    const auto closed = decide(limits, failed, config::failure_mode::closed);
    EXPECT_EQ(closed.what, kind::failed_closed);
    EXPECT_EQ(closed.retry_after, 1);

    EXPECT_EQ(decide(limits, failed, config::failure_mode::local).what, kind::failed_open);
}

TEST(Decide, TreatsAMissingDecisionAsAStoreError) {
    const std::vector limits{enforced(), enforced()};
    const auto v = decide(limits, outcome_of({admit(1)}), config::failure_mode::closed);
    EXPECT_EQ(v.what, kind::failed_closed);
}

TEST(VerdictKind, HasAccessLogWords) {
    EXPECT_EQ(to_string(kind::allowed), "allowed");
    EXPECT_EQ(to_string(kind::delayed), "delayed");
    EXPECT_EQ(to_string(kind::rejected), "rejected");
    // Spelled as the metric's decision label spells them.
    EXPECT_EQ(to_string(kind::failed_open), "failed_open");
    EXPECT_EQ(to_string(kind::failed_closed), "failed_closed");
}

// With waiting forbidden (rate-limit.max-held reached), a shaping limit that refused with room
// would have held the request: the cap refuses it (503), not its limits (429).
TEST(RefusedOnlyForWaiting, AShapingLimitWithRoomWouldHaveHeld) {
    const std::vector limits{enforced()}; // LEAKY_BUCKET, mode shape by default
    auto waited = refuse(milliseconds(400));
    waited.remaining = 3;
    EXPECT_TRUE(refused_only_for_waiting(limits, outcome_of({waited})));
}

TEST(RefusedOnlyForWaiting, AFullBucketOrAnotherLimitRefusesAnyway) {
    const std::vector limits{enforced()};
    EXPECT_FALSE(refused_only_for_waiting(limits, outcome_of({refuse(milliseconds(400))})));

    auto police = enforced();
    police.mode = config::shaping_mode::police;
    auto waited = refuse(milliseconds(400));
    waited.remaining = 3;
    EXPECT_FALSE(refused_only_for_waiting(std::vector{police}, outcome_of({waited})));

    // Two limits: one would have held, the other is full.
    EXPECT_FALSE(refused_only_for_waiting(std::vector{enforced(), enforced()},
                                          outcome_of({waited, refuse(milliseconds(200))})));
    EXPECT_TRUE(refused_only_for_waiting(std::vector{enforced(), enforced()},
                                         outcome_of({waited, admit(5)})));
    EXPECT_FALSE(refused_only_for_waiting(std::vector{enforced()}, outcome_of({admit(5)})));
}

TEST(RefusedOnlyForWaiting, AWaitBeyondMaxDelayIsRefusedAnyway) {
    auto limit = enforced();
    limit.max_delay = milliseconds(400);
    auto waited = refuse(milliseconds(400));
    waited.remaining = 3;
    EXPECT_TRUE(refused_only_for_waiting(std::vector{limit}, outcome_of({waited})));
    waited.retry_after = milliseconds(401);
    EXPECT_FALSE(refused_only_for_waiting(std::vector{limit}, outcome_of({waited})));
}

// A request of cost 5 (issue 15) had room only when 5 remained: with 2 left its bucket refused it
// for want of room, which the cap did not cause (429, not 503).
TEST(RefusedOnlyForWaiting, RoomIsRoomForTheRequestsCost) {
    auto refused = refuse(milliseconds(400));
    refused.remaining = 2;
    const std::vector<std::int64_t> five{5};
    EXPECT_FALSE(refused_only_for_waiting(std::vector{enforced()}, outcome_of({refused}), five));
    refused.remaining = 5;
    EXPECT_TRUE(refused_only_for_waiting(std::vector{enforced()}, outcome_of({refused}), five));
}

TEST(RefusedOnlyForWaiting, IgnoresDryRunLimitsAndStoreErrors) {
    auto waited = refuse(milliseconds(400));
    waited.remaining = 3;
    EXPECT_FALSE(refused_only_for_waiting(std::vector{dry_run()}, outcome_of({waited})));
    auto failed = outcome_of({waited});
    failed.ec = make_error_code(errc::redis_timeout);
    EXPECT_FALSE(refused_only_for_waiting(std::vector{enforced()}, failed));
}

// A cost that can never fit a limit (issue 15) is refused without Retry-After, naming that
// limit, even when another limit refuses with a wait: no wait would admit the request.
TEST(Decide, ACostThatNeverFitsIsRefusedWithoutRetryAfterNamingItsLimit) {
    auto never = refuse(milliseconds(0));
    never.never_fits = true;
    const std::vector<config::limit> limits{enforced(), enforced()};
    const auto v =
        decide(limits, outcome_of({refuse(milliseconds(4000)), never}), config::failure_mode::open);
    EXPECT_EQ(v.what, kind::rejected);
    EXPECT_TRUE(v.never_fits);
    EXPECT_EQ(v.refused_by, 1);
    EXPECT_EQ(v.retry_after, 0);
    // Beside a CONCURRENCY limit that would wait for a slot: refused, not queued.
    const std::vector<config::limit> with_slots{slots(config::shaping_mode::shape), enforced()};
    EXPECT_EQ(decide(with_slots, outcome_of({no_slot(), never}), config::failure_mode::open).what,
              kind::rejected);
}

} // namespace
} // namespace sluice::http
