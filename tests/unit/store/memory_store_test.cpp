// SPDX-License-Identifier: Apache-2.0
#include "sluice/store/memory_store.hpp"

#include <gtest/gtest.h>

#include <atomic>
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

} // namespace
} // namespace sluice::store
