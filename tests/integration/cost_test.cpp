// SPDX-License-Identifier: Apache-2.0
// Cost-weighted limits (issue 15), from headers: a request reserves the cost its X-Cost header
// names before it is forwarded, and is settled by what the response's X-Usage (header or
// trailer) says it really cost, once the response is over; a reservation larger than the
// capacity is refused at once. Through the real binary, on both stores.

#include "integration_util.hpp"
#include "support/admin_client.hpp"
#include "support/arrivals.hpp"
#include "support/limit_probe.hpp"
#include "support/limited_sluice.hpp"
#include "support/redis_server.hpp"
#include "support/store_param_test.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::test {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

/**
 * A refill too slow to count here: one token per 36 s. A bucket refills whole tokens only
 * (leak_and_admit, src/limiter/leaky_bucket.cpp and limits.lua), the first one 36 s after its
 * first charge, so a test shorter than that reads exactly the figures its charges and
 * settlements leave, and may wait seconds (settle_deadline) for a settlement to land: without
 * it, no refill makes the figures it waits for.
 */
constexpr const char* negligible_refill = "100r/h";

/// How long a test waits for a settlement to land (it lands just after the response's end).
constexpr auto settle_deadline = 5s;

/// Two rules on a token bucket of 100 tokens (refill `refill`, a rate as the YAML writes it),
/// keyed globally: /keep/* keeps a reservation whose response carries no figure, /refund/*
/// gives it back.
std::string cost_rules(std::string_view refill) {
    std::string out = "  rules:\n";
    for (const char* mode : {"keep", "refund"}) {
        out += fmt::format(
            "    - name: {0}\n"
            "      match: {{ path: /{0}/* }}\n"
            "      limits:\n"
            "        - algorithm: TOKEN_BUCKET\n"
            "          capacity: 100\n"
            "          refillRate: {1}\n"
            "          key: [global]\n"
            "          cost: {{ request: header:X-Cost, default: 5, response: header:X-Usage, "
            "on-missing: {0} }}\n",
            mode,
            refill);
    }
    return out;
}

/// An upstream that reports as usage what the request asks it to: `X-Reply-Usage` as a header,
/// `X-Reply-Trailer` as a trailer of a chunked body, neither: no figure.
recording_upstream usage_upstream() {
    return recording_upstream([](const recorded_request& request) {
        response_plan plan;
        if (const auto usage = request.header("X-Reply-Usage")) {
            plan.headers.emplace_back("X-Usage", *usage);
        }
        if (const auto usage = request.header("X-Reply-Trailer")) {
            plan.chunked = true;
            plan.headers.emplace_back("Trailer", "X-Usage");
            plan.trailer = "X-Usage: " + *usage + "\r\n";
        }
        return plan;
    });
}

/// The tokens left as the response's RateLimit field says (`r=`), or -1.
long long remaining(const http_response& response) {
    return view_of(response).remaining.value_or(-1);
}

/**
 * The issue's refund, on a limit of 100 under `prefix` (`/keep`, ...): a reservation of 60 whose
 * response reports 10 used leaves 40, then gives 50 back, so a reservation of 80 fits; the 80 is
 * tried until the refund has landed (a refused try charges nothing), for at most settle_deadline.
 * The limit must not give 40 back meanwhile (negligible_refill; a one-minute window). Returns
 * the 80's response; fails the test when it never fits.
 */
http_response refund_then_80(std::uint16_t port, const std::string& prefix) {
    const auto first = get(port, prefix + "/a", {{"X-Cost", "60"}, {"X-Reply-Usage", "10"}});
    EXPECT_EQ(first.status, 200u) << first.body;
    EXPECT_EQ(remaining(first), 40);
    http_response second;
    EXPECT_TRUE(eventually(
        [&] {
            second = get(port, prefix + "/b", {{"X-Cost", "80"}, {"X-Reply-Usage", "80"}});
            return second.status == 200;
        },
        settle_deadline))
        << "the refund did not land: " << second.status;
    return second;
}

class CostTest : public store_param_test {
protected:
    std::string yaml(const recording_upstream& upstream, std::string_view refill) const {
        return compose_yaml(upstream.url(), rate_limit(cost_rules(refill)));
    }
};

