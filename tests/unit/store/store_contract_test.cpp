// SPDX-License-Identifier: Apache-2.0
// The store contract: the memory store (C++) and the Redis store (Lua) decide alike, to the
// millisecond, on the shared vectors in tests/vectors/*.txt (one file per algorithm) and on each
// other, request by request, under randomized traffic.

#include "contract_vectors.hpp"
#include "sluice/redis/command_writer.hpp"
#include "sluice/store/memory_store.hpp"
#include "sluice/store/redis_store.hpp"
#include "support/redis_cluster.hpp"
#include "support/redis_server.hpp"
#include "support/run_coro.hpp"

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace sluice::store {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

std::string describe(const limiter::decision& d) {
    std::ostringstream out;
    out << "{allowed " << d.allowed << " limit " << d.limit << " window " << d.window.count()
        << " remaining " << d.remaining << " reset " << d.reset_after.count() << " retry "
        << d.retry_after.count() << " delay " << d.delay.count() << " never_fits " << d.never_fits
        << "}";
    return out.str();
}

//------------------------------------------------------------------------------
// The stores under test, each with a clock the test sets

class memory_backend {
public:
    static bool available() { return true; }

    outcome decide(const checks& c, double now_ms) {
        clock_.set(now_ms);
        return store_.acquire_now(c);
    }

    void release(const slots& taken, double now_ms) {
        clock_.set(now_ms);
        store_.release(taken);
    }

    void settle(std::span<const settlement> adjustments, double now_ms) {
        clock_.set(now_ms);
        store_.settle(adjustments);
    }

private:
    manual_clock clock_;
    memory_store store_{clock_};
};

class redis_backend {
public:
    static bool available() { return test::redis_server::available(); }

    explicit redis_backend(test::redis_server::options server_options = {})
        : server_(std::move(server_options)) {
        auto settings = server_.settings();
        settings.timeout = 5s;
        store_ = std::make_unique<redis_store>(executor{ioc_.get_executor()}, settings, nullptr);
    }

    outcome decide(const checks& c, double now_ms) {
        store_->set_time_override_for_test(now_ms);
        return test::run_coro(ioc_, store_->acquire(c));
    }

    // Starts every request before any runs, so that they all call `acquire` in one turn of the
    // event loop and share script calls; returns their outcomes in order.
    std::vector<outcome> decide_together(const std::vector<checks>& requests, double now_ms) {
        store_->set_time_override_for_test(now_ms);
        std::vector<awaitable<outcome>> tasks;
        for (const auto& c : requests) {
            tasks.push_back(store_->acquire(c));
        }
        return test::run_together(ioc_, std::move(tasks));
    }

    // Script calls Redis has run so far (FCALL, EVALSHA and EVAL), from INFO commandstats.
    std::int64_t script_calls() {
        return test::script_calls_in(command({"INFO", "commandstats"}).str);
    }

    // Gives slots back and waits until Redis ran the release: a command sent after it on the
    // same connection is answered after it.
    void release(const slots& taken, double now_ms) {
        store_->set_time_override_for_test(now_ms);
        store_->release(taken);
        command({"PING"});
    }

    // Settles each on its own call in one turn: they must still share one script call.
    void settle_together(const std::vector<settlement>& adjustments, double now_ms) {
        store_->set_time_override_for_test(now_ms);
        for (const auto& a : adjustments) {
            store_->settle(std::span(&a, 1));
        }
        command({"PING"});
    }

    // Settles and waits until Redis ran the settlement (posted, then sent before the PING).
    void settle(std::span<const settlement> adjustments, double now_ms) {
        store_->set_time_override_for_test(now_ms);
        store_->settle(adjustments);
        command({"PING"});
    }

    // Runs a command on the store's own connection.
    redis::reply command(std::vector<std::string> args) {
        auto [ec, r] = test::run_coro(ioc_, store_->client().async_command(std::move(args)));
        EXPECT_FALSE(ec) << ec.message() << ": " << r.describe();
        return r;
    }

private:
    test::redis_server server_;
    net::io_context ioc_;
    std::unique_ptr<redis_store> store_;
};

// Redis as before version 7, without Functions (FCALL and FUNCTION renamed away, which makes
// Redis answer as one that never knew them): the store decides by EVALSHA.
class redis_without_functions_backend : public redis_backend {
public:
    redis_without_functions_backend()
        : redis_backend(without_functions()) {}

    static test::redis_server::options without_functions() {
        test::redis_server::options o;
        o.extra_args = {"--rename-command", "FCALL", "", "--rename-command", "FUNCTION", ""};
        return o;
    }
};

// The Redis store on a Redis Cluster of 3 primaries and 3 replicas, shared by the tests of this
// binary (a cluster takes about 2 s to build; every test uses keys of its own). A request's keys
// on different slots go as tentative parts, given back where another refused: the contract's
// all-or-none tests hold only if that works.
class cluster_backend {
public:
    static bool available() { return test::redis_cluster::available(); }

    cluster_backend() {
        auto settings = shared_cluster().settings();
        settings.timeout = 5s;
        store_ = std::make_unique<redis_store>(executor{ioc_.get_executor()}, settings, nullptr);
        if (!test::run_until(
                ioc_, [&] { return store_->connected(); }, 15s)) {
            ADD_FAILURE() << "the store did not learn the cluster's map";
        }
    }

    outcome decide(const checks& c, double now_ms) {
        store_->set_time_override_for_test(now_ms);
        auto out = test::run_coro(ioc_, store_->acquire(c));
        sync(c);
        return out;
    }

    void release(const slots& taken, double now_ms) {
        store_->set_time_override_for_test(now_ms);
        store_->release(taken);
        checks keys;
        for (const auto& s : taken) {
            keys.push_back(check{s.key, nullptr});
        }
        sync(keys);
    }

    void settle(std::span<const settlement> adjustments, double now_ms) {
        store_->set_time_override_for_test(now_ms);
        store_->settle(adjustments);
        checks keys;
        for (const auto& a : adjustments) {
            keys.push_back(check{a.key, nullptr});
        }
        sync(keys);
    }

private:
    static test::redis_cluster& shared_cluster() {
        static test::redis_cluster cluster;
        return cluster;
    }

    // Waits until what the store sent about these keys (give-backs, releases, settlements, all
    // posted to run after this turn) has run: a PING on each key's connection is answered after.
    void sync(const checks& keys) {
        // The posted flushes: ready handlers only, nothing waited for.
        ioc_.restart();
        ioc_.poll();
        for (const auto& c : keys) {
            std::string ping;
            redis::command_writer w(ping, 1);
            w.arg(std::string_view("PING"));
            auto [ec, r] = test::run_coro(
                ioc_, store_->cluster()->async_formatted(redis::key_slot(c.key), ping));
            EXPECT_FALSE(ec) << ec.message();
        }
    }

    net::io_context ioc_;
    std::unique_ptr<redis_store> store_;
};

template <typename Backend>
class StoreContract : public ::testing::Test {
protected:
    void SetUp() override {
        if (!Backend::available()) {
            GTEST_SKIP() << "redis-server is not on PATH";
        }
        backend_ = std::make_unique<Backend>();
    }

    limiter::decision decide_one(const std::string& key,
                                 const config::limit& l,
                                 double now_ms,
                                 std::int64_t cost = 1) {
        auto out = backend_->decide(checks{check{key, &l, cost}}, now_ms);
        EXPECT_FALSE(out.ec) << out.ec.message();
        EXPECT_EQ(out.decisions.size(), 1u);
        return out.decisions.empty() ? limiter::decision{} : out.decisions.front();
    }

    // Runs every scenario of one vectors file, each on its own fresh key.
    void run_vectors(const test_vectors::file& f, std::size_t min_scenarios) {
        const auto scenarios = test_vectors::load(f);
        ASSERT_GE(scenarios.size(), min_scenarios) << f.name;
        for (const auto& s : scenarios) {
            const std::string key = std::string("rate-limit:contract:") + f.name + ":" + s.name;
            for (const auto& st : s.steps) {
                SCOPED_TRACE(std::string(f.name) + ":" + std::to_string(st.line) + " (" + s.name +
                             ")");
                if (st.settle) {
                    const settlement a{key, &s.limit, st.delta};
                    backend_->settle(std::span(&a, 1), st.time_ms);
                    continue;
                }
                const auto d = decide_one(key, s.limit, st.time_ms, st.cost);
                ASSERT_EQ(d.allowed, st.allowed) << describe(d);
                ASSERT_EQ(d.never_fits, st.never_fits) << describe(d);
                if (f.algo == config::algorithm::leaky_bucket) {
                    EXPECT_EQ(s.limit.capacity - d.remaining, st.values[0]);
                    EXPECT_EQ(st.allowed ? d.delay.count() : d.retry_after.count(), st.values[1]);
                    continue;
                }
                EXPECT_EQ(d.remaining, st.values[0]);
                EXPECT_EQ(d.retry_after.count(), st.values[1]);
                EXPECT_EQ(d.reset_after.count(), st.values[2]);
                EXPECT_EQ(d.delay.count(), 0);
            }
        }
    }

    std::unique_ptr<Backend> backend_;
};

using backends = ::testing::
    Types<memory_backend, redis_backend, redis_without_functions_backend, cluster_backend>;

class backend_names {
public:
    template <typename T>
    static std::string GetName(int) {
        return std::is_same_v<T, memory_backend>                    ? "Memory"
               : std::is_same_v<T, redis_backend>                   ? "Redis"
               : std::is_same_v<T, redis_without_functions_backend> ? "RedisWithoutFunctions"
                                                                    : "Cluster";
    }
};

TYPED_TEST_SUITE(StoreContract, backends, backend_names);

TYPED_TEST(StoreContract, LeakyBucketVectors) {
    this->run_vectors(test_vectors::files[0], 16);
}

TYPED_TEST(StoreContract, TokenBucketVectors) {
    this->run_vectors(test_vectors::files[1], 13);
}

TYPED_TEST(StoreContract, FixedWindowVectors) {
    this->run_vectors(test_vectors::files[2], 10);
}

TYPED_TEST(StoreContract, SlidingWindowVectors) {
    this->run_vectors(test_vectors::files[3], 15);
}

// Several limits per request: all are charged, or none; a dry-run limit never blocks.
TYPED_TEST(StoreContract, ChargesEveryLimitOrNone) {
    config::limit narrow;
    narrow.capacity = 1;
    narrow.flow_rate = 1;
    auto wide = narrow;
    wide.capacity = 2;
    const checks both{check{"all-or-none:narrow", &narrow}, check{"all-or-none:wide", &wide}};

    auto first = this->backend_->decide(both, 1000);
    ASSERT_EQ(first.decisions.size(), 2u);
    EXPECT_TRUE(first.decisions[0].allowed && first.decisions[1].allowed);

    auto second = this->backend_->decide(both, 1000);
    ASSERT_EQ(second.decisions.size(), 2u);
    EXPECT_FALSE(second.decisions[0].allowed);
    EXPECT_TRUE(second.decisions[1].allowed);

    // The wide limit was not charged by the rejected request: one place left.
    const auto last_place = this->decide_one("all-or-none:wide", wide, 1000);
    EXPECT_TRUE(last_place.allowed);
    EXPECT_EQ(last_place.remaining, 0);
    EXPECT_FALSE(this->decide_one("all-or-none:wide", wide, 1000).allowed);

    auto dry = narrow;
    dry.dry_run = true;
    auto roomy = wide;
    roomy.capacity = 5;
    const checks shadowed{check{"all-or-none:narrow", &dry}, check{"all-or-none:roomy", &roomy}};
    auto third = this->backend_->decide(shadowed, 1000);
    ASSERT_EQ(third.decisions.size(), 2u);
    EXPECT_FALSE(third.decisions[0].allowed);
    EXPECT_TRUE(third.decisions[1].allowed);
    EXPECT_EQ(this->decide_one("all-or-none:roomy", roomy, 1000).remaining, 3);
}

// The same with the other algorithms: a global window that rejects charges no per-client limit.
TYPED_TEST(StoreContract, WindowsAndBucketsChargeEveryLimitOrNone) {
    config::limit per_client;
    per_client.algo = config::algorithm::token_bucket;
    per_client.capacity = 5;
    per_client.refill_rate = 1;
    config::limit global;
    global.algo = config::algorithm::sliding_window;
    global.limit_count = 2;
    global.window = 1000ms;
    config::limit counter;
    counter.algo = config::algorithm::fixed_window;
    counter.limit_count = 10;
    counter.window = 1000ms;
    const auto request = [&](const std::string& client) {
        return checks{check{"mixed:" + client, &per_client},
                      check{"mixed:counter:" + client, &counter},
                      check{"mixed:global", &global}};
    };

    EXPECT_TRUE(this->backend_->decide(request("a"), 5000).decisions.at(2).allowed);
    EXPECT_TRUE(this->backend_->decide(request("b"), 5000).decisions.at(2).allowed);
    for (int i = 0; i < 3; ++i) {
        auto rejected = this->backend_->decide(request("a"), 5100);
        ASSERT_EQ(rejected.decisions.size(), 3u);
        EXPECT_TRUE(rejected.decisions[0].allowed);
        EXPECT_TRUE(rejected.decisions[1].allowed);
        EXPECT_FALSE(rejected.decisions[2].allowed);
        EXPECT_EQ(rejected.decisions[2].retry_after, 900ms);
    }
    // Client a was charged once on each of its limits: the three rejections took nothing.
    EXPECT_EQ(this->decide_one("mixed:a", per_client, 5100).remaining, 3);
    EXPECT_EQ(this->decide_one("mixed:counter:a", counter, 5100).remaining, 8);
}

// A key holding another algorithm's state (the limit changed on reload) starts fresh.
TYPED_TEST(StoreContract, AnotherAlgorithmsStateCountsAsNone) {
    config::limit leaky;
    leaky.capacity = 2;
    leaky.flow_rate = 1;
    leaky.mode = config::shaping_mode::police;
    config::limit token;
    token.algo = config::algorithm::token_bucket;
    token.capacity = 3;
    token.refill_rate = 1;
    config::limit fixed;
    fixed.algo = config::algorithm::fixed_window;
    fixed.limit_count = 2;
    fixed.window = 1000ms;
    auto sliding = fixed;
    sliding.algo = config::algorithm::sliding_window;
    const std::string key = "switched";

    EXPECT_TRUE(this->decide_one(key, leaky, 1000).allowed);
    EXPECT_EQ(this->decide_one(key, leaky, 1000).remaining, 0);
    EXPECT_FALSE(this->decide_one(key, leaky, 1000).allowed);
    for (const config::limit* next : {&token, &sliding, &fixed, &sliding, &token, &leaky}) {
        SCOPED_TRACE(static_cast<int>(next->algo));
        const auto fresh = this->decide_one(key, *next, 1000);
        EXPECT_TRUE(fresh.allowed);
        const std::int64_t quota = next->algo == config::algorithm::leaky_bucket ||
                                           next->algo == config::algorithm::token_bucket
                                       ? next->capacity
                                       : next->limit_count;
        EXPECT_EQ(fresh.remaining, quota - 1);
        // And the state written is this algorithm's own: the next request counts it.
        EXPECT_EQ(this->decide_one(key, *next, 1000).remaining, quota - 2);
    }
}

// A settlement of a key that holds another algorithm's state (a reload turned a cost-weighted
// bucket into CONCURRENCY with the same key while a request ran) leaves that state alone: it
// replaced the slot count with a bucket, after which the slots' releases did nothing and the next
// requests counted from 0, more than the limit at once.
TYPED_TEST(StoreContract, ASettlementLeavesAnotherAlgorithmsStateAlone) {
    config::limit slots;
    slots.algo = config::algorithm::concurrency;
    slots.limit_count = 1;
    const std::string key = "rate-limit:contract:switched-to-slots";
    const checks one{check{key, &slots}};
    auto running = this->backend_->decide(one, 1000);
    ASSERT_EQ(running.slots.size(), 1u);

    config::limit leaky;
    leaky.capacity = 10;
    leaky.flow_rate = 1;
    config::limit token;
    token.algo = config::algorithm::token_bucket;
    token.capacity = 10;
    token.refill_rate = 1;
    config::limit fixed;
    fixed.algo = config::algorithm::fixed_window;
    fixed.limit_count = 10;
    fixed.window = 1000ms;
    auto sliding = fixed;
    sliding.algo = config::algorithm::sliding_window;
    for (const config::limit* old : {&leaky, &token, &fixed, &sliding}) {
        SCOPED_TRACE(static_cast<int>(old->algo));
        const settlement charge{key, old, 5};
        this->backend_->settle(std::span(&charge, 1), 1100);
        EXPECT_FALSE(this->backend_->decide(one, 1100).decisions[0].allowed)
            << "the slot is still taken";
    }
    this->backend_->release(running.slots, 1200);
    auto next = this->backend_->decide(one, 1200);
    EXPECT_TRUE(next.decisions[0].allowed) << "and its release gave it back";
    this->backend_->release(next.slots, 1200);
}

// CONCURRENCY: `limit` slots; a refusal takes none; a slot given back is free at once and is
// never given back twice; the decision reports free slots, the quota, no window, no reset and
// no retry estimate.
TYPED_TEST(StoreContract, ConcurrencySlotsAreTakenAndGivenBack) {
    config::limit l;
    l.algo = config::algorithm::concurrency;
    l.limit_count = 2;
    const std::string key = "rate-limit:contract:concurrency";
    const checks one{check{key, &l}};

    auto first = this->backend_->decide(one, 1000);
    ASSERT_EQ(first.decisions.size(), 1u);
    EXPECT_TRUE(first.decisions[0].allowed);
    EXPECT_EQ(first.decisions[0].remaining, 1);
    EXPECT_EQ(first.decisions[0].limit, 2);
    EXPECT_TRUE(first.decisions[0].in_flight);
    EXPECT_EQ(first.decisions[0].window, 0ms);
    ASSERT_EQ(first.slots.size(), 1u);
    EXPECT_EQ(first.slots[0].key, key);

    auto second = this->backend_->decide(one, 1000);
    ASSERT_EQ(second.slots.size(), 1u);
    EXPECT_EQ(second.decisions[0].remaining, 0);

    auto third = this->backend_->decide(one, 1000);
    ASSERT_EQ(third.decisions.size(), 1u);
    EXPECT_FALSE(third.decisions[0].allowed);
    EXPECT_EQ(third.decisions[0].remaining, 0);
    EXPECT_EQ(third.decisions[0].retry_after, 0ms);
    EXPECT_TRUE(third.slots.empty()) << "a refusal takes no slot";

    this->backend_->release(first.slots, 1100);
    auto fourth = this->backend_->decide(one, 1100);
    EXPECT_TRUE(fourth.decisions[0].allowed) << "the slot given back is free";
    EXPECT_EQ(fourth.decisions[0].remaining, 0);
    EXPECT_FALSE(this->backend_->decide(one, 1100).decisions[0].allowed);

    this->backend_->release(second.slots, 1200);
    this->backend_->release(fourth.slots, 1200);
    EXPECT_EQ(this->decide_one(key, l, 1200).remaining, 1);
}

// More slots held than the limit allows (a reload lowered it while they were held, or another
// instance runs a higher one): refused with no slot free, never a negative count (which would
// make the verdict pick this limit's headers over another's 0 on Redis and not on memory); and
// once enough are given back, the lowered limit admits again.
TYPED_TEST(StoreContract, ConcurrencyAboveALoweredLimitReportsNoSlotFree) {
    config::limit l;
    l.algo = config::algorithm::concurrency;
    l.limit_count = 3;
    const std::string key = "rate-limit:contract:lowered";
    const checks three{check{key, &l}};
    std::vector<outcome> held;
    for (int i = 0; i < 3; ++i) {
        held.push_back(this->backend_->decide(three, 1000));
        ASSERT_EQ(held.back().slots.size(), 1u);
    }

    config::limit lowered = l;
    lowered.limit_count = 1; // reloaded
    const auto refused = this->decide_one(key, lowered, 1000);
    EXPECT_FALSE(refused.allowed);
    EXPECT_EQ(refused.remaining, 0);
    EXPECT_EQ(refused.limit, 1);

    for (auto& o : held) {
        this->backend_->release(o.slots, 1100);
    }
    const auto admitted = this->decide_one(key, lowered, 1100);
    EXPECT_TRUE(admitted.allowed);
    EXPECT_EQ(admitted.remaining, 0);
}

// A concurrency limit with a rate limit in one request: a request the window refuses takes no
// slot, and one the concurrency limit refuses is not counted by the window.
TYPED_TEST(StoreContract, ConcurrencyChargesWithTheOtherLimitsOrNot) {
    config::limit slots_limit;
    slots_limit.algo = config::algorithm::concurrency;
    slots_limit.limit_count = 1;
    config::limit window;
    window.algo = config::algorithm::fixed_window;
    window.limit_count = 2;
    window.window = 60'000ms;
    const checks both{check{"mixed-slots:c", &slots_limit}, check{"mixed-slots:w", &window}};

    auto first = this->backend_->decide(both, 1000);
    ASSERT_EQ(first.decisions.size(), 2u);
    EXPECT_TRUE(first.decisions[0].allowed && first.decisions[1].allowed);
    ASSERT_EQ(first.slots.size(), 1u);
    // The slot is taken: refused, and the window does not count it.
    auto busy = this->backend_->decide(both, 1000);
    EXPECT_FALSE(busy.decisions[0].allowed);
    EXPECT_TRUE(busy.slots.empty());
    this->backend_->release(first.slots, 1000);
    auto again = this->backend_->decide(both, 1000);
    EXPECT_TRUE(again.decisions[0].allowed && again.decisions[1].allowed);
    EXPECT_EQ(again.decisions[1].remaining, 0);
    this->backend_->release(again.slots, 1000);
    // The window refuses: no slot is taken (the next request of the slot alone finds it free).
    auto refused = this->backend_->decide(both, 1000);
    EXPECT_FALSE(refused.decisions[1].allowed);
    EXPECT_TRUE(refused.slots.empty());
    EXPECT_EQ(this->decide_one("mixed-slots:c", slots_limit, 1000).remaining, 0);
}

//------------------------------------------------------------------------------
// Both stores side by side: every field of every decision is identical.

class StoreContractAgreement : public ::testing::Test {
protected:
    void SetUp() override {
        if (!redis_backend::available()) {
            GTEST_SKIP() << "redis-server is not on PATH";
        }
        redis_ = std::make_unique<redis_backend>();
    }

    // Decides `c` on both stores; returns false (after reporting) when they disagree.
    bool agree(const checks& c, double now_ms, outcome* decided = nullptr) {
        auto from_memory = memory_.decide(c, now_ms);
        auto from_redis = redis_->decide(c, now_ms);
        EXPECT_FALSE(from_redis.ec) << from_redis.ec.message();
        EXPECT_EQ(from_memory.decisions.size(), c.size());
        bool same = from_memory.decisions.size() == from_redis.decisions.size();
        for (std::size_t i = 0; same && i < c.size(); ++i) {
            const auto& m = from_memory.decisions[i];
            const auto& r = from_redis.decisions[i];
            if (m != r) {
                ADD_FAILURE() << "at " << std::fixed << now_ms << ", check " << i << " ("
                              << c[i].key << "):\n memory " << describe(m) << "\n redis  "
                              << describe(r);
                same = false;
            }
        }
        if (decided != nullptr) {
            *decided = std::move(from_memory);
        }
        return same;
    }

    void settle_both(const settlement& a, double now_ms) {
        memory_.settle(std::span(&a, 1), now_ms);
        redis_->settle(std::span(&a, 1), now_ms);
    }

    memory_backend memory_;
    std::unique_ptr<redis_backend> redis_;
};

TEST_F(StoreContractAgreement, MemoryAndRedisDecideIdenticallyOnTheVectors) {
    for (const auto& f : test_vectors::files) {
        for (const auto& s : test_vectors::load(f)) {
            const std::string key = std::string("rate-limit:agreement:") + f.name + ":" + s.name;
            for (const auto& st : s.steps) {
                SCOPED_TRACE(std::string(f.name) + ":" + std::to_string(st.line) + " (" + s.name +
                             ")");
                if (st.settle) {
                    settle_both(settlement{key, &s.limit, st.delta, false}, st.time_ms);
                    continue;
                }
                ASSERT_TRUE(agree(checks{check{key, &s.limit, st.cost}}, st.time_ms));
            }
        }
    }
}

// Random traffic: mostly forward, some requests in the same ms, occasional steps back, long
// idle gaps now and then, and sub-ms readings that both stores must floor alike.
class random_clock {
public:
    random_clock(std::uint64_t seed, int max_gap_ms)
        : random_(seed)
        , max_gap_(max_gap_ms) {}

    double next() {
        const int roll = pick(0, 99);
        if (roll < 15) {
            // the same millisecond
        } else if (roll < 19) {
            t_ -= pick(1, 2 * max_gap_);
        } else if (roll < 20) {
            t_ += pick(10 * max_gap_, 100 * max_gap_);
        } else {
            t_ += pick(1, max_gap_);
        }
        return t_ + (pick(0, 9) == 0 ? 0.75 : 0.0);
    }

    int pick(int low, int high) { return std::uniform_int_distribution<int>(low, high)(random_); }

private:
    std::mt19937_64 random_;
    int max_gap_;
    double t_ = 1'700'000'000'000.0;
};

config::limit make(config::algorithm algo, std::int64_t n, double rate, milliseconds window) {
    config::limit l;
    l.algo = algo;
    l.capacity = n;
    l.limit_count = n;
    l.flow_rate = rate;
    l.refill_rate = rate;
    l.window = window;
    return l;
}

// A settled debt as large as a cost may be (2^53) at a slow rate: its reset and retry-after
// pass what an int64 holds in milliseconds, and both stores give the int64 maximum (the
// script's packing wrapped them to negatives: Retry-After 1). The key's expiry, as long, is
// bounded, so that Redis does not refuse the settlement's PEXPIRE.
TEST_F(StoreContractAgreement, AnEnormousDebtSaturatesAlike) {
    for (const auto algo : {config::algorithm::leaky_bucket, config::algorithm::token_bucket}) {
        const auto l = make(algo, 10, 0.5, 0ms);
        const std::string key = "rate-limit:debt:" + std::to_string(static_cast<int>(algo));
        const double now = 1'700'000'000'000.0;
        ASSERT_TRUE(agree(checks{check{key, &l, 1}}, now));
        settle_both(settlement{key, &l, std::int64_t{1} << 53, false}, now);
        outcome refused;
        ASSERT_TRUE(agree(checks{check{key, &l, 1}}, now + 1000, &refused));
        ASSERT_EQ(refused.decisions.size(), 1u);
        EXPECT_FALSE(refused.decisions[0].allowed);
        EXPECT_EQ(refused.decisions[0].retry_after.count(),
                  std::numeric_limits<std::int64_t>::max());
        EXPECT_GT(redis_->command({"PTTL", key}).integer, 0) << "the settlement's PEXPIRE failed";
    }
}

TEST_F(StoreContractAgreement, RandomizedTrafficDecidesIdenticallyPerAlgorithm) {
    using config::algorithm;

    struct variant {
        config::limit limit;
        int max_gap_ms;
    };

    std::vector<variant> variants{
        {make(algorithm::leaky_bucket, 4, 3, 0ms), 250},
        {make(algorithm::leaky_bucket, 21, 0.7, 0ms), 500}, // capacity x T = 30000.000000000004
        {make(algorithm::token_bucket, 5, 3.3, 0ms), 150},
        {make(algorithm::token_bucket, 33, 3.3, 0ms), 80}, // capacity x T = 10000.000000000002
        {make(algorithm::fixed_window, 5, 0, 1000ms), 100},
        {make(algorithm::fixed_window, 3, 0, 1500ms), 400},
        {make(algorithm::sliding_window, 5, 0, 1000ms), 200},
        {make(algorithm::sliding_window, 2, 0, 250ms), 200},
    };
    variants[0].limit.max_delay = 700ms;
    variants[1].limit.mode = config::shaping_mode::police;

    for (std::size_t v = 0; v < variants.size(); ++v) {
        SCOPED_TRACE("variant " + std::to_string(v));
        random_clock clock(20261129 + v, variants[v].max_gap_ms);
        int admitted = 0;
        int rejected = 0;
        for (int i = 0; i < 2000; ++i) {
            const std::string key =
                "diff:" + std::to_string(v) + ":" + std::to_string(clock.pick(0, 2));
            const checks c{check{key, &variants[v].limit}};
            outcome decided;
            ASSERT_TRUE(agree(c, clock.next(), &decided)) << "request " << i;
            (decided.decisions.at(0).allowed ? admitted : rejected) += 1;
        }
        // Both branches were exercised, many times.
        EXPECT_GE(admitted, 200);
        EXPECT_GE(rejected, 200);
    }
}

// Cost-weighted traffic: random costs (now and then more than the limit holds) and settlements
// (refunds, and charges that leave debts), on both stores; every decision identical.
TEST_F(StoreContractAgreement, RandomizedCostsAndSettlementsDecideIdentically) {
    using config::algorithm;

    struct variant {
        config::limit limit;
        int max_gap_ms;
    };

    std::vector<variant> variants{
        {make(algorithm::token_bucket, 100, 10, 0ms), 150},
        {make(algorithm::token_bucket, 33, 3.3, 0ms), 100}, // T = 303.03 ms
        {make(algorithm::leaky_bucket, 20, 3, 0ms), 150},   // shape, max_delay below
        {make(algorithm::leaky_bucket, 21, 0.7, 0ms), 500}, // police
        {make(algorithm::fixed_window, 50, 0, 1000ms), 100},
        {make(algorithm::fixed_window, 12, 0, 1500ms), 300},
        {make(algorithm::sliding_window, 50, 0, 1000ms), 100},
        {make(algorithm::sliding_window, 12, 0, 1500ms), 300},
    };
    variants[2].limit.max_delay = 4000ms;
    variants[3].limit.mode = config::shaping_mode::police;

    for (std::size_t v = 0; v < variants.size(); ++v) {
        SCOPED_TRACE("variant " + std::to_string(v));
        const auto& l = variants[v].limit;
        const int quota = static_cast<int>(
            l.algo == algorithm::fixed_window || l.algo == algorithm::sliding_window ? l.limit_count
                                                                                     : l.capacity);
        random_clock clock(20261201 + v, variants[v].max_gap_ms);
        int admitted = 0;
        int rejected = 0;
        int never = 0;
        for (int i = 0; i < 1500; ++i) {
            const std::string key =
                "cost:" + std::to_string(v) + ":" + std::to_string(clock.pick(0, 2));
            const double now = clock.next();
            if (clock.pick(0, 3) == 0) {
                // Mostly refunds of part of a reservation; now and then a charge, which may
                // leave a debt.
                const int delta =
                    clock.pick(0, 3) == 0 ? clock.pick(1, quota) : clock.pick(-quota / 2, 0);
                const settlement a{key, &l, delta};
                settle_both(a, now);
                continue;
            }
            const int roll = clock.pick(0, 19);
            // Mostly 1 or a small cost; now and then up to the quota, or more than it holds.
            std::int64_t cost = 1;
            if (roll == 0) {
                cost = clock.pick(quota + 1, 3 * quota);
            } else if (roll == 1) {
                cost = clock.pick(1, quota);
            } else if (roll >= 8) {
                cost = clock.pick(1, std::max(1, quota / 5));
            }
            const checks c{check{key, &l, cost}};
            outcome decided;
            ASSERT_TRUE(agree(c, now, &decided)) << "request " << i << ", cost " << cost;
            const auto& d = decided.decisions.at(0);
            EXPECT_EQ(d.never_fits, cost > quota);
            EXPECT_GE(d.remaining, 0);
            EXPECT_LE(d.remaining, quota);
            (d.allowed ? admitted : rejected) += 1;
            never += d.never_fits ? 1 : 0;
        }
        EXPECT_GE(admitted, 100);
        EXPECT_GE(rejected, 100);
        EXPECT_GE(never, 20);
    }
}

TEST_F(StoreContractAgreement, RandomizedMultiLimitRequestsDecideIdentically) {
    using config::algorithm;
    auto per_client = make(algorithm::leaky_bucket, 3, 2, 0ms);
    per_client.max_delay = 800ms;
    const auto global = make(algorithm::sliding_window, 6, 0, 1000ms);
    auto shadow = make(algorithm::fixed_window, 2, 0, 500ms);
    shadow.dry_run = true;
    const auto global_tokens = make(algorithm::token_bucket, 4, 5, 0ms);
    // Limits whose keys coincide (the same key parts): the last one's state is what is kept.
    const auto burst = make(algorithm::fixed_window, 3, 0, 1000ms);
    const auto sustained = make(algorithm::fixed_window, 10, 0, 5000ms);
    const auto shared_tokens = make(algorithm::token_bucket, 3, 2, 0ms);

    random_clock clock(7, 250);
    int admitted = 0;
    int rejected = 0;
    for (int i = 0; i < 2000; ++i) {
        const std::string client = std::to_string(clock.pick(0, 2));
        checks c;
        if (clock.pick(0, 3) != 0) {
            c = {check{"multi:" + client, &per_client},
                 check{"multi:global", &global},
                 check{"multi:shadow:" + client, &shadow},
                 check{"multi:tokens", &global_tokens}};
        } else {
            const std::string shared = "multi:shared:" + client;
            c = {check{shared, &burst}, check{shared, &sustained}, check{shared, &shared_tokens}};
        }
        outcome decided;
        ASSERT_TRUE(agree(c, clock.next(), &decided)) << "request " << i;
        bool passed = true;
        for (std::size_t k = 0; k < c.size(); ++k) {
            passed = passed && (decided.decisions.at(k).allowed || c[k].limit->dry_run);
        }
        (passed ? admitted : rejected) += 1;
    }
    EXPECT_GE(admitted, 200);
    EXPECT_GE(rejected, 200);
}

//------------------------------------------------------------------------------
// Batches: requests that reach the Redis store in one turn share one script call, and decide
// exactly as one after the other would.

class StoreBatchAgreement : public StoreContractAgreement {
protected:
    // Decides `requests` together on Redis and one by one on the memory store, at one instant;
    // returns how many the first limit admitted.
    int agree_together(const std::vector<checks>& requests, double now_ms) {
        const auto from_redis = redis_->decide_together(requests, now_ms);
        int admitted = 0;
        for (std::size_t i = 0; i < requests.size(); ++i) {
            const auto from_memory = memory_.decide(requests[i], now_ms);
            EXPECT_FALSE(from_redis[i].ec) << "request " << i << ": " << from_redis[i].ec.message();
            if (from_redis[i].decisions.size() != requests[i].size()) {
                ADD_FAILURE() << "request " << i << ": " << from_redis[i].decisions.size()
                              << " decisions for " << requests[i].size() << " checks";
                return admitted;
            }
            for (std::size_t k = 0; k < requests[i].size(); ++k) {
                const auto& m = from_memory.decisions.at(k);
                const auto& r = from_redis[i].decisions[k];
                if (m != r) {
                    ADD_FAILURE() << "request " << i << " of " << requests.size() << ", check " << k
                                  << " (" << requests[i][k].key << "):\n memory " << describe(m)
                                  << "\n redis  " << describe(r);
                    return admitted;
                }
            }
            admitted += from_redis[i].decisions[0].allowed ? 1 : 0;
        }
        return admitted;
    }
};

TEST_F(StoreBatchAgreement, ABurstOnOneKeySharesOneCallAndMatchesThePage) {
    config::limit page;
    page.capacity = 50;
    page.flow_rate = 5;
    const std::vector<checks> burst(80, checks{check{"rate-limit:10.0.0.1:/api", &page}});
    const auto before = redis_->script_calls();
    const auto outcomes = redis_->decide_together(burst, 1'700'000'000'000.0);
    EXPECT_EQ(redis_->script_calls() - before, 1);
    // The page's worked example, all in one instant: 50 admitted 200 ms apart, 30 refused.
    for (std::size_t i = 0; i < outcomes.size(); ++i) {
        ASSERT_FALSE(outcomes[i].ec) << outcomes[i].ec.message();
        const auto& d = outcomes[i].decisions.at(0);
        EXPECT_EQ(d.allowed, i < 50) << i;
        EXPECT_EQ(d.delay, i < 50 ? milliseconds(200 * static_cast<int>(i)) : 0ms) << i;
        EXPECT_EQ(d.remaining, i < 50 ? 49 - static_cast<std::int64_t>(i) : 0) << i;
        if (i >= 50) {
            EXPECT_EQ(d.retry_after, 200ms) << i;
        }
    }
}

// The settlements of one event-loop turn share one script call, and apply in order.
TEST_F(StoreBatchAgreement, SettlementsOfOneTurnShareOneCall) {
    const auto tokens = make(config::algorithm::token_bucket, 100, 10, 0ms);
    const auto window = make(config::algorithm::fixed_window, 10, 0, 1000ms);
    const auto sliding = make(config::algorithm::sliding_window, 10, 0, 1000ms);
    const double now = 1'700'000'000'000.0;
    const std::vector<checks> reserve{checks{check{"settle:a", &tokens, 60}},
                                      checks{check{"settle:b", &tokens, 30}},
                                      checks{check{"settle:w", &window, 8}}};
    agree_together(reserve, now);
    const std::vector<settlement> adjustments{{"settle:a", &tokens, -50},
                                              {"settle:b", &tokens, 20},
                                              {"settle:a", &tokens, 5},
                                              {"settle:w", &window, -3},
                                              {"settle:w", &window, -30},
                                              {"settle:none", &tokens, -7},
                                              {"settle:s", &sliding, 5}};
    const auto before = redis_->script_calls();
    redis_->settle_together(adjustments, now);
    EXPECT_EQ(redis_->script_calls() - before, 1);
    memory_.settle(adjustments, now);
    // a: 100 - 60 + 50 - 5 = 85 tokens; b: 100 - 30 - 20 = 50; w: count 8 - 3 - 30, never below 0.
    const std::vector<checks> probe{checks{check{"settle:a", &tokens, 85}},
                                    checks{check{"settle:b", &tokens, 51}},
                                    checks{check{"settle:w", &window, 10}},
                                    checks{check{"settle:none", &tokens, 100}}};
    const auto from_redis = redis_->decide_together(probe, now);
    ASSERT_EQ(from_redis.size(), probe.size());
    EXPECT_TRUE(from_redis[0].decisions.at(0).allowed);
    EXPECT_FALSE(from_redis[1].decisions.at(0).allowed);
    EXPECT_EQ(from_redis[1].decisions.at(0).retry_after, 100ms);
    EXPECT_TRUE(from_redis[2].decisions.at(0).allowed);
    EXPECT_TRUE(from_redis[3].decisions.at(0).allowed);
    for (std::size_t i = 0; i < probe.size(); ++i) {
        EXPECT_EQ(memory_.decide(probe[i], now).decisions.at(0), from_redis[i].decisions.at(0))
            << i;
    }
}

TEST_F(StoreBatchAgreement, BatchesStopAtTheirLimit) {
    config::limit l;
    l.capacity = 1000;
    l.flow_rate = 10;
    std::vector<checks> many;
    for (std::size_t i = 0; i < 2 * redis_store::max_batch + 1; ++i) {
        many.push_back(checks{check{"rate-limit:batch:" + std::to_string(i % 7), &l}});
    }
    const auto before = redis_->script_calls();
    agree_together(many, 1'700'000'000'000.0);
    EXPECT_EQ(redis_->script_calls() - before, 3);
}

TEST_F(StoreBatchAgreement, AFlushedFunctionLibraryCostsABatchOneRetryAndIsLoadedAgain) {
    config::limit l;
    l.capacity = 3;
    l.flow_rate = 1;
    const auto burst = [&l](const std::string& name) {
        std::vector<checks> requests;
        for (int i = 0; i < 10; ++i) {
            requests.push_back(checks{check{"rate-limit:" + name + std::to_string(i % 2), &l}});
        }
        return requests;
    };
    redis_->command({"FUNCTION", "FLUSH"});
    auto before = redis_->script_calls();
    // Every request decided, none failed: the refused FCALL, then the batch again by EVALSHA.
    EXPECT_EQ(agree_together(burst("function-flushed:"), 1'700'000'000'000.0), 6);
    EXPECT_EQ(redis_->script_calls() - before, 2);
    // The refusal loaded the library again: the next batch is one FCALL.
    const auto library = redis_->command(
        {"FUNCTION", "LIST", "LIBRARYNAME", std::string(redis::limits_script.function_name)});
    EXPECT_EQ(library.elements.size(), 1u) << library.describe();
    before = redis_->script_calls();
    EXPECT_EQ(agree_together(burst("function-reloaded:"), 1'700'000'000'000.0), 6);
    EXPECT_EQ(redis_->script_calls() - before, 1);
}

TEST_F(StoreBatchAgreement, WithoutTheLibraryAndTheScriptABatchFallsBackTwiceToEval) {
    config::limit l;
    l.capacity = 3;
    l.flow_rate = 1;
    std::vector<checks> requests;
    for (int i = 0; i < 10; ++i) {
        requests.push_back(checks{check{"rate-limit:all-flushed:" + std::to_string(i % 2), &l}});
    }
    redis_->command({"FUNCTION", "FLUSH"});
    redis_->command({"SCRIPT", "FLUSH"});
    const auto before = redis_->script_calls();
    // FCALL: no such function; EVALSHA: NOSCRIPT; EVAL decides, and loads the script.
    EXPECT_EQ(agree_together(requests, 1'700'000'000'000.0), 6);
    EXPECT_EQ(redis_->script_calls() - before, 3);
}

// Redis before 7: the FCALL refused at the first request is the last; every call after it is
// an EVALSHA, one per request here (each awaited before the next).
TEST(StoreWithoutFunctions, TriesFCallOnceThenDecidesByEvalsha) {
    if (!redis_backend::available()) {
        GTEST_SKIP() << "redis-server is not on PATH";
    }
    redis_without_functions_backend redis;
    config::limit l;
    l.capacity = 3;
    l.flow_rate = 1;
    const checks request{check{"rate-limit:without-functions", &l}};
    int admitted = 0;
    for (int i = 0; i < 5; ++i) {
        const auto out = redis.decide(request, 1'700'000'000'000.0);
        ASSERT_FALSE(out.ec) << out.ec.message();
        ASSERT_EQ(out.decisions.size(), 1u);
        admitted += out.decisions[0].allowed ? 1 : 0;
    }
    EXPECT_EQ(admitted, 3);
    // Unknown commands are not in commandstats: these are the five EVALSHA.
    EXPECT_EQ(redis.script_calls(), 5);
    // The errors Redis answered: the FUNCTION LOAD of the connection's set-up, the first FCALL.
    const std::string errors = redis.command({"INFO", "errorstats"}).str;
    EXPECT_EQ(test::info_count(errors, "errorstat_ERR:count="), 2) << errors;
}

TEST_F(StoreBatchAgreement, RandomizedBatchesDecideAsOneAfterTheOther) {
    using config::algorithm;
    auto shaped = make(algorithm::leaky_bucket, 4, 3, 0ms);
    shaped.max_delay = 700ms;
    auto policed = make(algorithm::leaky_bucket, 3, 2, 0ms);
    policed.mode = config::shaping_mode::police;
    const auto tokens = make(algorithm::token_bucket, 5, 3.3, 0ms);
    const auto fixed = make(algorithm::fixed_window, 4, 0, 1000ms);
    const auto sliding = make(algorithm::sliding_window, 3, 0, 500ms);
    auto shadow = make(algorithm::fixed_window, 2, 0, 500ms);
    shadow.dry_run = true;
    const std::vector<const config::limit*> limits{
        &shaped, &policed, &tokens, &fixed, &sliding, &shadow};
    // Limits of one request on one key: the last one's state is what is kept.
    const auto burst = make(algorithm::fixed_window, 3, 0, 1000ms);
    const auto sustained = make(algorithm::fixed_window, 6, 0, 5000ms);

    random_clock clock(20261130, 300);
    int admitted = 0;
    int rejected = 0;
    for (int batch = 0; batch < 150; ++batch) {
        std::vector<checks> requests(static_cast<std::size_t>(clock.pick(1, 40)));
        for (auto& c : requests) {
            // Few keys, so that requests of one batch share them; now and then a key changes
            // algorithm within a batch (a reload), or a request has several limits, on several
            // keys or on one.
            const auto key = [&] {
                return "batch:" + std::to_string(clock.pick(0, 4));
            };
            const bool mixed = clock.pick(0, 19) == 0;
            const auto* first = mixed ? limits[static_cast<std::size_t>(clock.pick(0, 5))]
                                      : limits[static_cast<std::size_t>(batch) % limits.size()];
            const int shape = clock.pick(0, 9);
            if (shape == 0) {
                const auto shared = key() + ":shared";
                c = {check{shared, &burst}, check{shared, &sustained}, check{shared, &tokens}};
                continue;
            }
            c.push_back(check{key(), first});
            if (shape <= 2) {
                c.push_back(check{"batch:global", &tokens});
                c.push_back(check{key() + ":shadow", &shadow});
            }
        }
        SCOPED_TRACE("batch " + std::to_string(batch));
        const int n = agree_together(requests, clock.next());
        if (HasFailure()) {
            return;
        }
        admitted += n;
        rejected += static_cast<int>(requests.size()) - n;
    }
    // Both branches were exercised, many times.
    EXPECT_GE(admitted, 300);
    EXPECT_GE(rejected, 300);
}

} // namespace
} // namespace sluice::store
