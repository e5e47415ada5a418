// SPDX-License-Identifier: Apache-2.0
#include "sluice/limiter/leaky_bucket.hpp"
#include "sluice/limiter/token_bucket.hpp"
#include "sluice/redis/scripts.hpp"
#include "sluice/store/redis_store.hpp"
#include "support/captured_log.hpp"
#include "support/redis_server.hpp"
#include "support/run_coro.hpp"
#include "unit/limiter/limiter_test_util.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

namespace sluice::store {
namespace {

using namespace std::chrono_literals;
using limiter::test::token;
using limiter::test::windowed;
using std::chrono::milliseconds;

// A realistic unix time, so that stored times need all of %.17g's digits.
constexpr double t0 = 1'700'000'000'000.0;

config::limit leaky(std::int64_t capacity,
                    double flow_rate,
                    config::shaping_mode mode = config::shaping_mode::shape) {
    config::limit l;
    l.capacity = capacity;
    l.flow_rate = flow_rate;
    l.mode = mode;
    return l;
}

checks one(const std::string& key, const config::limit& l) {
    return checks{check{key, &l}};
}

// Requests the C++ reference admits at `times`, charging only admitted ones, as the stores do.
int reference_admitted(const config::limit& l, const std::vector<double>& times) {
    limiter::leaky_bucket_state stored;
    bool exists = false;
    int admitted = 0;
    for (double t : times) {
        auto next = stored;
        if (limiter::leaky_bucket_acquire(next, exists, l, t).allowed) {
            stored = next;
            exists = true;
            ++admitted;
        }
    }
    return admitted;
}

class RedisStore : public ::testing::Test {
protected:
    void SetUp() override {
        if (!test::redis_server::available()) {
            GTEST_SKIP() << "redis-server is not on PATH";
        }
        server_.emplace();
        settings_ = server_->settings();
        settings_.timeout = 2s;
        client_ = std::make_unique<redis::client>(executor{ioc_.get_executor()},
                                                  redis::client_options::from_settings(settings_));
        client_->start();
        store_ = std::make_unique<redis_store>(*client_, settings_);
    }

    outcome acquire(const checks& c, std::optional<double> now) {
        store_->set_time_override_for_test(now);
        return test::run_coro(ioc_, store_->acquire(c));
    }

    limiter::decision
    acquire_one(const std::string& key, const config::limit& l, std::optional<double> now) {
        auto out = acquire(one(key, l), now);
        EXPECT_FALSE(out.ec) << out.ec.message();
        EXPECT_EQ(out.decisions.size(), 1u);
        return out.decisions.empty() ? limiter::decision{} : out.decisions.front();
    }

    redis::reply command(std::vector<std::string> args) {
        auto [ec, r] = test::run_coro(ioc_, client_->async_command(std::move(args)));
        EXPECT_FALSE(ec) << ec.message() << ": " << r.describe();
        return r;
    }

    /// Replaces the function the store calls with one that runs `body` (Lua; `keys` and `args`
    /// are the call's), as the store's library would be replaced in Redis.
    void stand_in_for_limits(const std::string& body) {
        const auto name = std::string(redis::limits_script.function_name);
        command({"FUNCTION",
                 "LOAD",
                 "REPLACE",
                 "#!lua name=" + name + "\nredis.register_function('" + name +
                     "', function(keys, args) " + body + " end)\n"});
    }

    // HGETALL as a map.
    std::map<std::string, std::string> hash(const std::string& key) {
        auto r = command({"HGETALL", key});
        std::map<std::string, std::string> fields;
        for (std::size_t i = 0; i + 1 < r.elements.size(); i += 2) {
            fields[r.elements[i].str] = r.elements[i + 1].str;
        }
        return fields;
    }