// The issue's example: a reservation of 60 leaves 40; the response reports 10, so 50 come back,
// and a reservation of 80 right after is admitted (without the refund: 40, and no refill to speak
// of). A reservation of 200 can never fit 100: refused at once, never forwarded, without
// Retry-After, its body naming the cost and the capacity.
TEST_P(CostTest, ARefundMakesRoomAndANeverFittingReservationIsRefusedAtOnce) {
    auto upstream = usage_upstream();
    sluice_process sluice(yaml(upstream, negligible_refill));
    const auto second = refund_then_80(sluice.port(), "/keep");
    ASSERT_EQ(second.status, 200u);
    EXPECT_EQ(remaining(second), 10) << "40 + 50 refunded - 80";

    const auto huge = get(sluice.port(), "/keep/c", {{"X-Cost", "200"}});
    EXPECT_EQ(huge.status, 429u);
    EXPECT_FALSE(huge.header("Retry-After").has_value());
    EXPECT_NE(huge.body.find(R"("retry_after":null,"cost":200,"capacity":100)"), std::string::npos)
        << huge.body;
    EXPECT_EQ(upstream.requests().size(), 2u) << "the never-fitting request went upstream";
}

// A response that reports more than was reserved leaves a debt: 10 reserved, 450 used, so the
// bucket owes 350 and a request of 1 is refused until 351 tokens have come back (3.51 s at
// 100/s from the first charge), then admitted. The debt lasts seconds so that the test can wait
// that long for the settlement to land.
TEST_P(CostTest, ADebtRefusesUntilPaidOffAtTheRefillRate) {
    auto upstream = usage_upstream();
    sluice_process sluice(yaml(upstream, "100"));
    constexpr auto paid_off = 3510ms; // 351 tokens at 100/s
    const auto sent = clock_type::now();
    const auto spent = get(sluice.port(), "/keep/a", {{"X-Cost", "10"}, {"X-Reply-Usage", "450"}});
    ASSERT_EQ(spent.status, 200u);
    const auto answered = clock_type::now();
    // The first charge was made in [sent, answered]: the debt stands until paid_off after it.
    ASSERT_TRUE(eventually(
        [&] {
            return get(sluice.port(), "/keep/b", {{"X-Cost", "1"}}).status == 429;
        },
        2s))
        << "no debt";
    const auto asked = clock_type::now();
    const auto refused = get(sluice.port(), "/keep/b", {{"X-Cost", "1"}});
    const auto refused_at = clock_type::now();
    ASSERT_EQ(refused.status, 429u) << "the debt was paid off within 2 s";
    // What is left of the debt, rounded up to whole seconds: decided in [asked, refused_at], on a
    // debt that ends paid_off after a charge in [sent, answered].
    const auto whole_seconds_up = [](clock_type::duration d) {
        return static_cast<long>(std::chrono::ceil<std::chrono::seconds>(d).count());
    };
    ASSERT_TRUE(refused.header("Retry-After").has_value());
    const long retry = std::stol(*refused.header("Retry-After"));
    EXPECT_GE(retry, whole_seconds_up(sent + paid_off - refused_at - store_clock_slack));
    EXPECT_LE(retry, whole_seconds_up(answered + paid_off - asked + store_clock_slack));
    // The body names the limit, the cost asked and what remains (nothing: a debt reads as 0).
    EXPECT_NE(refused.body.find(fmt::format(R"("limit":"keep","limit_index":0,"retry_after":{},)"
                                            R"("cost":1,"remaining":0}})",
                                            retry)),
              std::string::npos)
        << refused.body;
    ASSERT_TRUE(eventually(
        [&] {
            return get(sluice.port(), "/keep/b", {{"X-Cost", "1"}}).status == 200;
        },
        10s));
    const auto paid = clock_type::now() - answered;
    // Never before the debt is paid off (the charge was made at `sent` at the earliest); then
    // within a probe or two, which 300 ms allows for on a sanitized build. A debt forgiven, or
    // kept only up to the capacity, admits within 0.1 s of the settlement; one paid at half the
    // rate, at 7 s.
    EXPECT_GE(paid, paid_off - (answered - sent) - store_clock_slack);
    EXPECT_LT(paid, paid_off + 300ms);
}

