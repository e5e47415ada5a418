// SPDX-License-Identifier: Apache-2.0
#include "sluice/store/memory_store.hpp"
#include "sluice/store/slot_waiters.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <malloc.h>
#include <string>
#include <thread>
#include <vector>

namespace sluice::store {
namespace {

using std::chrono::milliseconds;

config::limit leaky(std::int64_t capacity, double flow_rate) {
    config::limit l;
    l.capacity = capacity;
    l.flow_rate = flow_rate;
    return l;
}

checks one(const std::string& key, const config::limit& l) {
    return checks{check{key, &l}};
}

/// A CONCURRENCY limit of one slot.
config::limit one_slot() {
    config::limit l;
    l.algo = config::algorithm::concurrency;
    l.limit_count = 1;
    return l;
}

/// Slots of key "k" under `slots` from two of its counts: one taken before the key held a
/// bucket's state (a reload to another algorithm, and back), and one taken since.
struct two_counts {
    sluice::store::slots before;
    sluice::store::slots current;
};

two_counts slots_across_a_reload(memory_store& store, const config::limit& slots) {
    two_counts out;
    out.before = store.acquire_now(one("k", slots)).slots;
    EXPECT_TRUE(store.acquire_now(one("k", leaky(10, 1))).decisions[0].allowed); // reloaded
    out.current = store.acquire_now(one("k", slots)).slots; // and back: a new count
    EXPECT_EQ(out.before.size(), 1u);
    EXPECT_EQ(out.current.size(), 1u);
    return out;
}

TEST(MemoryStore, WorkedExampleFromThePage) {
    manual_clock clock(5'000);
    memory_store store(clock);
    auto l = leaky(50, 5);
    for (int i = 0; i < 30; ++i) {
        auto out = store.acquire_now(one("rate-limit:10.0.0.1:/", l));
        ASSERT_FALSE(out.ec);
        ASSERT_EQ(out.decisions.size(), 1u);
        ASSERT_TRUE(out.decisions[0].allowed);
        EXPECT_EQ(out.decisions[0].delay, milliseconds(200 * i));
    }
    int admitted = 0;
    for (int i = 0; i < 50; ++i) {
        admitted += store.acquire_now(one("rate-limit:10.0.0.1:/", l)).decisions[0].allowed;
    }
    EXPECT_EQ(admitted, 20);
}

// A settlement's charge on a key the store can no longer hold (here one longer than any table
// holds; out of memory alike) is dropped, as an eviction would drop it: settle is noexcept,
// and the insert's exception ended the process.
TEST(MemoryStore, ASettlementThatCannotBeKeptIsDroppedNotFatal) {
    manual_clock clock;
    memory_store store(clock);
    const auto bucket = leaky(10, 1);
    const settlement charge{std::string(70'000, 'k'), &bucket, 5};
    store.settle(std::span(&charge, 1));
    const settlement held{"k", &bucket, 5};
    store.settle(std::span(&held, 1));
    EXPECT_EQ(store.acquire_now(one("k", bucket)).decisions[0].remaining, 4)
        << "a key it could hold keeps its debt";
}

// An admission whose new key cannot be held (a key no table holds; out of memory alike) keeps
// what it charged on its other keys and comes back with its slots, so that they are released:
// the insert's exception came after those charges and took the outcome with it, leaving a
// CONCURRENCY slot taken for good.
TEST(MemoryStore, AnAdmissionWhoseNewKeyCannotBeHeldKeepsItsSlots) {
    manual_clock clock;
    memory_store store(clock);
    const auto slots = one_slot();
    const auto bucket = leaky(10, 1);
    store.release(store.acquire_now(one("slots", slots)).slots); // "slots" exists, its slot free
    const checks request{check{"slots", &slots}, check{std::string(70'000, 'k'), &bucket}};
    const auto out = store.acquire_now(request);
    ASSERT_EQ(out.decisions.size(), 2u);
    EXPECT_TRUE(out.decisions[0].allowed && out.decisions[1].allowed);
    ASSERT_EQ(out.slots.size(), 1u);
    EXPECT_FALSE(store.acquire_now(one("slots", slots)).decisions[0].allowed) << "its slot";
    store.release(out.slots);
    EXPECT_TRUE(store.acquire_now(one("slots", slots)).decisions[0].allowed) << "given back";
}

// A slot taken before the key held another algorithm's state (two reloads: CONCURRENCY, then a
// bucket, then CONCURRENCY again) gives nothing back to the count begun since: it lowered that
// count, letting one request more in than the limit. Redis's leases have names, and do not.
TEST(MemoryStore, ASlotOfAnEarlierCountOfItsKeyGivesNothingBackToTheNext) {
    manual_clock clock;
    memory_store store(clock);
    const auto slots = one_slot();
    store.release(slots_across_a_reload(store, slots).before);
    EXPECT_FALSE(store.acquire_now(one("k", slots)).decisions[0].allowed)
        << "the new count's slot is still taken";
}

// Only a release that frees a slot of the key's count wakes a waiter: one of an earlier count, or
// one given back twice, would have it spend a decision (a store call) on a slot that never freed.
TEST(MemoryStore, OnlyAReleaseThatFreesASlotWakesAWaiter) {
    manual_clock clock;
    memory_store store(clock);
    slot_waiters waiters;
    store.set_waiters(&waiters);
    net::io_context ioc;
    int woken = 0;
    const auto wait = [&] {
        return waiters.join("k", ioc.get_executor(), [&] { ++woken; });
    };
    const auto slots = one_slot();
    const auto [before, current] = slots_across_a_reload(store, slots);
    auto ticket = wait();
    store.release(before);
    ioc.run();
    EXPECT_EQ(woken, 0) << "nothing freed in the current count";
    store.release(current);
    ioc.restart();
    ioc.run();
    EXPECT_EQ(woken, 1);
    ticket = wait();
    store.release(current); // given back twice
    ioc.restart();
    ioc.run();
    EXPECT_EQ(woken, 1);
}

TEST(MemoryStore, KeysAreIndependent) {
    manual_clock clock;
    memory_store store(clock);
    auto l = leaky(1, 1);
    EXPECT_TRUE(store.acquire_now(one("a", l)).decisions[0].allowed);
    EXPECT_FALSE(store.acquire_now(one("a", l)).decisions[0].allowed);
    EXPECT_TRUE(store.acquire_now(one("b", l)).decisions[0].allowed);
}

TEST(MemoryStore, LaterRejectionChargesNoEarlierLimit) {
    manual_clock clock;
    memory_store store(clock);
    auto per_client = leaky(10, 1);
    auto global = leaky(1, 1);
    checks both{check{"client", &per_client}, check{"global", &global}};
    auto first = store.acquire_now(both);
    ASSERT_TRUE(first.decisions[0].allowed && first.decisions[1].allowed);
    auto second = store.acquire_now(both);
    EXPECT_TRUE(second.decisions[0].allowed);
    EXPECT_FALSE(second.decisions[1].allowed);
    // The per-client bucket still holds only the first request: 9 slots remain.
    auto alone = store.acquire_now(one("client", per_client));
    EXPECT_EQ(alone.decisions[0].remaining, 8);
}

TEST(MemoryStore, DryRunLimitNeverBlocks) {
    manual_clock clock;
    memory_store store(clock);
    auto enforced = leaky(10, 1);
    auto trial = leaky(1, 1);
    trial.dry_run = true;
    checks both{check{"client", &enforced}, check{"trial", &trial}};
    store.acquire_now(both);
    auto second = store.acquire_now(both);
    EXPECT_FALSE(second.decisions[1].allowed);
    EXPECT_EQ(store.acquire_now(one("client", enforced)).decisions[0].remaining, 7);
}

TEST(MemoryStore, SweepForgetsOnlyDrainedKeys) {
    manual_clock clock;
    memory_store store(clock);
    auto l = leaky(10, 10); // T = 100 ms
    for (int i = 0; i < 3; ++i) {
        store.acquire_now(one("busy", l));
    }
    store.acquire_now(one("quiet", l));
    EXPECT_EQ(store.size(), 2u);
    clock.advance(100);
    EXPECT_EQ(store.sweep(), 1u); // "quiet" drained; "busy" holds 2 more slots
    EXPECT_EQ(store.size(), 1u);
    clock.advance(200);
    EXPECT_EQ(store.sweep(), 1u);
    EXPECT_EQ(store.size(), 0u);
}

// Found by fuzz/memory_store_fuzz.cpp: a key forgotten by a sweep (here after a refusal that
// stored nothing: a cost that never fits) started fresh when the clock then stepped back, and
// its window, over at the sweep but not at the earlier reading, admitted its limit a second
// time. A shard that has forgotten a key now reads its clock as never going back: the requests
// at 5500 count as at 6500, in the window the sweep saw, [6000, 7000).
TEST(MemoryStore, ASweptKeyNeverReopensItsWindowWhenTheClockStepsBack) {
    manual_clock clock(5000);
    memory_store store(clock);
    config::limit l;
    l.algo = config::algorithm::fixed_window;
    l.limit_count = 2;
    l.window = milliseconds(1000);
    const checks request = one("window", l);
    ASSERT_TRUE(store.acquire_now(request).decisions[0].allowed);
    ASSERT_TRUE(store.acquire_now(request).decisions[0].allowed);
    clock.set(6500);
    EXPECT_TRUE(store.acquire_now(checks{check{"window", &l, 3}}).decisions[0].never_fits);
    ASSERT_EQ(store.sweep(), 1u); // [5000, 6000) is over: the key is forgotten
    clock.set(5500);
    for (int i = 0; i < 2; ++i) {
        const auto d = store.acquire_now(request).decisions[0];
        EXPECT_TRUE(d.allowed);
        EXPECT_EQ(d.remaining, 1 - i);
        EXPECT_EQ(d.reset_after, milliseconds(500)) << "until 7000, from 6500";
    }
    clock.set(6999);
    EXPECT_FALSE(store.acquire_now(request).decisions[0].allowed)
        << "[5000, 6000) admitted 4, or [6000, 7000) admitted 3";
    clock.set(7000);
    EXPECT_TRUE(store.acquire_now(request).decisions[0].allowed);
}

TEST(MemoryStore, ManyClientsStayBounded) {
    manual_clock clock;
    memory_store store(clock);
    auto l = leaky(5, 5);
    for (int round = 0; round < 10; ++round) {
        for (int i = 0; i < 10'000; ++i) {
            store.acquire_now(one("client-" + std::to_string(round) + "-" + std::to_string(i), l));
        }
        clock.advance(1000);
        store.sweep();
        EXPECT_EQ(store.size(), 0u);
    }
}

/// The periodic sweep's tests: a clock, and limits whose keys reset soon or late.
class MemoryStoreSweep : public ::testing::Test {
protected:
    /// Charges `count` keys named `prefix` and a number, once each.
    static void
    charge(memory_store& store, const std::string& prefix, int count, const config::limit& l) {
        for (int i = 0; i < count; ++i) {
            store.acquire_now(one(prefix + std::to_string(i), l));
        }
    }

    /// A whole pass of slices of `max_buckets`: the keys forgotten and the buckets looked at.
    static std::pair<std::size_t, std::size_t>
    pass(memory_store& store, std::size_t max_buckets = memory_store::sweep_slice_buckets) {
        std::size_t forgotten = 0;
        std::size_t buckets = 0;
        for (bool done = false; !done;) {
            const auto step = store.sweep_slice(max_buckets);
            forgotten += step.forgotten;
            buckets += step.buckets;
            done = step.pass_done;
        }
        return {forgotten, buckets};
    }

    manual_clock clock;
    const config::limit quick = leaky(5, 5);    // idle 200 ms after a request
    const config::limit slow = leaky(5, 0.001); // idle 1000 s after
};

// The control thread sweeps a slice at a time, so that its admin listener and its signals
// wait for no whole pass, and no shard's lock is held through a shard: a slice looks at no more
// buckets than it is given (the whole sweep looked at every shard's at once).
TEST_F(MemoryStoreSweep, ASliceLooksAtNoMoreBucketsThanItsBound) {
    memory_store store(clock, 1);
    charge(store, "client-", 1000, quick);
    clock.advance(1000);
    std::size_t forgotten = 0;
    int slices = 0;
    for (;;) {
        const auto step = store.sweep_slice(64);
        ++slices;
        EXPECT_LE(step.buckets, 64u);
        forgotten += step.forgotten;
        EXPECT_EQ(store.size(), 1000u - forgotten);
        if (step.pass_done) {
            break;
        }
        ASSERT_LT(slices, 1000) << "a pass that never ends";
    }
    EXPECT_EQ(slices, 16); // 1,024 buckets
    EXPECT_EQ(forgotten, 1000u);
}

// A pass of slices forgets every key whose state has reset and no other, keys written between
// its slices included: the shard's floor it ends with must not pass a key written behind it.
TEST_F(MemoryStoreSweep, APassOfSlicesForgetsEveryResetKeyAndNoOther) {
    memory_store store(clock, 8);
    const auto slots = one_slot();
    charge(store, "quick-", 3000, quick);
    charge(store, "slow-", 3000, slow);
    const auto held = store.acquire_now(one("slots", slots)).slots; // never forgotten while held
    ASSERT_EQ(held.size(), 1u);
    clock.advance(1000);
    int written = 0;
    for (bool done = false; !done;) {
        const auto step = store.sweep_slice(32);
        done = step.pass_done;
        // Between slices, a worker's request: a key that resets soon, in some shard the pass
        // has walked already (or will).
        store.acquire_now(one("late-" + std::to_string(written++), quick));
    }
    EXPECT_EQ(store.size(), 3000u + 1u + static_cast<std::size_t>(written));
    for (int i = 0; i < 3000; i += 97) {
        EXPECT_EQ(store.acquire_now(one("slow-" + std::to_string(i), slow)).decisions[0].remaining,
                  3)
            << "its first charge was kept";
    }
    clock.advance(1000); // the late keys have reset too
    EXPECT_EQ(pass(store, 32).first, static_cast<std::size_t>(written));
    EXPECT_EQ(store.size(), 3001u);
    EXPECT_FALSE(store.acquire_now(one("slots", slots)).decisions[0].allowed) << "still held";
    store.release(held);
}

// A key written during a shard's walk, behind it, keeps the shard's floor down to its reset:
// the floor the walk leaves is that of the keys it kept and of every key written meanwhile, or
// the next pass would pass the shard by and keep the key. (With one bucket of 1,024 left, the
// key falls behind the walk but for a chance of 1 in 1,024, when the walk sees it itself.)
TEST_F(MemoryStoreSweep, AKeyWrittenBehindAShardsWalkIsForgottenByTheNextPass) {
    memory_store store(clock, 1);
    charge(store, "slow-", 1000, slow);
    clock.advance(100);
    store.acquire_now(one("quick", quick)); // the walk has to look: a key resets at 300
    clock.advance(1000);
    auto step = store.sweep_slice(1023); // all of the 1,024 buckets but one
    ASSERT_FALSE(step.pass_done);
    store.acquire_now(one("late", quick)); // resets at 1300
    step = store.sweep_slice(1023);
    ASSERT_TRUE(step.pass_done);
    clock.advance(1000);
    EXPECT_EQ(store.sweep_slice().forgotten, 1u);
    EXPECT_EQ(store.size(), 1000u);
}

// A shard's buckets shrink when few keys are left (a shrink hashes each again under the lock),
// not while many are. The buckets a pass looks at are the shards' buckets.
TEST_F(MemoryStoreSweep, BucketsShrinkOnlyWhenFewKeysAreLeft) {
    memory_store store(clock, 1);
    charge(store, "k-", 1500, slow);
    charge(store, "q-", 6500, quick);
    clock.advance(1000);
    EXPECT_EQ(pass(store).second, 8'192u);
    ASSERT_EQ(store.size(), 1500u); // 1,500 x 4 <= 8,192, but 1,500 keys are many
    store.acquire_now(one("quick", quick));
    clock.advance(1000);
    EXPECT_EQ(pass(store).second, 8'192u) << "kept";
    clock.set(2'000'000);            // the slow keys reset
    charge(store, "k-", 1000, slow); // 1,000 keys left after
    clock.advance(1000);
    EXPECT_EQ(pass(store).second, 8'192u);
    ASSERT_EQ(store.size(), 1000u);
    store.acquire_now(one("quick", quick));
    clock.advance(1000);
    EXPECT_EQ(pass(store).second, 2'048u) << "shrunk after the last: 1,000 keys x 4 > 2,048";
}

// A shard none of whose keys can have reset yet (its idle floor is ahead of the clock) is passed
// by without a look at its buckets: the sweep looked at every shard's table every time.
TEST_F(MemoryStoreSweep, AShardWhoseKeysCannotHaveResetIsNotLookedAt) {
    memory_store store(clock, 4);
    charge(store, "slow-", 1000, slow);
    clock.advance(100);
    auto step = store.sweep_slice();
    EXPECT_TRUE(step.pass_done);
    EXPECT_EQ(step.buckets, 0u) << "no key resets before 1000 s";
    charge(store, "quick-", 1000, quick);
    clock.advance(1000);
    const auto [forgotten, buckets] = pass(store); // a shard whose buckets shrink ends a slice
    EXPECT_EQ(forgotten, 1000u);
    EXPECT_GT(buckets, 0u);
    // The pass left each shard the floor of the keys it kept: 1000 s from their request.
    clock.advance(1000);
    step = store.sweep_slice(1'000'000);
    EXPECT_TRUE(step.pass_done);
    EXPECT_EQ(step.buckets, 0u);
    clock.set(1'000'100);
    EXPECT_EQ(store.sweep(), 1000u);
}

TEST(MemoryStore, ConcurrentRequestsAdmitExactlyCapacity) {
    manual_clock clock;
    memory_store store(clock);
    auto l = leaky(1000, 1);
    std::atomic<int> admitted{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
            for (int i = 0; i < 1000; ++i) {
                admitted += store.acquire_now(one("shared", l)).decisions[0].allowed ? 1 : 0;
            }
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    EXPECT_EQ(admitted.load(), 1000);
}

// Issue 11 item 21: rate-limit.memory.max-keys bounds the table.

/// One request per hour per key: every key it touches stays live for an hour.
config::limit hourly() {
    config::limit l;
    l.algo = config::algorithm::fixed_window;
    l.limit_count = 1;
    l.window = std::chrono::hours(1);
    return l;
}

bool admits(memory_store& store, const std::string& key, const config::limit& l) {
    return store.acquire_now(one(key, l)).decisions[0].allowed;
}

TEST(MemoryStoreCap, DistinctKeysBeyondTheCapKeepTheCountAtTheCap) {
    manual_clock clock(1'000);
    metrics::counter evictions{0};
    memory_store store(clock, 1, memory_store_limits{100, &evictions});
    const auto l = hourly();
    for (int i = 0; i < 150; ++i) {
        ASSERT_TRUE(admits(store, "k" + std::to_string(i), l));
        EXPECT_EQ(store.size(), std::min(i + 1, 100));
    }
    EXPECT_EQ(evictions.load(), 50u);
}

TEST(MemoryStoreCap, ShardedCapIsNeverExceeded) {
    manual_clock clock(1'000);
    metrics::counter evictions{0};
    memory_store store(clock, 64, memory_store_limits{1'000, &evictions});
    const auto l = hourly();
    for (int i = 0; i < 5'000; ++i) {
        admits(store, "rate-limit:10.0.0.1:/" + std::to_string(i), l);
    }
    EXPECT_LE(store.size(), 1'000u);
    // Every shard has filled: each holds its exact part of the cap.
    EXPECT_EQ(store.size(), 1'000u);
    EXPECT_EQ(evictions.load(), 4'000u);
}

TEST(MemoryStoreCap, FewerKeysThanShards) {
    manual_clock clock;
    memory_store store(clock, 64, memory_store_limits{3, nullptr});
    const auto l = hourly();
    for (int i = 0; i < 100; ++i) {
        admits(store, std::to_string(i), l);
    }
    EXPECT_EQ(store.size(), 3u);
}

TEST(MemoryStoreCap, DrainedKeysAreEvictedBeforeLiveOnes) {
    manual_clock clock(0);
    metrics::counter evictions{0};
    memory_store store(clock, 1, memory_store_limits{4, &evictions});
    const auto live = hourly();
    const auto drains = leaky(10, 1); // one request: drained 1 s later
    // The live keys are the least recently used: an LRU-only cap would take them first.
    ASSERT_TRUE(admits(store, "live1", live));
    ASSERT_TRUE(admits(store, "live2", live));
    ASSERT_TRUE(admits(store, "drained1", drains));
    ASSERT_TRUE(admits(store, "drained2", drains));
    clock.set(2'000);
    ASSERT_TRUE(admits(store, "new1", live));
    ASSERT_TRUE(admits(store, "new2", live));
    EXPECT_EQ(store.size(), 4u);
    EXPECT_EQ(evictions.load(), 0u);            // nothing that mattered was lost
    EXPECT_FALSE(admits(store, "live1", live)); // still counted
    EXPECT_FALSE(admits(store, "live2", live));
}

TEST(MemoryStoreCap, LiveKeyIsEvictedLeastRecentlyUsedFirst) {
    manual_clock clock(0);
    metrics::counter evictions{0};
    memory_store store(clock, 1, memory_store_limits{3, &evictions});
    const auto l = hourly();
    ASSERT_TRUE(admits(store, "a", l));
    ASSERT_TRUE(admits(store, "b", l));
    ASSERT_TRUE(admits(store, "c", l));
    clock.set(1);
    EXPECT_FALSE(admits(store, "a", l)); // a rejected request is use too: b is now the oldest
    ASSERT_TRUE(admits(store, "d", l));
    EXPECT_EQ(evictions.load(), 1u);
    EXPECT_FALSE(admits(store, "a", l)); // kept
    EXPECT_FALSE(admits(store, "c", l)); // kept
    EXPECT_FALSE(admits(store, "d", l)); // kept
    EXPECT_TRUE(admits(store, "b", l));  // forgotten: its limit started over
}

// A key holding CONCURRENCY slots is never evicted to make room: forgotten, its count would
// start over while its requests run (a second request admitted over a limit of 1), and the
// first request's release would then lower the second's count (a third admitted). When every
// key holds slots, the shard goes over its cap by them.
TEST(MemoryStoreCap, AKeyHoldingSlotsIsNeverEvicted) {
    manual_clock clock(0);
    metrics::counter evictions{0};
    memory_store store(clock, 1, memory_store_limits{2, &evictions});
    config::limit slots_limit;
    slots_limit.algo = config::algorithm::concurrency;
    slots_limit.limit_count = 1;
    const auto first = store.acquire_now(one("held", slots_limit));
    ASSERT_TRUE(first.decisions[0].allowed);
    ASSERT_EQ(first.slots.size(), 1u);

    const auto l = hourly();
    clock.set(1);
    ASSERT_TRUE(admits(store, "x", l));
    ASSERT_TRUE(admits(store, "y", l)); // the shard is full: x goes, the older "held" stays
    EXPECT_EQ(evictions.load(), 1u);
    EXPECT_FALSE(admits(store, "held", slots_limit)) << "its slot is still taken";
    EXPECT_FALSE(admits(store, "y", l)) << "kept";

    store.release(first.slots);
    const auto second = store.acquire_now(one("held", slots_limit));
    EXPECT_TRUE(second.decisions[0].allowed);
    EXPECT_FALSE(admits(store, "held", slots_limit)) << "one in flight, as its limit says";

    // Every key holding slots: the shard keeps them all, over its cap.
    const auto other = store.acquire_now(one("held2", slots_limit));
    EXPECT_TRUE(other.decisions[0].allowed);
    const auto third = store.acquire_now(one("held3", slots_limit));
    EXPECT_TRUE(third.decisions[0].allowed);
    EXPECT_EQ(store.size(), 3u);
    EXPECT_FALSE(admits(store, "held", slots_limit));
    EXPECT_FALSE(admits(store, "held2", slots_limit));
}

TEST(MemoryStoreCap, TwoNewKeysOfOneRequestInAFullShard) {
    manual_clock clock(0);
    memory_store store(clock, 1, memory_store_limits{2, nullptr});
    const auto l = hourly();
    ASSERT_TRUE(admits(store, "a", l));
    ASSERT_TRUE(admits(store, "b", l));
    auto out = store.acquire_now(checks{check{"x", &l}, check{"y", &l}});
    EXPECT_TRUE(out.decisions[0].allowed && out.decisions[1].allowed);
    EXPECT_EQ(store.size(), 2u);
    EXPECT_FALSE(admits(store, "y", l));
}

// The figure docs/configuration.md gives for rate-limit.memory.max-keys: heap bytes per key of
// a typical key ("rate-limit:<IPv4>:/v1/completions", a leaky bucket's state), as glibc counts
// them. A bound, not an exact value, so that the allocator's rounding cannot flake it.
TEST(MemoryStoreCap, CostPerKey) {
    manual_clock clock;
    constexpr int keys = 100'000;
    std::vector<std::string> names;
    names.reserve(keys);
    for (int i = 0; i < keys; ++i) {
        names.push_back("rate-limit:10." + std::to_string(i / 65536) + "." +
                        std::to_string(i / 256 % 256) + "." + std::to_string(i % 256) +
                        ":/v1/completions");
    }
    const auto l = leaky(50, 5);
    const auto before = mallinfo2().uordblks;
    {
        memory_store store(clock, 64, memory_store_limits{0, nullptr}); // no cap: no eviction
        for (const auto& name : names) {
            store.acquire_now(one(name, l));
        }
        ASSERT_EQ(store.size(), static_cast<std::size_t>(keys));
        const auto used = mallinfo2().uordblks - before;
        if (used == 0) {
            GTEST_SKIP() << "this allocator does not report through mallinfo2 (a sanitizer?)";
        }
        const double per_key = static_cast<double>(used) / keys;
        std::printf("memory store: %.0f bytes per key (%zu-byte keys)\n", per_key, names[0].size());
        EXPECT_LE(per_key, 128); // issue 17's target
    }
}

} // namespace
} // namespace sluice::store
