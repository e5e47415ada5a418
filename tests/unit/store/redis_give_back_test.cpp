// SPDX-License-Identifier: Apache-2.0
// The reserve-then-give-back protocol of src/redis/limits.lua (docs/redis-cluster.md, "All-or-none
// across slots"), on one real Redis: a tentative request's charge, given back, leaves a key as a
// request never admitted leaves it.
#include "sluice/redis/scripts.hpp"
#include "sluice/store/redis_store.hpp"
#include "support/redis_server.hpp"
#include "support/resp_client.hpp"
#include "support/run_coro.hpp"
#include "unit/limiter/limiter_test_util.hpp"

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace sluice::store {
namespace {

using namespace std::chrono_literals;
using limiter::test::windowed;
using std::chrono::milliseconds;

// A realistic unix time, 20 s into the minute that starts at 1699999980000.
constexpr double t0 = 1'700'000'000'000.0;
constexpr std::int64_t minute_start = 1'699'999'980'000;

config::limit bucket(config::algorithm algo,
                     std::int64_t capacity,
                     double rate,
                     config::shaping_mode mode = config::shaping_mode::police) {
    config::limit l;
    l.algo = algo;
    l.capacity = capacity;
    if (algo == config::algorithm::leaky_bucket) {
        l.flow_rate = rate;
    } else {
        l.refill_rate = rate;
    }
    l.mode = mode;
    return l;
}

config::limit concurrent(std::int64_t count) {
    config::limit l;
    l.algo = config::algorithm::concurrency;
    l.limit_count = count;
    l.lease = 30s;
    return l;
}

// What a test compares of two decisions.
auto fields(const limiter::decision& d) {
    return std::make_tuple(
        d.allowed, d.remaining, d.reset_after.count(), d.retry_after.count(), d.delay.count());
}

std::string describe(const limiter::decision& d) {
    return "allowed " + std::to_string(d.allowed) + ", remaining " + std::to_string(d.remaining) +
           ", reset " + std::to_string(d.reset_after.count()) + " ms, retry_after " +
           std::to_string(d.retry_after.count()) + " ms, delay " + std::to_string(d.delay.count()) +
           " ms";
}

// A request of one key at a time (unix ms), costing `cost`.
struct step {
    double at;
    std::int64_t cost = 1;
};

// A plain request that yields what a tentative one does, without give-back entries, so that
// both kinds can share one turn of the event loop.
awaitable<redis_store::tentative_outcome> plain(redis_store& store, checks c) {
    auto decided = co_await store.acquire(std::move(c));
    co_return redis_store::tentative_outcome{std::move(decided), {}};
}

class RedisGiveBack : public ::testing::Test {
protected:
    void SetUp() override {
        if (!test::redis_server::available()) {
            GTEST_SKIP() << "redis-server is not on PATH";
        }
        server_.emplace();
        settings_ = server_->settings();
        settings_.timeout = 5s;
        client_ = std::make_unique<redis::client>(executor{ioc_.get_executor()},
                                                  redis::client_options::from_settings(settings_));
        client_->start();
        store_ = std::make_unique<redis_store>(*client_, settings_);
    }

    limiter::decision
    decide(const std::string& key, const config::limit& l, double now, std::int64_t cost = 1) {
        store_->set_time_override_for_test(now);
        auto out = test::run_coro(ioc_, store_->acquire(checks{check{key, &l, cost}}));
        EXPECT_FALSE(out.ec) << out.ec.message();
        EXPECT_EQ(out.decisions.size(), 1u);
        return out.decisions.empty() ? limiter::decision{} : out.decisions.front();
    }

    redis_store::tentative_outcome tentative(const checks& c, double now) {
        store_->set_time_override_for_test(now);
        auto out = test::run_coro(ioc_, store_->acquire_tentative_for_test(c));
        EXPECT_FALSE(out.decided.ec) << out.decided.ec.message();
        return out;
    }

    // Gives back and waits until Redis ran it: a command sent after it on the same connection
    // is answered after it.
    void give_back(const std::vector<give_back_entry>& charges, double now) {
        store_->set_time_override_for_test(now);
        store_->give_back(charges);
        command({"PING"});
    }

    void release(const slots& taken) {
        store_->release(taken);
        command({"PING"});
    }

    redis::reply command(std::vector<std::string> args) {
        auto [ec, r] = test::run_coro(ioc_, client_->async_command(std::move(args)));
        EXPECT_FALSE(ec) << ec.message() << ": " << r.describe();
        return r;
    }

    std::vector<std::string> zrange(const std::string& key) {
        std::vector<std::string> out;
        for (const auto& e : command({"ZRANGE", key, "0", "-1", "WITHSCORES"}).elements) {
            out.push_back(e.str);
        }
        return out;
    }

    std::vector<std::string> hgetall(const std::string& key) {
        std::vector<std::string> out;
        for (const auto& e : command({"HGETALL", key}).elements) {
            out.push_back(e.str);
        }
        return out;
    }

    /**
     * The protocol's promise for one limit. Three keys see `before`; then "given" and "kept"
     * a tentative request `reserve` (admitted), "twin" nothing; then all three see `between`
     * (other requests meanwhile, whose decisions may differ: the charge shows); at `back_at`
     * "given" has its charge given back. From then on "given" and "twin" decide `after` alike,
     * while "kept" (the charge left in place) does not: the comparison can fail.
     */
    void expect_as_if_never_admitted(const std::string& name,
                                     const config::limit& l,
                                     const std::vector<step>& before,
                                     step reserve,
                                     const std::vector<step>& between,
                                     double back_at,
                                     const std::vector<step>& after) {
        const std::string given = name + ":given";
        const std::string kept = name + ":kept";
        const std::string twin = name + ":twin";
        for (const auto& s : before) {
            for (const auto& key : {given, kept, twin}) {
                ASSERT_TRUE(decide(key, l, s.at, s.cost).allowed) << key << " at " << s.at;
            }
        }
        std::vector<give_back_entry> charges;
        for (const auto& key : {given, kept}) {
            auto t = tentative(checks{check{key, &l, reserve.cost}}, reserve.at);
            ASSERT_EQ(t.decided.decisions.size(), 1u);
            ASSERT_TRUE(t.decided.decisions[0].allowed) << describe(t.decided.decisions[0]);
            ASSERT_EQ(t.give_backs.size(), 1u);
            EXPECT_EQ(t.give_backs[0].key, key);
            EXPECT_EQ(t.give_backs[0].amount, reserve.cost);
            if (key == given) {
                charges = t.give_backs;
            }
        }
        for (const auto& s : between) {
            for (const auto& key : {given, kept, twin}) {
                decide(key, l, s.at, s.cost);
            }
        }
        give_back(charges, back_at);
        bool kept_differs = false;
        for (const auto& s : after) {
            SCOPED_TRACE("at t0 + " + std::to_string(s.at - t0) + " ms, cost " +
                         std::to_string(s.cost));
            const auto g = decide(given, l, s.at, s.cost);
            const auto t = decide(twin, l, s.at, s.cost);
            const auto k = decide(kept, l, s.at, s.cost);
            EXPECT_EQ(fields(g), fields(t)) << describe(g) << " vs " << describe(t);
            kept_differs = kept_differs || fields(k) != fields(t);
        }
        EXPECT_TRUE(kept_differs) << "the scenario cannot tell a give-back from none";
    }

    net::io_context ioc_;
    std::optional<test::redis_server> server_;
    config::redis_settings settings_;
    std::unique_ptr<redis::client> client_;
    std::unique_ptr<redis_store> store_;
};

//------------------------------------------------------------------------------
// A give-back leaves the key as a request never admitted leaves it

TEST_F(RedisGiveBack, TokenBucketAsIfNeverAdmitted) {
    const auto l = bucket(config::algorithm::token_bucket, 5, 2); // a token per 500 ms
    expect_as_if_never_admitted("tokens",
                                l,
                                {{t0}, {t0}},
                                {t0 + 100, 2},
                                {{t0 + 150}},
                                t0 + 300,
                                {{t0 + 300}, {t0 + 300}, {t0 + 300}, {t0 + 800, 2}, {t0 + 1100}});
}

TEST_F(RedisGiveBack, LeakyBucketPoliceAsIfNeverAdmitted) {
    const auto l = bucket(config::algorithm::leaky_bucket, 5, 2);
    expect_as_if_never_admitted("police",
                                l,
                                {{t0}, {t0}},
                                {t0 + 100, 2},
                                {{t0 + 150}},
                                t0 + 300,
                                {{t0 + 300}, {t0 + 300}, {t0 + 300}, {t0 + 800, 2}, {t0 + 1100}});
}

TEST_F(RedisGiveBack, LeakyBucketShapeAsIfNeverAdmitted) {
    // Shaped, with no request admitted between the charge and its give-back, the requests after
    // it are delayed as if the charge had never been: the delays tell the queue's length exactly.
    auto l = bucket(config::algorithm::leaky_bucket, 6, 2, config::shaping_mode::shape);
    expect_as_if_never_admitted("shape",
                                l,
                                {{t0}, {t0}},
                                {t0 + 100, 2},
                                {},
                                t0 + 300,
                                {{t0 + 300}, {t0 + 300}, {t0 + 300}, {t0 + 800, 2}, {t0 + 1100}});
}

// Shaped, a request admitted after the charge was held to a slot behind it: taking the charge
// back would hold the next request to that same slot, and the upstream would see both at once.
// The give-back then changes nothing: the charge's slot passes unused (T = 200 ms here).
TEST_F(RedisGiveBack, AShapedGiveBackAfterALaterRequestGivesNothingBack) {
    const auto l = bucket(config::algorithm::leaky_bucket, 10, 5, config::shaping_mode::shape);
    auto t = tentative(checks{check{"held:key", &l}}, t0);
    ASSERT_TRUE(t.decided.decisions.at(0).allowed);
    ASSERT_EQ(t.give_backs.size(), 1u);
    const auto held = decide("held:key", l, t0 + 1);
    ASSERT_TRUE(held.allowed);
    EXPECT_EQ(held.delay.count(), 199); // its slot: t0 + 200
    give_back(t.give_backs, t0 + 2);
    const auto next = decide("held:key", l, t0 + 3);
    EXPECT_TRUE(next.allowed);
    EXPECT_EQ(next.delay.count(), 397) << "held to the slot of the request before it";
}

TEST_F(RedisGiveBack, AShapedRequestMeanwhileKeepsItsLongerDelay) {
    // The leftover docs/redis-cluster.md names: a request admitted between the charge and its
    // give-back was delayed counting the charge's place (500 ms a unit here), and stays so.
    const auto l = bucket(config::algorithm::leaky_bucket, 6, 2, config::shaping_mode::shape);
    ASSERT_TRUE(
        tentative(checks{check{"meanwhile:given", &l, 2}}, t0).decided.decisions[0].allowed);
    EXPECT_EQ(decide("meanwhile:given", l, t0 + 10).delay.count(), 990);
    EXPECT_EQ(decide("meanwhile:twin", l, t0 + 10).delay.count(), 0);
}

TEST_F(RedisGiveBack, FixedWindowAsIfNeverAdmitted) {
    const auto l = windowed(config::algorithm::fixed_window, 10, 60'000ms);
    expect_as_if_never_admitted("fixed",
                                l,
                                {{t0}, {t0 + 1, 2}},
                                {t0 + 10, 4},
                                {{t0 + 20, 2}},
                                t0 + 30,
                                {{t0 + 40, 3}, {t0 + 50, 2}, {t0 + 60}});
    // The count is the one the twin stored, in the same window.
    EXPECT_EQ(hgetall("fixed:given"), hgetall("fixed:twin"));
}

TEST_F(RedisGiveBack, SlidingWindowAsIfNeverAdmitted) {
    const auto l = windowed(config::algorithm::sliding_window, 6, 1000ms);
    expect_as_if_never_admitted("sliding",
                                l,
                                {{t0}, {t0 + 100}},
                                {t0 + 200},
                                {{t0 + 300}, {t0 + 300}},
                                t0 + 400,
                                {{t0 + 400}, {t0 + 450}, {t0 + 500}, {t0 + 1000}, {t0 + 1150}});
}

TEST_F(RedisGiveBack, CostWeightedSlidingWindowAsIfNeverAdmitted) {
    const auto l = windowed(config::algorithm::sliding_window, 10, 1000ms);
    // The log after the give-back is, member for member, the one that never held the entry:
    // the entries after it renumbered, the floor and its clock those of the last request.
    const std::vector<step> before{{t0, 2}, {t0 + 100}};
    const std::vector<step> between{{t0 + 300, 2}, {t0 + 300}};
    for (const auto& s : before) {
        ASSERT_TRUE(decide("log:given", l, s.at, s.cost).allowed);
        ASSERT_TRUE(decide("log:twin", l, s.at, s.cost).allowed);
    }
    const auto t = tentative(checks{check{"log:given", &l, 3}}, t0 + 200);
    ASSERT_EQ(t.give_backs.size(), 1u);
    EXPECT_EQ(t.give_backs[0].token, (give_back_token{6, static_cast<std::int64_t>(t0) + 200}));
    for (const auto& s : between) {
        ASSERT_TRUE(decide("log:given", l, s.at, s.cost).allowed);
        ASSERT_TRUE(decide("log:twin", l, s.at, s.cost).allowed);
    }
    ASSERT_NE(zrange("log:given"), zrange("log:twin"));
    give_back(t.give_backs, t0 + 400);
    EXPECT_EQ(zrange("log:given"), zrange("log:twin"));

    expect_as_if_never_admitted("weighted",
                                l,
                                before,
                                {t0 + 200, 3},
                                between,
                                t0 + 400,
                                {{t0 + 400, 4},
                                 {t0 + 450},
                                 {t0 + 1000, 3},
                                 {t0 + 1100, 2},
                                 {t0 + 1150, 4},
                                 {t0 + 1250, 3}});
}

TEST_F(RedisGiveBack, ConcurrencySlotGoesBackAndIsAnnounced) {
    const auto l = concurrent(2);
    ASSERT_TRUE(decide("conc:given", l, t0).allowed);
    ASSERT_TRUE(decide("conc:twin", l, t0).allowed);
    const auto t = tentative(checks{check{"conc:given", &l}}, t0 + 10);
    ASSERT_TRUE(t.decided.decisions[0].allowed);
    EXPECT_TRUE(t.give_backs.empty()); // a slot is not an entry: it goes back by release
    ASSERT_EQ(t.decided.slots.size(), 1u);
    EXPECT_EQ(command({"ZCARD", "conc:given"}).integer, 2);

    test::resp_client subscriber(server_->port());
    if (!settings_.password.empty()) {
        subscriber.command({"AUTH", settings_.password});
    }
    const auto channel = redis_store::slot_channel(settings_);
    subscriber.command({"SUBSCRIBE", channel});
    release(t.decided.slots);
    // The announcement came before the PING's answer (subscribed, PING answers in turn).
    const auto heard = subscriber.command({"PING"});
    ASSERT_EQ(heard.elements.size(), 3u) << heard.describe();
    EXPECT_EQ(heard.elements[0].text, "message");
    EXPECT_EQ(heard.elements[2].text, "1:conc:given");

    EXPECT_EQ(command({"ZCARD", "conc:given"}).integer, 1);
    for (const double at : {t0 + 20, t0 + 30}) {
        const auto g = decide("conc:given", l, at);
        const auto w = decide("conc:twin", l, at);
        EXPECT_EQ(fields(g), fields(w)) << describe(g) << " vs " << describe(w);
    }
    EXPECT_EQ(command({"ZCARD", "conc:given"}).integer, command({"ZCARD", "conc:twin"}).integer);
}

//------------------------------------------------------------------------------
// What a give-back does not undo, and its bounds

TEST_F(RedisGiveBack, AfterItsWindowEndedAFixedWindowGivesBackNothing) {
    const auto l = windowed(config::algorithm::fixed_window, 10, 60'000ms);
    const auto t = tentative(checks{check{"ended", &l, 4}}, t0);
    ASSERT_EQ(t.give_backs.size(), 1u);
    EXPECT_EQ(t.give_backs[0].token, (give_back_token{minute_start, 0}));
    // The next window has no count yet: the give-back leaves the old one as it was.
    const double next_window = static_cast<double>(minute_start) + 60'000;
    give_back(t.give_backs, next_window + 5);
    const std::vector<std::string> old_window{"count", "4", "window_start", "1699999980000"};
    EXPECT_EQ(hgetall("ended"), old_window);
    // It has one: the give-back leaves it too.
    ASSERT_TRUE(decide("ended", l, next_window + 10, 3).allowed);
    const auto charged = hgetall("ended");
    give_back(t.give_backs, next_window + 20);
    EXPECT_EQ(hgetall("ended"), charged);
    EXPECT_EQ(decide("ended", l, next_window + 30, 7).remaining, 0);
    EXPECT_FALSE(decide("ended", l, next_window + 30).allowed);
}

TEST_F(RedisGiveBack, AnEntryThatLeftTheSlidingWindowGivesBackNothing) {
    const auto l = windowed(config::algorithm::sliding_window, 5, 1000ms);
    const auto t = tentative(checks{check{"left", &l, 3}}, t0);
    ASSERT_EQ(t.give_backs.size(), 1u);
    ASSERT_TRUE(decide("left", l, t0 + 500, 2).allowed);
    ASSERT_TRUE(decide("left:twin", l, t0 + 500, 2).allowed);
    const auto logged = zrange("left");
    give_back(t.give_backs, t0 + 1000); // the entry at t0 leaves the window (t0, t0 + 1000]
    EXPECT_EQ(zrange("left"), logged);
    for (const double at : {t0 + 1000, t0 + 1200, t0 + 1500}) {
        const auto g = decide("left", l, at, 2);
        const auto w = decide("left:twin", l, at, 2);
        EXPECT_EQ(fields(g), fields(w)) << describe(g) << " vs " << describe(w);
    }
}

TEST_F(RedisGiveBack, ABucketGivesBackNoMoreThanFull) {
    for (const auto algo : {config::algorithm::token_bucket, config::algorithm::leaky_bucket}) {
        const auto l = bucket(algo, 5, 2);
        const std::string key = algo == config::algorithm::token_bucket ? "full:tokens" : "full:q";
        const auto t = tentative(checks{check{key, &l, 3}}, t0);
        ASSERT_EQ(t.give_backs.size(), 1u);
        // Full again (empty, for the queue) 10 s later: nothing left to give back.
        give_back(t.give_backs, t0 + 10'000);
        const auto stored = hgetall(key);
        ASSERT_EQ(stored.size(), 4u);
        EXPECT_EQ(stored[1], algo == config::algorithm::token_bucket ? "5" : "0") << key;
        for (int i = 0; i < 5; ++i) {
            EXPECT_TRUE(decide(key, l, t0 + 10'000).allowed) << key << " request " << i;
        }
        EXPECT_FALSE(decide(key, l, t0 + 10'000).allowed) << key;
    }
}

TEST_F(RedisGiveBack, AWindowGivesBackNoMoreThanItHolds) {
    // A refund of another request's reservation took from the window first (settlement).
    const auto fixed = windowed(config::algorithm::fixed_window, 10, 60'000ms);
    const auto f = tentative(checks{check{"holds:fixed", &fixed, 4}}, t0);
    const settlement refund_fixed{"holds:fixed", &fixed, -3};
    store_->settle(std::span(&refund_fixed, 1));
    give_back(f.give_backs, t0 + 10);
    EXPECT_EQ(hgetall("holds:fixed"),
              (std::vector<std::string>{"count", "0", "window_start", "1699999980000"}));
    EXPECT_EQ(decide("holds:fixed", fixed, t0 + 20).remaining, 9);

    // The sliding window's refund took 3 of the entry's 4 (from the oldest): giving it back
    // leaves a log that weighs nothing, not less.
    const auto sliding = windowed(config::algorithm::sliding_window, 10, 1000ms);
    const auto s = tentative(checks{check{"holds:sliding", &sliding, 4}}, t0);
    ASSERT_TRUE(decide("holds:sliding", sliding, t0 + 5, 2).allowed);
    const settlement refund_sliding{"holds:sliding", &sliding, -3};
    store_->set_time_override_for_test(t0 + 6);
    store_->settle(std::span(&refund_sliding, 1));
    give_back(s.give_backs, t0 + 10);
    // As in the log that never held it: the request of 2 at t0 + 5, less a refund of 3, weighs
    // nothing.
    EXPECT_EQ(decide("holds:sliding", sliding, t0 + 20, 10).allowed, true);
    EXPECT_FALSE(decide("holds:sliding", sliding, t0 + 20).allowed);
}

TEST_F(RedisGiveBack, ASlidingEntryGivesBackNoMoreThanItWeighs) {
    // An amount above the entry's own weight (3 here) lowers the later totals by that weight
    // only: they stay above the earlier ones, and the log weighs what it did less the entry.
    const auto l = windowed(config::algorithm::sliding_window, 10, 1000ms);
    ASSERT_TRUE(decide("weighs", l, t0, 2).allowed);
    auto t = tentative(checks{check{"weighs", &l, 3}}, t0 + 10);
    ASSERT_TRUE(decide("weighs", l, t0 + 20).allowed);
    ASSERT_EQ(t.give_backs.size(), 1u);
    t.give_backs[0].amount = 10;
    give_back(t.give_backs, t0 + 30);
    const std::vector<std::string> expected{"=0:1700000000020",
                                            "-inf",
                                            "0000000000000002",
                                            "1700000000000",
                                            "0000000000000003",
                                            "1700000000020"};
    EXPECT_EQ(zrange("weighs"), expected);
    EXPECT_EQ(decide("weighs", l, t0 + 40).remaining, 6);
}

TEST_F(RedisGiveBack, AKeyHoldingAnotherAlgorithmsStateGivesBackNothing) {
    // A reload changed the limit between the charge and its give-back: the key's state is
    // another algorithm's, which counts as none, and stays as it is.
    const auto fixed = windowed(config::algorithm::fixed_window, 10, 60'000ms);
    const auto sliding = windowed(config::algorithm::sliding_window, 10, 1000ms);
    const auto tokens = bucket(config::algorithm::token_bucket, 10, 1);
    const auto on_hash = tentative(checks{check{"other:hash", &sliding, 2}}, t0);
    const auto on_log = tentative(checks{check{"other:log", &fixed, 2}}, t0);
    ASSERT_EQ(on_hash.give_backs.size(), 1u);
    ASSERT_EQ(on_log.give_backs.size(), 1u);
    command({"DEL", "other:hash", "other:log"});
    ASSERT_TRUE(decide("other:hash", fixed, t0, 3).allowed);
    ASSERT_TRUE(decide("other:log", sliding, t0, 3).allowed);
    const auto hash = hgetall("other:hash");
    const auto log = zrange("other:log");
    std::vector<give_back_entry> charges{on_hash.give_backs[0], on_log.give_backs[0]};
    charges.push_back({"other:hash", &tokens, 2, {}});
    give_back(charges, t0 + 1);
    EXPECT_EQ(hgetall("other:hash"), hash);
    EXPECT_EQ(zrange("other:log"), log);
}

//------------------------------------------------------------------------------
// The wire: tentative groups, their tokens and the entries parsed from them

TEST_F(RedisGiveBack, OnlyWhatTheScriptChargedIsGivenBack) {
    const auto tokens = bucket(config::algorithm::token_bucket, 5, 1);
    const auto fixed = windowed(config::algorithm::fixed_window, 1, 60'000ms);
    auto dry = windowed(config::algorithm::fixed_window, 0, 60'000ms);
    dry.dry_run = true;
    auto dry_admits = windowed(config::algorithm::sliding_window, 5, 1000ms);
    dry_admits.dry_run = true;
    const auto one_slot = concurrent(1);

    // Two limits on one key: the script writes the last one only. A dry-run limit that refuses
    // charges nothing; one that admits is charged and given back too. A slot is no entry.
    const auto t = tentative(checks{check{"only:shared", &tokens, 2},
                                    check{"only:shared", &tokens, 3},
                                    check{"only:dry", &dry},
                                    check{"only:dry-admits", &dry_admits},
                                    check{"only:slot", &one_slot},
                                    check{"only:fixed", &fixed}},
                             t0);
    ASSERT_TRUE(t.decided.decisions[0].allowed);
    ASSERT_FALSE(t.decided.decisions[2].allowed);
    ASSERT_EQ(t.give_backs.size(), 3u);
    EXPECT_EQ(t.give_backs[0].key, "only:shared");
    EXPECT_EQ(t.give_backs[0].amount, 3);
    EXPECT_EQ(t.give_backs[1].key, "only:dry-admits");
    EXPECT_EQ(t.give_backs[1].token, (give_back_token{1, static_cast<std::int64_t>(t0)}));
    EXPECT_EQ(t.give_backs[2].key, "only:fixed");
    EXPECT_EQ(t.give_backs[2].token, (give_back_token{minute_start, 0}));
    EXPECT_EQ(t.decided.slots.size(), 1u);

    give_back(t.give_backs, t0);
    release(t.decided.slots);
    EXPECT_EQ(hgetall("only:shared")[1], "5");
    EXPECT_EQ(hgetall("only:fixed")[1], "0");
    EXPECT_EQ(zrange("only:dry-admits").size(), 2u); // the floor alone
    EXPECT_EQ(command({"ZCARD", "only:slot"}).integer, 0);

    // Refused (the fixed window is full): nothing charged, nothing to give back, no slot.
    ASSERT_TRUE(decide("only:fixed", fixed, t0 + 1).allowed);
    const auto full =
        tentative(checks{check{"only:slot", &one_slot}, check{"only:fixed", &fixed}}, t0 + 2);
    EXPECT_TRUE(full.decided.decisions[0].allowed);
    EXPECT_FALSE(full.decided.decisions[1].allowed);
    EXPECT_TRUE(full.give_backs.empty());
    EXPECT_TRUE(full.decided.slots.empty());
    EXPECT_EQ(command({"ZCARD", "only:slot"}).integer, 0);
}

TEST_F(RedisGiveBack, TentativeAndPlainRequestsShareOneCall) {
    const auto l = windowed(config::algorithm::sliding_window, 4, 1000ms);
    const auto f = windowed(config::algorithm::fixed_window, 4, 60'000ms);
    const auto calls = [&] {
        return test::script_calls_in(command({"INFO", "commandstats"}).str);
    };
    const auto calls_before = calls();
    store_->set_time_override_for_test(t0);
    std::vector<awaitable<redis_store::tentative_outcome>> tasks;
    tasks.push_back(plain(*store_, checks{check{"share:a", &l}}));
    tasks.push_back(store_->acquire_tentative_for_test(checks{check{"share:a", &l, 2}}));
    tasks.push_back(plain(*store_, checks{check{"share:a", &l}, check{"share:f", &f}}));
    tasks.push_back(store_->acquire_tentative_for_test(
        checks{check{"share:f", &f, 3}, check{"share:a", &l, 1}}));
    tasks.push_back(plain(*store_, checks{check{"share:f", &f}}));
    const auto out = test::run_together(ioc_, std::move(tasks));
    EXPECT_EQ(calls() - calls_before, 1);

    // One after the other, as separate calls would decide them.
    ASSERT_EQ(out.size(), 5u);
    EXPECT_EQ(out[0].decided.decisions[0].remaining, 3);
    EXPECT_EQ(out[1].decided.decisions[0].remaining, 1);
    ASSERT_EQ(out[1].give_backs.size(), 1u);
    EXPECT_EQ(out[1].give_backs[0].token, (give_back_token{3, static_cast<std::int64_t>(t0)}));
    EXPECT_EQ(out[2].decided.decisions[0].remaining, 0);
    EXPECT_EQ(out[2].decided.decisions[1].remaining, 3);
    // Refused: the sliding window is full.
    EXPECT_TRUE(out[3].decided.decisions[0].allowed);
    EXPECT_FALSE(out[3].decided.decisions[1].allowed);
    EXPECT_TRUE(out[3].give_backs.empty());
    EXPECT_EQ(out[4].decided.decisions[0].remaining, 2);
}

// EVAL of the script with explicit time, and the packed groups as given.
struct script_call {
    std::vector<std::string> keys;
    std::vector<std::vector<std::string>> definitions;

    std::vector<std::string> args(double now, const std::string& packed) const {
        std::vector<std::string> a{"EVAL", std::string(redis::limits_script.text)};
        a.push_back(std::to_string(keys.size()));
        a.insert(a.end(), keys.begin(), keys.end());
        a.push_back(std::to_string(static_cast<std::int64_t>(now)));
        a.emplace_back("60000");
        a.push_back(std::to_string(definitions.size()));
        for (const auto& d : definitions) {
            a.insert(a.end(), d.begin(), d.end());
        }
        a.push_back(packed);
        a.emplace_back("test:1:");
        return a;
    }
};

std::string u32s(std::initializer_list<std::uint64_t> numbers) {
    std::string out;
    for (const auto n : numbers) {
        for (int b = 0; b < 4; ++b) {
            out.push_back(static_cast<char>((n >> (8 * b)) & 0xff));
        }
    }
    return out;
}

std::string i64(std::int64_t v) {
    const auto bits = static_cast<std::uint64_t>(v);
    return u32s({bits & 0xffffffff, bits >> 32});
}

std::int64_t field(const std::string& packed, std::size_t i) {
    std::int64_t v = 0;
    std::memcpy(&v, packed.data() + 8 * i, 8); // little-endian hosts only, as this one
    return v;
}

constexpr std::uint64_t tentative_word = std::uint64_t{1} << 30;
constexpr std::uint64_t give_backs_word = (std::uint64_t{3}) << 30;
constexpr std::uint64_t amount_follows = std::uint64_t{1} << 31;

TEST_F(RedisGiveBack, ATentativeReplyStartsWithThePlainSixFields) {
    // Twins: plain requests on p:*, tentative ones on t:*, the same at the same instants, through
    // admissions and refusals of every algorithm, one key at a time and all together.
    const std::vector<std::vector<std::string>> definitions{{"2", "3", "1", "1", "-1", "0"},
                                                            {"1", "3", "1", "0", "-1", "0"},
                                                            {"1", "3", "1", "1", "-1", "0"},
                                                            {"3", "3", "60000", "1", "-1", "0"},
                                                            {"4", "3", "1000", "1", "-1", "0"},
                                                            {"5", "2", "30000", "1", "-1", "0"}};
    script_call plain_call{{}, definitions};
    script_call tentative_call{{}, definitions};
    for (const char* name : {"tokens", "shape", "police", "fixed", "sliding", "slots"}) {
        plain_call.keys.push_back(std::string("p:") + name);
        tentative_call.keys.push_back(std::string("t:") + name);
    }
    const auto run = [&](const script_call& c, double now, const std::string& packed) {
        auto [ec, r] = test::run_coro(ioc_, client_->async_command(c.args(now, packed)));
        EXPECT_FALSE(ec) << r.describe();
        return r.str;
    };
    int refusals = 0;
    for (int round = 0; round < 5; ++round) {
        const double now = t0 + 100 * round;
        for (std::uint64_t k = 1; k <= 6; ++k) {
            // Key k, limit k; cost 2 (an amount follows) for the windows' and buckets'.
            const std::string entry = k < 6 ? u32s({k, k | amount_follows, 2, 0}) : u32s({k, k});
            const auto p = run(plain_call, now, u32s({1}) + entry);
            const auto t = run(tentative_call, now, u32s({tentative_word | 1}) + entry);
            ASSERT_EQ(p.size(), 48u);
            ASSERT_EQ(t.size(), 64u);
            EXPECT_EQ(t.substr(0, 48), p) << "round " << round << ", limit " << k;
            const bool allowed = field(p, 0) == 1;
            refusals += allowed ? 0 : 1;
            const std::int64_t t1 = field(t, 6);
            const std::int64_t t2 = field(t, 7);
            if (allowed && k == 4) {
                EXPECT_EQ(t1, minute_start);
                EXPECT_EQ(t2, 0);
            } else if (allowed && k == 5) {
                EXPECT_EQ(t1, 2 * (round + 1)); // the running total
                EXPECT_EQ(t2, static_cast<std::int64_t>(now));
            } else if (allowed && k == 2) {
                // A shaped queue's: the level its charge left and the queue's time (a slot of
                // 1 s: the first charge's, while it has not leaked).
                EXPECT_EQ(t1, field(p, 5));
                EXPECT_EQ(t2, static_cast<std::int64_t>(t0));
            } else {
                EXPECT_EQ(t1, 0) << "round " << round << ", limit " << k;
                EXPECT_EQ(t2, 0);
            }
        }
        // All six keys in one request: admitted while every limit admits, then refused whole.
        std::string all = u32s({6});
        std::string all_tentative = u32s({tentative_word | 6});
        for (std::uint64_t k = 1; k <= 6; ++k) {
            all += u32s({k, k});
            all_tentative += u32s({k, k});
        }
        const auto p = run(plain_call, now + 50, all);
        const auto t = run(tentative_call, now + 50, all_tentative);
        ASSERT_EQ(p.size(), 6 * 48u);
        ASSERT_EQ(t.size(), 6 * 64u);
        for (std::size_t k = 0; k < 6; ++k) {
            EXPECT_EQ(t.substr(64 * k, 48), p.substr(48 * k, 48)) << "round " << round;
        }
    }
    EXPECT_GT(refusals, 5);
    // The states the twins left are the same.
    for (const char* name : {"tokens", "shape", "police", "fixed"}) {
        EXPECT_EQ(hgetall(std::string("p:") + name), hgetall(std::string("t:") + name)) << name;
    }
    EXPECT_EQ(zrange("p:sliding"), zrange("t:sliding"));
    EXPECT_EQ(command({"ZCARD", "p:slots"}).integer, command({"ZCARD", "t:slots"}).integer);
}

TEST_F(RedisGiveBack, TheScriptRefusesMalformedGiveBacks) {
    const script_call c{{"bad"}, {{"3", "10", "60000", "1", "-1", "0"}}};
    const auto token = i64(minute_start) + i64(0);
    const auto run = [&](const std::string& packed) {
        return test::run_coro(ioc_, client_->async_command(c.args(t0, packed)));
    };
    // Well formed: a give-back of 1 (no amount) and one of 2, each with its token.
    ASSERT_EQ(std::get<1>(run(u32s({1, 1, amount_follows | 1, 3, 0}))).str.size(), 48u);
    auto [ok_ec, ok] = run(u32s({give_backs_word | 2, 1, 1}) + token +
                           u32s({1, amount_follows | 1, 2, 0}) + token);
    ASSERT_FALSE(ok_ec) << ok.describe();
    EXPECT_EQ(ok.str, "");
    EXPECT_EQ(hgetall("bad"),
              (std::vector<std::string>{"count", "0", "window_start", "1699999980000"}));

    for (const auto& bad : {u32s({give_backs_word | 1, 1, 1}) + i64(minute_start), // half a token
                            u32s({give_backs_word | 1, 1, amount_follows | 1, 0, 0}) + token,
                            u32s({give_backs_word | 1, 1, 2}) + token, // no definition 2
                            u32s({give_backs_word | 2, 1, 1}) + token, // one entry of two
                            u32s({tentative_word})}) {                 // no keys
        auto [ec, r] = run(bad);
        EXPECT_EQ(ec, errc::bad_reply) << r.describe();
        EXPECT_TRUE(r.str.starts_with("ERR sluice:")) << r.describe();
    }
}

} // namespace
} // namespace sluice::store