// A shaped leaky bucket's debt holds: capacity 100 draining 100/s, a request reserving 10 that
// reports 450 leaves a queue of 450, far above capacity. A request of 1 is refused until the
// queue has drained to 99 (351 slots of 10 ms: 3.51 s after the first charge), then admitted and
// held behind those 99 slots: 990 ms, less what drained between the last refusal and the
// admission.
TEST_P(CostTest, AShapedDebtRefusesThenHoldsUntilTheQueueHasDrained) {
    auto upstream = usage_upstream();
    const std::string rules =
        "  rules:\n"
        "    - name: queue\n"
        "      match: { path: /queue/* }\n"
        "      limits:\n"
        "        - algorithm: LEAKY_BUCKET\n"
        "          capacity: 100\n"
        "          flowRate: 100\n"
        "          key: [global]\n"
        "          cost: { request: header:X-Cost, response: header:X-Usage }\n";
    sluice_process sluice(compose_yaml(upstream.url(), rate_limit(rules)));
    constexpr auto drained = 3510ms; // 351 slots of 10 ms
    const auto sent = clock_type::now();
    ASSERT_EQ(get(sluice.port(), "/queue/a", {{"X-Cost", "10"}, {"X-Reply-Usage", "450"}}).status,
              200u);
    const auto answered = clock_type::now();
    ASSERT_TRUE(eventually(
        [&] {
            return get(sluice.port(), "/queue/b", {{"X-Cost", "1"}}).status == 429;
        },
        2s))
        << "no debt";
    std::chrono::steady_clock::duration held{};
    ASSERT_TRUE(eventually(
        [&] {
            const auto probe_sent = clock_type::now();
            const auto r = get(sluice.port(), "/queue/b", {{"X-Cost", "1"}});
            held = clock_type::now() - probe_sent;
            return r.status == 200;
        },
        10s));
    const auto admitted_after = clock_type::now() - answered - held;
    // The admitted probe was sent `admitted_after` after the first answer; it was admitted no
    // sooner than `drained` after the first charge (made at `sent` at the earliest), and the
    // probe before it was refused no later than `drained` after `answered`. 300 ms allows for a
    // probe's round trips on a sanitized build. A debt forgiven or kept only up to the capacity
    // admits within 0.1 s of the settlement; one drained at half the rate, at 7 s.
    EXPECT_GE(admitted_after, drained - (answered - sent) - 300ms);
    EXPECT_LT(admitted_after, drained + 300ms);
    // Held behind 99 slots (990 ms), less what drained since the previous probe, plus the
    // probe's round trip: 300 ms each way. A request not held behind the queue takes a round
    // trip; one held behind the whole debt, 4.5 s.
    EXPECT_GE(held, 990ms - 300ms);
    EXPECT_LT(held, 990ms + 300ms);
}