    net::io_context ioc_;
    std::optional<test::redis_server> server_;
    config::redis_settings settings_;
    std::unique_ptr<redis::client> client_;
    std::unique_ptr<redis_store> store_;
};

TEST_F(RedisStore, WorkedExampleFromThePage) {
    const auto l = leaky(50, 5);
    const std::string key = "rate-limit:10.0.0.1:/api";
    for (int i = 0; i < 30; ++i) {
        const auto d = acquire_one(key, l, t0);
        ASSERT_TRUE(d.allowed) << i;
        EXPECT_EQ(d.delay, milliseconds(200 * i));
        EXPECT_EQ(d.remaining, 50 - (i + 1));
        EXPECT_EQ(d.limit, 50);
        EXPECT_EQ(d.window, 10'000ms);
    }
    for (int i = 0; i < 50; ++i) {
        const auto d = acquire_one(key, l, t0);
        if (i < 20) {
            ASSERT_TRUE(d.allowed) << i;
            EXPECT_EQ(d.delay, milliseconds(6000 + 200 * i));
        } else {
            ASSERT_FALSE(d.allowed) << i;
            EXPECT_EQ(d.retry_after, 200ms);
            EXPECT_EQ(d.remaining, 0);
            EXPECT_EQ(d.reset_after, 10'000ms);
        }
    }

    // The page's hash: exactly these two fields, integers printed without a fraction.
    const std::map<std::string, std::string> expected{{"queue_size", "50"},
                                                      {"last_leak_time", "1700000000000"}};
    EXPECT_EQ(hash(key), expected);
    const auto pttl = command({"PTTL", key});
    EXPECT_GT(pttl.integer, 0);
    EXPECT_LE(pttl.integer, settings_.ttl.count());
}

TEST_F(RedisStore, LoadsTheScriptUnderTheEmbeddedSha) {
    const auto loaded = command({"SCRIPT", "LOAD", std::string(redis::limits_script.text)});
    EXPECT_EQ(loaded.str, redis::limits_script.sha1);
    const auto exists = command({"SCRIPT", "EXISTS", std::string(redis::limits_script.sha1)});
    ASSERT_EQ(exists.elements.size(), 1u);
    EXPECT_EQ(exists.elements[0].integer, 1);
}

TEST_F(RedisStore, DecidesByItsFunctionAndLoadsTheLibraryAgainAfterFunctionFlush) {
    const auto l = leaky(10, 1);
    const auto library = [this] {
        return command({"FUNCTION",
                        "LIST",
                        "LIBRARYNAME",
                        std::string(redis::limits_script.function_name)})
            .elements.size();
    };
    const auto fcalls = [this] {
        return test::info_count(command({"INFO", "commandstats"}).str, "cmdstat_fcall:calls=");
    };
    // Loaded when the connection was set up: the first request is decided by FCALL.
    EXPECT_TRUE(acquire_one("k", l, t0).allowed);
    EXPECT_EQ(library(), 1u);
    EXPECT_EQ(fcalls(), 1);
    command({"FUNCTION", "FLUSH"});
    // FCALL answers "Function not found"; the store loads the library and decides this request
    // by EVALSHA, transparently, and the next by FCALL again.
    const auto d = acquire_one("k", l, t0);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 8);
    EXPECT_EQ(library(), 1u);
    EXPECT_EQ(acquire_one("k", l, t0).remaining, 7);
    EXPECT_EQ(fcalls(), 3);
}

// A user an ACL keeps from Redis Functions, as operators who deny FUNCTION do: the store decides
// by EVALSHA, after one refused FCALL (here FCALL itself is denied) or one refused FUNCTION LOAD
// (here FUNCTION is, and the library is missing), and does not try Functions again within the
// pause after giving them up.
TEST_F(RedisStore, AUserWithoutFunctionsDecidesByEvalshaAfterOneRefusal) {
    const auto l = leaky(10, 1);

    struct user {
        const char* name;
        const char* denied;
        long long fcalls;  // FCALLs Redis ran (not those the ACL refused)
        long long refused; // commands the ACL refused
    };

    for (const auto& u :
         {user{"no-fcall", "-fcall", 0, 1}, user{"no-function", "-function", 1, 2}}) {
        SCOPED_TRACE(u.name);
        command({"ACL", "SETUSER", u.name, "on", ">secret", "~*", "&*", "+@all", u.denied});
        command({"FUNCTION", "FLUSH"});
        command({"CONFIG", "RESETSTAT"});
        auto settings = settings_;
        settings.username = u.name;
        settings.password = "secret";
        redis::client limited(executor{ioc_.get_executor()},
                              redis::client_options::from_settings(settings));
        limited.start();
        redis_store store(limited, settings);
        for (int i = 0; i < 3; ++i) {
            store.set_time_override_for_test(t0);
            const auto out =
                test::run_coro(ioc_, store.acquire(one("acl:" + std::string(u.name), l)));
            ASSERT_FALSE(out.ec) << out.ec.message();
            ASSERT_EQ(out.decisions.size(), 1u);
            EXPECT_EQ(out.decisions[0].remaining, 10 - (i + 1));
        }
        const std::string stats = command({"INFO", "commandstats"}).str;
        EXPECT_EQ(test::info_count(stats, "cmdstat_fcall:calls="), u.fcalls) << stats;
        EXPECT_EQ(test::info_count(stats, "cmdstat_evalsha:calls="), 3) << stats;
        // Refused: the first FCALL (no-fcall); or the FUNCTION LOAD of the connection's set-up
        // and the one that the first FCALL's "Function not found" sent (no-function). Nothing
        // after: the store gave Functions up.
        const std::string errors = command({"INFO", "errorstats"}).str;
        EXPECT_EQ(test::info_count(errors, "errorstat_NOPERM:count="), u.refused) << errors;
        limited.stop();
    }
}

// Functions given up are tried again once the pause has passed, so a refusal that passes (an ACL
// changed back, a FUNCTION LOAD refused for OOM or READONLY, Redis upgraded to 7) costs EVALSHA's
// prelude for a while, not until a restart. Here the pause is none: every batch tries FCALL
// first, is refused while the ACL denies it, and decides by FCALL once the ACL allows it.
TEST_F(RedisStore, GivenUpFunctionsAreTriedAgainAfterThePause) {
    const auto l = leaky(10, 1);
    command({"ACL", "SETUSER", "later-fcall", "on", ">secret", "~*", "&*", "+@all", "-fcall"});
    command({"CONFIG", "RESETSTAT"});
    auto settings = settings_;
    settings.username = "later-fcall";
    settings.password = "secret";
    redis::client limited(executor{ioc_.get_executor()},
                          redis::client_options::from_settings(settings));
    limited.start();
    redis_store store(limited, settings);
    store.set_functions_retry_after_for_test(std::chrono::steady_clock::duration::zero());
    store.set_time_override_for_test(t0);
    const auto decide = [&](int expected_remaining) {
        const auto out = test::run_coro(ioc_, store.acquire(one("acl:later-fcall", l)));
        ASSERT_FALSE(out.ec) << out.ec.message();
        ASSERT_EQ(out.decisions.size(), 1u);
        EXPECT_EQ(out.decisions[0].remaining, expected_remaining);
    };
    decide(9);
    decide(8);
    command({"ACL", "SETUSER", "later-fcall", "+fcall"});
    decide(7);
    decide(6);
    const std::string stats = command({"INFO", "commandstats"}).str;
    EXPECT_EQ(test::info_count(stats, "cmdstat_evalsha:calls="), 2) << stats;
    EXPECT_EQ(test::info_count(stats, "cmdstat_fcall:calls="), 2) << stats;
    const std::string errors = command({"INFO", "errorstats"}).str;
    EXPECT_EQ(test::info_count(errors, "errorstat_NOPERM:count="), 2) << errors;
    limited.stop();
}

TEST_F(RedisStore, UsesRedisTimeWithoutAnOverride) {
    const auto time_ms = [this] {
        const auto r = command({"TIME"});
        return std::stod(r.elements.at(0).str) * 1000 +
               std::floor(std::stod(r.elements.at(1).str) / 1000);
    };
    const double before = time_ms();
    EXPECT_TRUE(acquire_one("k", leaky(10, 1), std::nullopt).allowed);
    const double after = time_ms();
    const double stored = std::stod(hash("k").at("last_leak_time"));
    EXPECT_LE(before, stored);
    EXPECT_LE(stored, after);
}

TEST_F(RedisStore, NoDriftAtTwiceTheFlowRate) {
    for (const auto mode : {config::shaping_mode::shape, config::shaping_mode::police}) {
        for (const double rate : {5.0, 3.0}) {
            const auto l = leaky(50, rate, mode);
            const std::string key = "drift:" + std::to_string(rate) +
                                    (mode == config::shaping_mode::shape ? ":shape" : ":police");
            // A client at 2 x flowRate for 60 simulated seconds (every 100 ms, or 166.67 ms).
            std::vector<double> times;
            for (double t = 0; t < 60'000; t += 1000.0 / (2 * rate)) {
                times.push_back(t0 + t);
            }
            int admitted = 0;
            for (double t : times) {
                admitted += acquire_one(key, l, t).allowed ? 1 : 0;
            }
            const auto drained = static_cast<int>(rate * 60);
            EXPECT_GE(admitted, drained) << key;
            EXPECT_LE(admitted, drained + 50) << key;
            EXPECT_EQ(admitted, reference_admitted(l, times)) << key;
        }
    }
}

TEST_F(RedisStore, ChargesEveryLimitOrNone) {
    auto narrow = leaky(1, 1);
    const auto wide = leaky(5, 1);
    const checks both{check{"narrow", &narrow}, check{"wide", &wide}};

    auto first = acquire(both, t0);
    ASSERT_FALSE(first.ec);
    ASSERT_EQ(first.decisions.size(), 2u);
    EXPECT_TRUE(first.decisions[0].allowed);
    EXPECT_TRUE(first.decisions[1].allowed);

    // The narrow limit rejects: the wide one decides "allowed" but is not charged.
    auto second = acquire(both, t0);
    ASSERT_EQ(second.decisions.size(), 2u);
    EXPECT_FALSE(second.decisions[0].allowed);
    EXPECT_TRUE(second.decisions[1].allowed);
    EXPECT_EQ(hash("wide").at("queue_size"), "1");

    // A dry-run limit that rejects does not block the others.
    narrow.dry_run = true;
    auto third = acquire(both, t0);
    ASSERT_EQ(third.decisions.size(), 2u);
    EXPECT_FALSE(third.decisions[0].allowed);
    EXPECT_TRUE(third.decisions[1].allowed);
    EXPECT_EQ(hash("wide").at("queue_size"), "2");
    EXPECT_EQ(hash("narrow").at("queue_size"), "1");
}

TEST_F(RedisStore, UnavailableRedisFollowsTheFailureMode) {
    const auto l = leaky(10, 1);
    ASSERT_TRUE(acquire_one("k", l, t0).allowed);
    server_->stop();
    ASSERT_TRUE(test::run_until(
        ioc_, [this] { return !client_->connected(); }, 5s));

    // open and closed: the error is reported, the caller applies the mode.
    auto out = acquire(one("k", l), t0);
    EXPECT_EQ(out.ec, errc::redis_unavailable);
    EXPECT_TRUE(out.decisions.empty());

    // local: decided on the memory store instead.
    manual_clock clock(t0);
    memory_store local(clock);
    auto local_settings = settings_;
    local_settings.on_failure = config::failure_mode::local;
    redis_store with_fallback(*client_, local_settings, &local);
    for (int i = 0; i < 11; ++i) {
        auto decided = test::run_coro(ioc_, with_fallback.acquire(one("k", l)));
        EXPECT_FALSE(decided.ec);
        ASSERT_EQ(decided.decisions.size(), 1u);
        EXPECT_EQ(decided.decisions[0].allowed, i < 10) << i;
    }
}

TEST_F(RedisStore, ABatchThatFailsFallsBackRequestByRequestOnItsOwnKeys) {
    server_->stop();
    ASSERT_TRUE(test::run_until(
        ioc_, [this] { return !client_->connected(); }, 5s));
    manual_clock clock(t0);
    memory_store local(clock);
    auto local_settings = settings_;
    local_settings.on_failure = config::failure_mode::local;
    redis_store with_fallback(*client_, local_settings, &local);

    // Twelve requests in one turn (one batch) on four keys, three each, capacity two.
    const auto l = leaky(2, 1);
    std::vector<awaitable<outcome>> tasks;
    for (int i = 0; i < 12; ++i) {
        tasks.push_back(with_fallback.acquire(one("k" + std::to_string(i % 4), l)));
    }
    const auto results = test::run_together(ioc_, std::move(tasks));
    ASSERT_EQ(results.size(), 12u);
    for (std::size_t i = 0; i < results.size(); ++i) {
        EXPECT_FALSE(results[i].ec) << i;
        ASSERT_EQ(results[i].decisions.size(), 1u) << i;
        EXPECT_EQ(results[i].decisions[0].allowed, i < 8) << i;
    }
}

TEST_F(RedisStore, TimeoutFollowsTheFailureMode) {
    auto fast = settings_;
    fast.timeout = 100ms;
    auto o = redis::client_options::from_settings(fast);
    redis::client c(executor{ioc_.get_executor()}, o);
    c.start();
    redis_store closed(c, fast);
    closed.set_time_override_for_test(t0);
    const auto l = leaky(10, 1);
    auto ok = test::run_coro(ioc_, closed.acquire(one("k", l)));
    ASSERT_FALSE(ok.ec) << ok.ec.message();

    server_->pause();
    auto out = test::run_coro(ioc_, closed.acquire(one("k", l)));
    EXPECT_EQ(out.ec, errc::redis_timeout);

    manual_clock clock(t0);
    memory_store local(clock);
    fast.on_failure = config::failure_mode::local;
    redis_store with_fallback(c, fast, &local);
    auto decided = test::run_coro(ioc_, with_fallback.acquire(one("k", l)));
    EXPECT_FALSE(decided.ec);
    ASSERT_EQ(decided.decisions.size(), 1u);
    EXPECT_TRUE(decided.decisions[0].allowed);
    server_->resume();
}

// Starts `acquire` of `request_checks` on `s` without running it; its outcome lands in `into`.
void start_acquire(net::io_context& ioc,
                   redis_store& s,
                   const checks& request_checks,
                   std::optional<outcome>& into) {
    net::co_spawn(ioc, s.acquire(request_checks), [&into](std::exception_ptr e, outcome o) {
        ASSERT_FALSE(e);
        into = std::move(o);
    });
}

// While a batch's call is in flight, the requests of the turns that follow wait in the next
// batch, which goes as one call when the reply is in: a busy worker's batches grow with its
// load. Without the hold, each of these turns would send a call of its own (six in all).
TEST_F(RedisStore, RequestsOfLaterTurnsWaitForTheCallInFlightAndShareOne) {
    const auto l = leaky(100, 1, config::shaping_mode::police);
    const auto calls_before = test::script_calls_in(command({"INFO", "commandstats"}).str);
    store_->set_time_override_for_test(t0);
    server_->pause(); // the first call stays in flight until resume()
    std::vector<std::optional<outcome>> results(6);
    const auto request = one("held", l);
    for (auto& r : results) {
        start_acquire(ioc_, *store_, request, r);
        ioc_.poll(); // a turn of its own: it ends with the store's flush
    }
    server_->resume();
    ASSERT_TRUE(test::run_until(ioc_, [&] {
        return std::all_of(
            results.begin(), results.end(), [](const auto& r) { return r.has_value(); });
    }));
    EXPECT_EQ(test::script_calls_in(command({"INFO", "commandstats"}).str) - calls_before, 2);
    // Decided in the order they came, as separate calls would have.
    for (std::size_t i = 0; i < results.size(); ++i) {
        ASSERT_FALSE(results[i]->ec) << i << ": " << results[i]->ec.message();
        ASSERT_EQ(results[i]->decisions.size(), 1u) << i;
        EXPECT_TRUE(results[i]->decisions[0].allowed) << i;
        EXPECT_EQ(results[i]->decisions[0].remaining, 99 - static_cast<std::int64_t>(i)) << i;
    }
}

// A request held behind a call that times out fails with it, at once: it came after that call
// was sent, so sending it then would make it wait a whole `timeout` more, past its own.
TEST_F(RedisStore, ARequestHeldBehindACallThatTimesOutFailsWithIt) {
    auto fast = settings_;
    fast.timeout = 300ms;
    redis::client c(executor{ioc_.get_executor()}, redis::client_options::from_settings(fast));
    c.start();
    redis_store s(c, fast);
    s.set_time_override_for_test(t0);
    const auto l = leaky(10, 1);
    ASSERT_FALSE(test::run_coro(ioc_, s.acquire(one("k", l))).ec); // connected, script loaded

    server_->pause();
    std::optional<outcome> first;
    std::optional<outcome> held;
    start_acquire(ioc_, s, one("k", l), first);
    ioc_.poll(); // its call is sent
    start_acquire(ioc_, s, one("k", l), held);
    using time_point = std::chrono::steady_clock::time_point;
    time_point first_failed;
    time_point held_failed;
    const auto note = [](const std::optional<outcome>& o, time_point& at) {
        if (o.has_value() && at == time_point{}) {
            at = std::chrono::steady_clock::now();
        }
    };
    ASSERT_TRUE(test::run_until(ioc_, [&] {
        note(first, first_failed);
        note(held, held_failed);
        return first.has_value() && held.has_value();
    }));
    server_->resume();
    EXPECT_EQ(first->ec, errc::redis_timeout);
    EXPECT_EQ(held->ec, errc::redis_timeout);
    // Together; sent when the first failed, it would fail a whole timeout later.
    EXPECT_LT(held_failed - first_failed, fast.timeout / 2)
        << std::chrono::duration_cast<milliseconds>(held_failed - first_failed).count() << " ms";
}

// A batch failed with the call it was held behind was never sent: the script took no slot for it,
// and nothing is given back. It named its leases "1", "2", ... (it had no lease prefix), and gave
// those back: here a member "1" planted in its key's set stands in for a lease so named.
TEST_F(RedisStore, ABatchFailedUnsentGivesNoSlotsBack) {
    auto fast = settings_;
    fast.timeout = 300ms;
    redis::client c(executor{ioc_.get_executor()}, redis::client_options::from_settings(fast));
    c.start();
    redis_store s(c, fast);
    s.set_time_override_for_test(t0);
    config::limit l;
    l.algo = config::algorithm::concurrency;
    l.limit_count = 5;
    l.lease = 30s;
    ASSERT_FALSE(test::run_coro(ioc_, s.acquire(one("warm", leaky(10, 1)))).ec); // connected
    command({"ZADD", "held", "1e15", "1"});

    server_->pause();
    std::optional<outcome> first;
    std::optional<outcome> held;
    start_acquire(ioc_, s, one("sent", l), first);
    ioc_.poll(); // its call is sent
    start_acquire(ioc_, s, one("held", l), held);
    ASSERT_TRUE(test::run_until(ioc_, [&] { return first.has_value() && held.has_value(); }));
    server_->resume();
    EXPECT_EQ(first->ec, errc::redis_timeout);
    EXPECT_EQ(held->ec, errc::redis_timeout);

    // The give-backs go on the store's connection, before this PING (or, if they timed out,
    // again with the next decision's reply, before the second).
    const std::vector<std::string> ping{"PING"};
    ASSERT_FALSE(std::get<0>(test::run_coro(ioc_, c.async_command(ping))));
    ASSERT_FALSE(test::run_coro(ioc_, s.acquire(one("warm", leaky(10, 1)))).ec);
    ASSERT_FALSE(std::get<0>(test::run_coro(ioc_, c.async_command(ping))));
    EXPECT_EQ(command({"ZCARD", "sent"}).integer, 0) << "the sent call's slot was kept";
    EXPECT_EQ(command({"ZCARD", "held"}).integer, 1) << "lease \"1\" was given back";
}

TEST_F(RedisStore, FactoryBuildsAStartedStore) {
    auto owned = make_redis_store(executor{ioc_.get_executor()}, settings_, nullptr);
    auto out = test::run_coro(ioc_, owned->acquire(one("factory", leaky(2, 1))));
    ASSERT_FALSE(out.ec) << out.ec.message();
    ASSERT_EQ(out.decisions.size(), 1u);
    EXPECT_TRUE(out.decisions[0].allowed);
}

// The store writes each limit's arguments once and finds them again by the limit's address; a
// reload may put a different limit at an address an old one had. What is sent must be what the
// limit says now.
TEST_F(RedisStore, ALimitChangedInPlaceIsSentAsItIsNow) {
    auto l = leaky(2, 1, config::shaping_mode::police);
    for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(acquire_one("in-place", l, t0).allowed) << i;
    }
    EXPECT_FALSE(acquire_one("in-place", l, t0).allowed);
    // The same object, a larger bucket: three more fit at the same instant.
    l.capacity = 5;
    for (int i = 0; i < 3; ++i) {
        const auto d = acquire_one("in-place", l, t0);
        ASSERT_TRUE(d.allowed) << i;
        EXPECT_EQ(d.limit, 5);
    }
    EXPECT_FALSE(acquire_one("in-place", l, t0).allowed);
    // A slower flow at the same address: one second later, one leaked at 1/s would fit; at
    // 0.5/s none has.
    l.flow_rate = 0.5;
    EXPECT_FALSE(acquire_one("in-place", l, t0 + 1000).allowed);
    EXPECT_TRUE(acquire_one("in-place", l, t0 + 2000).allowed);
}

TEST_F(RedisStore, AnUnknownAlgorithmFailsWithBadReply) {
    config::limit l;
    l.algo = static_cast<config::algorithm>(9);
    auto out = acquire(one("unknown", l), t0);
    EXPECT_EQ(out.ec, errc::bad_reply);
    EXPECT_EQ(command({"EXISTS", "unknown"}).integer, 0);
}

// The limits script's reply for one key as src/redis/limits.lua packs it: allowed, remaining,
// reset_ms, retry_after_ms, delay_ms, level, each 64-bit little-endian, written as a Lua string
// of decimal escapes.
std::string lua_packed_reply(std::int64_t delay) {
    std::string text;
    for (const std::int64_t field : {std::int64_t{1},
                                     std::int64_t{9},
                                     std::int64_t{1000},
                                     std::int64_t{0},
                                     delay,
                                     std::int64_t{1}}) {
        const auto bits = static_cast<std::uint64_t>(field);
        for (int b = 0; b < 8; ++b) {
            text += "\\" + std::to_string((bits >> (8 * b)) & 0xff);
        }
    }
    return text;
}

// A reply's delay is trusted only within the limit's own bound (its max-delay, or the bucket's
// capacity of slots): a larger or negative one is a bad reply, as a malformed one is, and
// follows the failure mode rather than overflowing the hold's end.
TEST_F(RedisStore, ADelayBeyondTheLimitsOwnBoundIsABadReply) {
    // Shaping; without max-delay the bound is 10 slots of 1 s, with a slot and a ms to spare.
    auto l = leaky(10, 1);
    EXPECT_TRUE(acquire_one("delay", l, t0).allowed); // the store's own library, loaded
    const auto decide_with = [&](std::int64_t delay) {
        // The function the store calls, replaced by one that answers `delay`.
        stand_in_for_limits("return \"" + lua_packed_reply(delay) + "\"");
        return acquire(one("delay", l), t0);
    };
    constexpr auto max = std::numeric_limits<std::int64_t>::max();
    for (const std::int64_t bad : {max, max - 999, std::int64_t{-1}, std::int64_t{11'002}}) {
        const auto out = decide_with(bad);
        EXPECT_EQ(out.ec, errc::bad_reply) << bad;
        EXPECT_TRUE(out.decisions.empty()) << bad;
    }
    const auto in_bound = decide_with(9'000);
    ASSERT_FALSE(in_bound.ec) << in_bound.ec.message();
    ASSERT_EQ(in_bound.decisions.size(), 1u);
    EXPECT_EQ(in_bound.decisions[0].delay, 9'000ms);
    l.max_delay = 2'000ms; // the bound: 2 s, and the same to spare
    EXPECT_EQ(decide_with(3'002).ec, errc::bad_reply);
    EXPECT_EQ(decide_with(2'000).decisions.at(0).delay, 2'000ms);
    // A limit that never shapes is never delayed.
    l.mode = config::shaping_mode::police;
    EXPECT_EQ(decide_with(1).ec, errc::bad_reply);
}

// A delay out of bound says the state of that request's key is not what sluice writes; the
// batch's other requests were decided on their own keys and stand.
TEST_F(RedisStore, ADelayBeyondItsBoundFailsItsRequestAloneNotTheBatch) {
    const auto l = leaky(10, 1);
    EXPECT_TRUE(acquire_one("delay", l, t0).allowed); // the store's own library, loaded
    // Two requests in one call: the first's delay breaks the bound (10 slots of 1 s), the
    // second's does not.
    stand_in_for_limits("return \"" + lua_packed_reply(11'002) + lua_packed_reply(9'000) + "\"");
    store_->set_time_override_for_test(t0);
    std::vector<awaitable<outcome>> tasks;
    tasks.push_back(store_->acquire(one("corrupt", l)));
    tasks.push_back(store_->acquire(one("sound", l)));
    const auto results = test::run_together(ioc_, std::move(tasks));
    ASSERT_EQ(results.size(), 2u);
    EXPECT_EQ(results[0].ec, errc::bad_reply);
    EXPECT_TRUE(results[0].decisions.empty());
    ASSERT_FALSE(results[1].ec) << results[1].ec.message();
    ASSERT_EQ(results[1].decisions.size(), 1u);
    EXPECT_EQ(results[1].decisions[0].delay, 9'000ms);
}

// A batch whose reply is refused (malformed, an error, a delay out of bound) may hold
// CONCURRENCY slots in Redis all the same: the script ran. They are released as their requests'
// would be, not left to count against their key for a whole lease with no request behind them.
TEST_F(RedisStore, SlotsTakenByABatchWhoseReplyIsRefusedAreReleased) {
    EXPECT_TRUE(acquire_one("warm", leaky(10, 1), t0).allowed); // the store's own library, loaded
    // The function the store calls, replaced by one that takes the first request's slot as the
    // script would (the lease prefix is its last argument), then fails (an error of a kind of
    // its own: the store logs each kind once per 10 s, and another test counts its lines).
    stand_in_for_limits("redis.call('INCR', 'took'); "
                        "redis.call('ZADD', keys[1], 1e15, args[#args] .. '1'); "
                        "return redis.error_reply('FAKE failed after taking a slot')");
    config::limit l;
    l.algo = config::algorithm::concurrency;
    l.limit_count = 5;
    l.lease = 30s;
    EXPECT_EQ(acquire(one("slots", l), t0).ec, errc::bad_reply);
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    while (command({"ZCARD", "slots"}).integer != 0 &&
           std::chrono::steady_clock::now() < deadline) {
    }
    EXPECT_EQ(command({"GET", "took"}).str, "1") << "the replacement did not run";
    EXPECT_EQ(command({"ZCARD", "slots"}).integer, 0) << "the slot was left for its lease";
}

// A call whose connection is lost after the script ran (its reply never comes: a failover, a reset)
// may hold CONCURRENCY slots in Redis: they are given back once Redis answers again, not left
// for a whole lease. Here Redis drops the connection itself, after running the call, because
// the reply (a stand-in's, 64 KiB) is over the output-buffer limit set for the test.
TEST_F(RedisStore, SlotsOfACallWhoseConnectionWasLostAreGivenBackOnceRedisAnswers) {
    EXPECT_TRUE(acquire_one("warm", leaky(10, 1), t0).allowed); // the store's own library, loaded
    stand_in_for_limits("redis.call('INCR', 'took'); "
                        "redis.call('ZADD', keys[1], 1e15, args[#args] .. '1'); "
                        "return string.rep('x', 65536)");
    command({"CONFIG", "SET", "client-output-buffer-limit", "normal 1024 0 0"});
    config::limit l;
    l.algo = config::algorithm::concurrency;
    l.limit_count = 5;
    l.lease = 30s;
    EXPECT_EQ(acquire(one("slots", l), t0).ec, errc::redis_unavailable);

    // Redis back as it was; the next decision's reply sends the give-back again.
    ASSERT_TRUE(test::run_until(
        ioc_, [&] { return client_->connected(); }, 10s));
    command({"CONFIG", "SET", "client-output-buffer-limit", "normal 0 0 0"});
    command({"FUNCTION", "LOAD", "REPLACE", std::string(redis::limits_script.library)});
    EXPECT_EQ(command({"GET", "took"}).str, "1") << "the stand-in did not run";
    EXPECT_EQ(command({"ZCARD", "slots"}).integer, 1);
    EXPECT_TRUE(acquire_one("after", leaky(10, 1), t0).allowed);
    EXPECT_TRUE(test::run_until(
        ioc_,
        [&] {
            return command({"ZCARD", "slots"}).integer == 0;
        },
        5s))
        << "the slot was left for its lease";
}

// A slot taken with a shorter lease (a reload lowered it) does not shorten the set's expiry under
// a longer lease that has not lapsed: the set would expire with it, and the long request's slot
// stop counting (one more admitted than the limit) before its lease ran out.
TEST_F(RedisStore, AShorterLeaseDoesNotShortenTheSlotSetsExpiry) {
    config::limit l;
    l.algo = config::algorithm::concurrency;
    l.limit_count = 5;
    l.lease = 60s;
    ASSERT_TRUE(acquire(one("leases", l), t0).decisions.at(0).allowed);
    auto shorter = l;
    shorter.lease = 1s; // reloaded
    ASSERT_TRUE(acquire(one("leases", shorter), t0).decisions.at(0).allowed);
    EXPECT_GT(command({"PTTL", "leases"}).integer, 30'000) << "the 60 s lease's set expires early";
}

using test::captured_log;

// Review (Redis store log lines): the limits script's error replies were throttled per text, so
// each new text (a script error naming a number, a key, a line) got a line of its own; and a
// malformed reply was logged whole, however long. Now one line per kind of error per 10 s, and
// at most 128 bytes of a reply, escaped, and no more of it rendered.
TEST_F(RedisStore, RepliesAreLoggedBoundedInNumberAndLength) {
    const auto l = leaky(10, 1);
    EXPECT_TRUE(acquire_one("warm", l, t0).allowed); // the store's own library, loaded
    const auto answer_with = [&](const std::string& body) {
        stand_in_for_limits(body);
    };
    captured_log log;
    answer_with("return redis.error_reply('ERR refused, call ' .. redis.call('INCR', 'calls'))");
    for (int i = 0; i < 100; ++i) {
        EXPECT_EQ(acquire(one("erring", l), t0).ec, errc::bad_reply);
    }
    EXPECT_EQ(command({"GET", "calls"}).str, "100");
    const auto failed = log.lines_with("the limits script failed");
    ASSERT_EQ(failed.size(), 1u) << log.text().substr(0, 4096);
    EXPECT_NE(failed[0].find("ERR refused, call 1"), std::string::npos) << failed[0];

    answer_with("return string.rep('\\1', 100000)");
    EXPECT_EQ(acquire(one("malformed", l), t0).ec, errc::bad_reply);
    const auto unexpected = log.lines_with("unexpected reply to the limits script");
    ASSERT_EQ(unexpected.size(), 1u) << log.text().substr(0, 4096);
    // The reply in quotes, 100,002 bytes, rendered no further than 128 (its quote, 124 bytes
    // and "..."), four bytes each once escaped (the quote and the dots one).
    EXPECT_LT(unexpected[0].size(), 600u);
    EXPECT_NE(unexpected[0].find("\"\\x01\\x01"), std::string::npos) << unexpected[0];
    EXPECT_NE(unexpected[0].find("\\x01..."), std::string::npos) << unexpected[0];
}

// The script's packed request numbers: 32-bit little-endian (see src/redis/limits.lua).
std::string packed(std::initializer_list<std::uint32_t> numbers) {
    std::string out;
    for (const auto n : numbers) {
        for (int b = 0; b < 4; ++b) {
            out.push_back(static_cast<char>((n >> (8 * b)) & 0xff));
        }
    }
    return out;
}

TEST_F(RedisStore, TheScriptRefusesMalformedPackedRequests) {
    // EVAL with one key, now and ttl, and one definition (LEAKY_BUCKET 10, 1/s, police), the
    // requests, and the lease prefix (for CONCURRENCY slots; unused here).
    const auto call = [&](std::string requests, bool with_prefix = true) {
        std::vector<std::string> args{"EVAL", std::string(redis::limits_script.text)};
        for (const char* a :
             {"1", "packed", "1000", "60000", "1", "1", "10", "1", "1", "-1", "0"}) {
            args.emplace_back(a);
        }
        args.push_back(std::move(requests));
        if (with_prefix) {
            args.emplace_back("test:1:");
        }
        return test::run_coro(ioc_, client_->async_command(std::move(args)));
    };
    // Well formed: one request, key 1, definition 1, admitted; six 8-byte fields.
    auto [ok_ec, ok] = call(packed({1, 1, 1}));
    ASSERT_FALSE(ok_ec) << ok.describe();
    ASSERT_EQ(ok.type, redis::reply::kind::string);
    ASSERT_EQ(ok.str.size(), 48u);
    EXPECT_EQ(ok.str[0], 1); // allowed

    for (const auto& bad : {packed({1, 2, 1}),        // no key 2
                            packed({1, 1, 2}),        // no definition 2
                            packed({2, 1, 1}),        // two keys announced, one given
                            packed({0}),              // a request without keys
                            std::string("\1\0\0", 3), // not whole numbers
                            std::string()}) {
        auto [ec, r] = call(bad);
        EXPECT_EQ(ec, errc::bad_reply) << r.describe();
        EXPECT_TRUE(r.str.starts_with("ERR sluice:")) << r.describe();
    }
    // A well-formed request without the lease prefix after it.
    auto [no_prefix_ec, no_prefix] = call(packed({1, 1, 1}), false);
    EXPECT_EQ(no_prefix_ec, errc::bad_reply) << no_prefix.describe();
    EXPECT_TRUE(no_prefix.str.starts_with("ERR sluice:")) << no_prefix.describe();
    // Nothing but the well-formed request was charged.
    EXPECT_EQ(hash("packed")["queue_size"], "1");
}

//------------------------------------------------------------------------------
// The other algorithms' Redis layout (their decisions are the store contract's business:
// tests/unit/store/store_contract_test.cpp)

// limits.lua's format_split for a time of unix-ms magnitude with a fraction of at least 0.1:
// the whole ms, then the fraction's 17 digits.
std::string format_split(const limiter::split_ms& t) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.17f", t.fraction);
    return std::to_string(static_cast<std::int64_t>(t.whole)) + (buffer + 1);
}

TEST_F(RedisStore, TokenBucketIsAHashOfTokensAndLastRefillTime) {
    const auto l = token(5, 3); // T = 333.33 ms: the refill time becomes fractional
    limiter::token_bucket_state reference;
    bool exists = false;
    for (const double t : {t0, t0, t0, t0 + 400, t0 + 900}) {
        ASSERT_TRUE(acquire_one("tokens", l, t).allowed);
        ASSERT_TRUE(limiter::token_bucket_acquire(reference, exists, l, t).allowed);
        exists = true;
    }
    ASSERT_GE(reference.last_refill.fraction, 0.1);
    const std::map<std::string, std::string> expected{
        {"tokens", std::to_string(reference.tokens)},
        {"last_refill_time", format_split(reference.last_refill)}};
    EXPECT_EQ(hash("tokens"), expected);
    // A bucket lives as long as rate-limit.redis.ttl from its last write.
    const auto pttl = command({"PTTL", "tokens"});
    EXPECT_GT(pttl.integer, 0);
    EXPECT_LE(pttl.integer, settings_.ttl.count());
}

// A stored number beyond what sluice writes ("nan", "inf", 1e300: Lua's tonumber reads them all),
// or a sliding window's entry that is no number, is no state of ours: the key starts afresh, as a
// key of another type does. A NaN queue refused every request with a remaining of INT64_MIN (NaN
// packed as an int64), until the key's ttl ran out.
TEST_F(RedisStore, AStoredNumberThatIsNotFiniteIsNoState) {
    const auto bucket = leaky(5, 1, config::shaping_mode::police);
    command({"HSET", "nan-queue", "queue_size", "nan", "last_leak_time", "1699999999000"});
    command({"HSET", "inf-time", "queue_size", "5", "last_leak_time", "inf"});
    const auto window = windowed(config::algorithm::fixed_window, 5, milliseconds(60'000));
    command({"HSET", "inf-count", "count", "-inf", "window_start", "1699999999000"});
    command({"HSET", "huge-queue", "queue_size", "1e300", "last_leak_time", "1699999999000"});
    const auto sliding = windowed(config::algorithm::sliding_window, 5, milliseconds(60'000));
    command({"ZADD", "inf-clock", "0", "=0:inf"});
    // A log with a sound floor whose entries are not ours: a member that is no number, an entry
    // timed at infinity. Lua compared nil and failed the whole batch.
    command({"ZADD", "bad-entry", "-inf", "=0:1699999999000", "1699999999500", "abc"});
    command({"ZADD", "inf-entry", "-inf", "=0:1699999999000", "inf", "0000000000000002"});
    for (const auto& [key, l] : {std::pair{"nan-queue", bucket},
                                 std::pair{"inf-time", bucket},
                                 std::pair{"inf-count", window},
                                 std::pair{"huge-queue", bucket},
                                 std::pair{"inf-clock", sliding},
                                 std::pair{"bad-entry", sliding},
                                 std::pair{"inf-entry", sliding}}) {
        const auto d = acquire_one(key, l, t0);
        EXPECT_TRUE(d.allowed) << key;
        EXPECT_EQ(d.remaining, 4) << key << ": a fresh key's first request";
    }
    EXPECT_EQ(command({"HGET", "nan-queue", "queue_size"}).str, "1") << "rewritten as ours";
}

TEST_F(RedisStore, ATimeStoredAsOneDoubleIsReadAsItsWholeMsAndFraction) {
    // As an earlier sluice wrote a fractional last_leak_time: a full queue of 2, L = t0 - 999.75
    // and T = 1000 ms, so a slot frees at t0 + 0.25: refused at t0 (retry 0.25 ms, rounded up),
    // admitted at t0 + 1.
    const auto l = leaky(2, 1, config::shaping_mode::police);
    command({"HSET", "old", "queue_size", "2", "last_leak_time", "1699999999000.25"});
    const auto refused = acquire_one("old", l, t0);
    EXPECT_FALSE(refused.allowed);
    EXPECT_EQ(refused.retry_after, 1ms);
    EXPECT_TRUE(acquire_one("old", l, t0 + 1).allowed);
    // The leak moved L on one slot, to t0 + 0.25: written back as the whole ms and the
    // fraction's 17 digits.
    EXPECT_EQ(hash("old").at("last_leak_time"), "1700000000000.25000000000000000");
}

TEST_F(RedisStore, FixedWindowIsACountExpiringWithItsWindow) {
    // t0 lies 20 s into the minute that starts at 1699999980000: 40 s are left.
    const auto l = windowed(config::algorithm::fixed_window, 2, 60'000ms);
    EXPECT_TRUE(acquire_one("fixed", l, t0).allowed);
    EXPECT_TRUE(acquire_one("fixed", l, t0 + 1).allowed);
    for (int i = 0; i < 3; ++i) {
        EXPECT_FALSE(acquire_one("fixed", l, t0 + 2).allowed);
    }
    // Rejections are not counted.
    const std::map<std::string, std::string> expected{{"count", "2"},
                                                      {"window_start", "1699999980000"}};
    EXPECT_EQ(hash("fixed"), expected);
    // The key expires one window after the window's end, 40 s + 60 s after the first request:
    // less what has passed (in real time) since the last write set it.
    const auto pttl = command({"PTTL", "fixed"});
    EXPECT_LE(pttl.integer, 100'000 - 1);
    EXPECT_GT(pttl.integer, 90'000);
}

TEST_F(RedisStore, SlidingWindowIsASortedSetOfItsAdmissionsAndAFloor) {
    const std::int64_t limit = 4;
    const auto l = windowed(config::algorithm::sliding_window, limit, 1000ms);
    // Three admissions in one millisecond: three members, all scored with that time, holding the
    // log's running total; and the floor at -inf: base 0, the log's clock.
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(acquire_one("log", l, t0).allowed);
    }
    EXPECT_EQ(command({"TYPE", "log"}).str, "zset");
    const auto members = command({"ZRANGE", "log", "0", "-1", "WITHSCORES"});
    ASSERT_EQ(members.elements.size(), 8u);
    EXPECT_EQ(members.elements[0].str, "=0:1700000000000");
    EXPECT_EQ(members.elements[1].str, "-inf");
    for (std::size_t i = 1; i < 4; ++i) {
        EXPECT_EQ(members.elements[2 * i].str, "000000000000000" + std::to_string(i));
        EXPECT_EQ(members.elements[2 * i + 1].str, "1700000000000");
    }

    std::mt19937 random(11);
    std::uniform_int_distribution<int> gap(0, 150);
    double t = t0;
    int admitted = 0;
    for (int i = 0; i < 500; ++i) {
        t += gap(random);
        const auto d = acquire_one("log", l, t);
        const auto card = command({"ZCARD", "log"}).integer - 1; // the floor aside
        ASSERT_LE(card, limit) << "request " << i;
        if (d.allowed) {
            // What left the window was removed as this admission was logged.
            ASSERT_EQ(card, limit - d.remaining) << "request " << i;
            ++admitted;
        }
    }
    EXPECT_GT(admitted, 100);
    EXPECT_LT(admitted, 500);
    // The log lives until one window after its newest admission leaves the window.
    const auto pttl = command({"PTTL", "log"});
    EXPECT_GT(pttl.integer, 0);
    EXPECT_LE(pttl.integer, 2000);
}

TEST_F(RedisStore, RejectedGlobalWindowLeavesThePerClientBucketUntouched) {
    const auto per_client = leaky(5, 1);
    const auto global = windowed(config::algorithm::sliding_window, 3, 1000ms);
    const auto request = [&](const std::string& client) {
        return checks{check{"rate-limit:" + client + ":/api", &per_client},
                      check{"rate-limit:*:/api", &global}};
    };
    ASSERT_TRUE(acquire(request("10.0.0.2"), t0).decisions.at(1).allowed);
    ASSERT_TRUE(acquire(request("10.0.0.1"), t0).decisions.at(1).allowed);
    ASSERT_TRUE(acquire(request("10.0.0.1"), t0).decisions.at(1).allowed);

    const auto before = hash("rate-limit:10.0.0.2:/api");
    ASSERT_EQ(before.at("queue_size"), "1");
    auto rejected = acquire(request("10.0.0.2"), t0 + 100);
    ASSERT_EQ(rejected.decisions.size(), 2u);
    EXPECT_TRUE(rejected.decisions[0].allowed); // it would have admitted...
    EXPECT_FALSE(rejected.decisions[1].allowed);
    EXPECT_EQ(rejected.decisions[1].retry_after, 900ms);
    EXPECT_EQ(hash("rate-limit:10.0.0.2:/api"), before);           // ...but was not charged
    EXPECT_EQ(command({"ZCARD", "rate-limit:*:/api"}).integer, 4); // three and the floor
}

TEST_F(RedisStore, AnotherAlgorithmsStateIsReplacedNotMixed) {
    const auto l1 = leaky(3, 1);
    const auto l2 = token(3, 1);
    const auto l3 = windowed(config::algorithm::sliding_window, 3, 1000ms);
    const auto l4 = windowed(config::algorithm::fixed_window, 3, 1000ms);
    const auto fields = [this] {
        std::vector<std::string> names;
        for (const auto& [name, value] : hash("k")) {
            names.push_back(name);
        }
        return names;
    };
    ASSERT_TRUE(acquire_one("k", l1, t0).allowed);
    EXPECT_EQ(fields(), (std::vector<std::string>{"last_leak_time", "queue_size"}));
    ASSERT_TRUE(acquire_one("k", l2, t0).allowed);
    EXPECT_EQ(fields(), (std::vector<std::string>{"last_refill_time", "tokens"}));
    ASSERT_TRUE(acquire_one("k", l3, t0).allowed);
    EXPECT_EQ(command({"TYPE", "k"}).str, "zset");
    EXPECT_EQ(command({"ZCARD", "k"}).integer, 2); // one admission and the floor
    ASSERT_TRUE(acquire_one("k", l4, t0).allowed);
    EXPECT_EQ(fields(), (std::vector<std::string>{"count", "window_start"}));
    const auto d = acquire_one("k", l1, t0);
    ASSERT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 2); // a fresh bucket
    EXPECT_EQ(fields(), (std::vector<std::string>{"last_leak_time", "queue_size"}));
}

// With Redis TIME as the clock, keys really go: buckets after rate-limit.redis.ttl, windows at
// their end. Polled with a deadline well above the expiry (Redis expires lazily on access).
TEST_F(RedisStore, KeysExpireWithRedisTime) {
    auto short_ttl = settings_;
    short_ttl.ttl = 200ms;
    redis_store store(*client_, short_ttl);
    const auto window = milliseconds(200);
    const std::vector<std::pair<std::string, config::limit>> limits{
        {"expiring:leaky", leaky(5, 1)},
        {"expiring:token", token(5, 1)},
        {"expiring:fixed", windowed(config::algorithm::fixed_window, 5, window)},
        {"expiring:sliding", windowed(config::algorithm::sliding_window, 5, window)},
    };
    for (const auto& [key, l] : limits) {
        const auto started = std::chrono::steady_clock::now();
        auto out = test::run_coro(ioc_, store.acquire(one(key, l)));
        ASSERT_FALSE(out.ec) << key;
        ASSERT_TRUE(out.decisions.at(0).allowed) << key;
        const auto pttl = command({"PTTL", key}).integer;
        // What the script set (PEXPIRE, relative to its own now): buckets, the ttl; a fixed
        // window, what is left of it (the decision's reset_after) plus one window; a sliding
        // window, until one window after its newest entry (now) leaves it. PTTL reads it at most
        // `elapsed` later; 1 ms for the script's fractional now, written as whole ms. A window
        // kept only to its end (no WINDOW_GRACE) would read a whole window (200 ms) lower.
        std::int64_t set = 0;
        switch (l.algo) {
        case config::algorithm::fixed_window:
            set = out.decisions.at(0).reset_after.count() + window.count();
            break;
        case config::algorithm::sliding_window:
            set = 2 * window.count();
            break;
        default:
            set = short_ttl.ttl.count();
        }
        const auto elapsed =
            std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - started)
                .count();
        EXPECT_GE(pttl, set - elapsed - 1) << key << ", " << elapsed << " ms after the call";
        EXPECT_LE(pttl, set + 1) << key;
    }
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    for (const auto& [key, l] : limits) {
        while (command({"EXISTS", key}).integer != 0 &&
               std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(10ms);
        }
        EXPECT_EQ(command({"EXISTS", key}).integer, 0) << key;
    }
}

} // namespace
} // namespace sluice::store