// Figures a peer cannot be trusted with: a request whose X-Cost is not a non-negative decimal
// number reserves `default` (5), and one beyond a double's range never fits; a response whose
// figure is missing or broken keeps the reservation (on-missing: keep) or gives it back
// (on-missing: refund); a trailer counts like a header.
TEST_P(CostTest, BrokenOrMissingFiguresFallBackAsConfigured) {
    auto upstream = usage_upstream();
    sluice_process sluice(yaml(upstream, negligible_refill));
    long left = 100;
    // (The /keep rule's bucket; the /refund rule's below has one of its own.)
    for (const char* bad : {"abc", "-5", "nan", "inf", ""}) {
        const auto r = get(sluice.port(), "/keep/a", {{"X-Cost", bad}, {"X-Reply-Usage", "x"}});
        ASSERT_EQ(r.status, 200u) << bad;
        left -= 5;
        EXPECT_EQ(remaining(r), left) << bad;
    }
    // A number beyond a double's range is a number too large for any limit, as 1e300 is: it
    // never fits, and charges nothing.
    const auto beyond = get(sluice.port(), "/keep/a", {{"X-Cost", "1e309"}});
    EXPECT_EQ(beyond.status, 429u);
    EXPECT_FALSE(beyond.header("Retry-After").has_value()) << "never fits";
    EXPECT_EQ(remaining(beyond), left);
    // on-missing: refund. No figure at all: the 30 come back. The probe reserves more than the
    // capacity: refused, it charges nothing and reports the tokens there are.
    const auto tokens = [&](const char* path) {
        return remaining(get(sluice.port(), path, {{"X-Cost", "1000"}}));
    };
    const auto none = get(sluice.port(), "/refund/a", {{"X-Cost", "30"}});
    ASSERT_EQ(none.status, 200u);
    EXPECT_EQ(remaining(none), 70);
    ASSERT_TRUE(eventually([&] { return tokens("/refund/b") == 100; }, settle_deadline))
        << "refund not seen: " << tokens("/refund/b") << " tokens";
    // A trailer's figure settles the reservation: 20 reserved, 2 used, 18 back.
    const auto trailed =
        get(sluice.port(), "/refund/c", {{"X-Cost", "20"}, {"X-Reply-Trailer", "2"}});
    ASSERT_EQ(trailed.status, 200u);
    EXPECT_EQ(remaining(trailed), 80);
    ASSERT_TRUE(eventually([&] { return tokens("/refund/d") >= 98; }, settle_deadline))
        << "trailer not settled: " << tokens("/refund/d") << " tokens";
    EXPECT_EQ(tokens("/refund/d"), 98) << "80 + 18, not all 20 back";
}

// The cost metrics, per rule, after a known sequence: reserved and settled totals count the
// admitted requests' reservations and final charges, the histogram the settlements' `actual -
// reserved` when the response had a figure, the missing counter those where on-missing applied.
// A refused request (a try before the refund landed, a never-fitting one) counts in none of them;
// a limit without cost.response is charged its reservation, with nothing to settle.
TEST_P(CostTest, MetricsCountReservationsSettlementsAndTheirError) {
    auto upstream = usage_upstream();
    const std::string fixed_rule = "    - name: fixed\n"
                                   "      match: { path: /fixed/* }\n"
                                   "      limits:\n"
                                   "        - algorithm: TOKEN_BUCKET\n"
                                   "          capacity: 100\n"
                                   "          refillRate: 1\n"
                                   "          key: [global]\n"
                                   "          cost: { request: 7 }\n";
    sluice_process sluice(
        compose_yaml(upstream.url(), rate_limit(cost_rules(negligible_refill) + fixed_rule)));
    const auto admin = admin_port(sluice);
    // keep: 60 reserved, 10 used (-50); 80 reserved, no figure (kept); 5 reserved, 25 used (+20).
    ASSERT_EQ(get(sluice.port(), "/keep/a", {{"X-Cost", "60"}, {"X-Reply-Usage", "10"}}).status,
              200u);
    ASSERT_TRUE(eventually(
        [&] {
            return get(sluice.port(), "/keep/b", {{"X-Cost", "80"}}).status == 200;
        },
        settle_deadline))
        << "the refund did not land";
    ASSERT_EQ(get(sluice.port(), "/keep/c", {{"X-Cost", "5"}, {"X-Reply-Usage", "25"}}).status,
              200u);
    ASSERT_EQ(get(sluice.port(), "/keep/d", {{"X-Cost", "200"}}).status, 429u);
    // refund: 30 reserved, no figure (refunded); 20 reserved, 20 used (exact).
    ASSERT_EQ(get(sluice.port(), "/refund/a", {{"X-Cost", "30"}}).status, 200u);
    ASSERT_EQ(get(sluice.port(), "/refund/b", {{"X-Cost", "20"}, {"X-Reply-Usage", "20"}}).status,
              200u);
    // fixed: 7 reserved, and charged, twice.
    ASSERT_EQ(get(sluice.port(), "/fixed/a").status, 200u);
    ASSERT_EQ(get(sluice.port(), "/fixed/b").status, 200u);

    const auto series = [](const char* name, const char* rule) {
        return fmt::format(R"({}{{rule="{}"}})", name, rule);
    };
    const auto bucket = [](const char* rule, const char* le) {
        return fmt::format(R"(sluice_cost_settle_error_bucket{{rule="{}",le="{}"}})", rule, le);
    };
    // A settlement is counted just after the response's last byte: wait for the last ones.
    bool met = false;
    const std::string text = wait_for_metrics(
        admin,
        [&](const std::string& t) {
            return metric_or_zero(t, series("sluice_cost_settled_total", "keep")) == 115 &&
                   metric_or_zero(t, series("sluice_cost_settled_total", "refund")) == 20 &&
                   metric_or_zero(t, series("sluice_cost_settled_total", "fixed")) == 14;
        },
        10s,
        met);
    ASSERT_TRUE(met) << text;
    EXPECT_EQ(metric_value(text, series("sluice_cost_reserved_total", "keep")), 145);
    EXPECT_EQ(metric_value(text, series("sluice_cost_settle_missing_total", "keep")), 1);
    EXPECT_EQ(metric_value(text, series("sluice_cost_settle_error_count", "keep")), 2);
    EXPECT_EQ(metric_value(text, series("sluice_cost_settle_error_sum", "keep")), -30);
    for (const auto& [le, n] : {std::pair{"-100", 0},
                                {"-10", 1},
                                {"-1", 1},
                                {"0", 1},
                                {"10", 1},
                                {"100", 2},
                                {"+Inf", 2}}) {
        EXPECT_EQ(metric_value(text, bucket("keep", le)), n) << "le=" << le;
    }
    EXPECT_EQ(metric_value(text, series("sluice_cost_reserved_total", "refund")), 50);
    EXPECT_EQ(metric_value(text, series("sluice_cost_settle_missing_total", "refund")), 1);
    EXPECT_EQ(metric_value(text, series("sluice_cost_settle_error_count", "refund")), 1);
    EXPECT_EQ(metric_value(text, series("sluice_cost_settle_error_sum", "refund")), 0);
    EXPECT_EQ(metric_value(text, bucket("refund", "-1")), 0);
    EXPECT_EQ(metric_value(text, bucket("refund", "0")), 1);
    EXPECT_EQ(metric_value(text, series("sluice_cost_reserved_total", "fixed")), 14);
    EXPECT_EQ(metric_value(text, series("sluice_cost_settle_missing_total", "fixed")), 0);
    EXPECT_EQ(metric_value(text, series("sluice_cost_settle_error_count", "fixed")), 0);
}

// A SLIDING_WINDOW weighs its log (issue 15): 100 per minute, keyed globally. A reservation of
// 60 reporting 10 used gets 50 back, so 80 fit right after; the log then holds 10 + 80, so 10
// more fit and 20 do not: a 20 must wait for the oldest entry (the 10 left of the 60) to leave
// the window, a minute after it was logged, which is what Retry-After says. 200 never fits.
TEST_P(CostTest, ASlidingWindowAdmitsByWeightAndARefundMakesRoom) {
    auto upstream = usage_upstream();
    const std::string rules =
        "  rules:\n"
        "    - name: window\n"
        "      match: { path: /window/* }\n"
        "      limits:\n"
        "        - algorithm: SLIDING_WINDOW\n"
        "          limit: 100\n"
        "          window: 60s\n"
        "          key: [global]\n"
        "          cost: { request: header:X-Cost, response: header:X-Usage }\n";
    sluice_process sluice(compose_yaml(upstream.url(), rate_limit(rules)));
    const auto sent = clock_type::now();
    const auto second = refund_then_80(sluice.port(), "/window");
    ASSERT_EQ(second.status, 200u);
    EXPECT_EQ(remaining(second), 10) << "nothing leaves a one-minute window during the test";

    const auto too_much = get(sluice.port(), "/window/c", {{"X-Cost", "20"}});
    ASSERT_EQ(too_much.status, 429u);
    ASSERT_TRUE(too_much.header("Retry-After").has_value());
    // The oldest entry was logged after `sent` and leaves 60 s after it: the wait left is in
    // (60 s - elapsed, 60 s], in whole seconds rounded up.
    const auto elapsed =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - sent);
    const long retry = std::stol(*too_much.header("Retry-After"));
    EXPECT_LE(retry, 60);
    EXPECT_GE(retry, (60'000 - elapsed.count()) / 1000) << "elapsed " << elapsed.count() << " ms";

    const auto huge = get(sluice.port(), "/window/d", {{"X-Cost", "200"}});
    EXPECT_EQ(huge.status, 429u);
    EXPECT_FALSE(huge.header("Retry-After").has_value());
    EXPECT_NE(huge.body.find(R"("cost":200,"capacity":100)"), std::string::npos) << huge.body;

    const auto last = get(sluice.port(), "/window/e", {{"X-Cost", "10"}, {"X-Reply-Usage", "10"}});
    EXPECT_EQ(last.status, 200u) << "10 + 80 + 10 fit 100";
    EXPECT_EQ(remaining(last), 0);
    EXPECT_EQ(upstream.requests().size(), 3u);
}

// Two instances on one Redis share one budget: what one reserves, the other sees charged, and a
// settlement from either lands on the same key.
TEST(RedisCostTest, TwoInstancesShareOneBudgetAndEachOthersSettlements) {
    if (!redis_server::available()) {
        GTEST_SKIP() << "redis-server is not on PATH";
    }
    redis_server redis;
    auto upstream = usage_upstream();
    const auto config = compose_yaml(
        upstream.url(), redis_store_yaml(redis.port()) + cost_rules(negligible_refill));
    sluice_process a(config);
    sluice_process b(config);
    const auto tokens = [&](const sluice_process& s) {
        return remaining(get(s.port(), "/refund/probe", {{"X-Cost", "1000"}}));
    };
    const auto on_a = get(a.port(), "/refund/x", {{"X-Cost", "60"}, {"X-Reply-Usage", "60"}});
    ASSERT_EQ(on_a.status, 200u);
    EXPECT_EQ(remaining(on_a), 40);
    EXPECT_EQ(tokens(b), 40) << "b sees a's reservation";
    // b reserves 30 and uses 5: its settlement gives 25 back, which a sees.
    const auto on_b = get(b.port(), "/refund/y", {{"X-Cost", "30"}, {"X-Reply-Usage", "5"}});
    ASSERT_EQ(on_b.status, 200u);
    EXPECT_EQ(remaining(on_b), 10);
    // Before the settlement lands a sees 10; after it, 35.
    ASSERT_TRUE(eventually([&] { return tokens(a) >= 35; }, settle_deadline))
        << "a sees " << tokens(a) << " tokens, not 40 - 5";
    EXPECT_EQ(tokens(a), 35);
}

// With failure-mode local, a request the local fallback decided (Redis is gone) is settled on
// the fallback, where it was charged: 60 reserved, 10 used, 50 back, so 80 fit right after on
// the fallback's bucket. (Sent to Redis instead, the refund would be lost and 80 refused.)
TEST(RedisCostTest, ARequestTheLocalFallbackDecidedIsSettledThere) {
    if (!redis_server::available()) {
        GTEST_SKIP() << "redis-server is not on PATH";
    }
    redis_server redis;
    auto upstream = usage_upstream();
    std::string store = redis_store_yaml(redis.port());
    store.replace(store.find("failure-mode: closed"), 20, "failure-mode: local");
    store.replace(store.find("timeout: 500ms"), 14, "timeout: 50ms");
    sluice_process sluice(compose_yaml(upstream.url(), store + cost_rules(negligible_refill)));
    redis.stop();
    // Decided on the fallback's fresh bucket: 40 left, and the refund lands there.
    const auto second = refund_then_80(sluice.port(), "/keep");
    ASSERT_EQ(second.status, 200u) << "the refund did not land on the fallback";
    EXPECT_EQ(remaining(second), 10);
}

INSTANTIATE_TEST_SUITE_P(Stores,
                         CostTest,
                         ::testing::Values("memory", "redis"),
                         [](const auto& param_info) { return std::string(param_info.param); });

} // namespace
} // namespace sluice::test
