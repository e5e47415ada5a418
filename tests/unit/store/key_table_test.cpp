// SPDX-License-Identifier: Apache-2.0
// The memory store's table of keys (src/store/key_table.cpp): lookup, insertion, erasure,
// growth and shrinking, and the recency list the store evicts by.
#include "store/key_table.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace sluice::store {
namespace {

using node = key_table::node;

node& add(key_table& t, std::string_view key) {
    return t.insert(key, key_table::hash(key));
}

node* look_up(const key_table& t, std::string_view key) {
    return t.find(key, key_table::hash(key));
}

/// The keys from the least to the most recently used, walking the list both ways.
std::vector<std::string> by_recency(const key_table& t) {
    std::vector<std::string> oldest_first;
    for (const node* n = t.oldest(); n != nullptr; n = key_table::newer(*n)) {
        oldest_first.emplace_back(n->key());
    }
    std::vector<std::string> newest_first;
    for (const node* n = t.newest(); n != nullptr; n = key_table::older(*n)) {
        newest_first.emplace_back(n->key());
    }
    EXPECT_EQ(std::vector<std::string>(newest_first.rbegin(), newest_first.rend()), oldest_first);
    return oldest_first;
}

std::string key_of(int i) {
    return "rate-limit:127.0.0.1:/k1-" + std::to_string(i);
}

void shrink(key_table& t) {
    key_table::retired gone;
    t.shrink(gone);
}

TEST(KeyTable, FindsWhatWasInsertedAndNothingElse) {
    key_table t;
    EXPECT_EQ(look_up(t, "a"), nullptr); // no buckets yet
    node& a = add(t, "a");
    node& ab = add(t, "ab");
    node& empty = add(t, "");
    EXPECT_EQ(t.size(), 3u);
    EXPECT_EQ(look_up(t, "a"), &a);
    EXPECT_EQ(look_up(t, "ab"), &ab);
    EXPECT_EQ(look_up(t, ""), &empty);
    EXPECT_EQ(look_up(t, "b"), nullptr);
    EXPECT_EQ(look_up(t, "abc"), nullptr);
    EXPECT_EQ(a.key(), "a");
    EXPECT_EQ(ab.key(), "ab");
    EXPECT_EQ(empty.key(), "");
}

TEST(KeyTable, ANewNodeIsFreshAndNewest) {
    key_table t;
    add(t, "old");
    node& n = add(t, "new");
    EXPECT_EQ(n.state(), limiter::state{});
    EXPECT_EQ(n.idle_at_ms(), 0);
    EXPECT_EQ(t.newest(), &n);
    EXPECT_EQ(by_recency(t), (std::vector<std::string>{"old", "new"}));
}

TEST(KeyTable, KeysOfAnyLengthAndAnyByteAreHeldWhole) {
    key_table t;
    const std::string with_nul("a\0b", 3);
    const std::string long_key(key_table::max_key_size, 'x'); // 16 bits of length, all used
    std::string almost = long_key;
    almost.back() = 'y';
    node& nul = add(t, with_nul);
    node& long_node = add(t, long_key);
    EXPECT_EQ(look_up(t, std::string("a\0c", 3)), nullptr);
    EXPECT_EQ(look_up(t, with_nul), &nul);
    EXPECT_EQ(nul.key(), with_nul);
    EXPECT_EQ(look_up(t, long_key), &long_node);
    EXPECT_EQ(look_up(t, almost), nullptr);
    EXPECT_EQ(long_node.key(), long_key);
    // One byte more cannot be held (no key comes near: see max_key_size), and changes nothing.
    EXPECT_THROW(add(t, long_key + "x"), std::length_error);
    EXPECT_EQ(t.size(), 2u);
}

TEST(KeyTable, StateAndIdleTimeStayWithTheirKey) {
    key_table t;
    node& a = add(t, "a");
    node& b = add(t, "b");
    a.set_state(limiter::token_bucket_state{4, 1500});
    a.set_idle_at_ms(9000);
    b.set_state(limiter::sliding_window_state{{{10, 1}}, 0, 10});
    EXPECT_EQ(look_up(t, "a")->state(), limiter::state(limiter::token_bucket_state{4, 1500}));
    EXPECT_EQ(look_up(t, "a")->idle_at_ms(), 9000);
    auto taken = look_up(t, "b")->take_state();
    std::get<limiter::sliding_window_state>(taken).base = 1;
    b.set_state(std::move(taken));
    EXPECT_EQ(look_up(t, "b")->state(),
              limiter::state(limiter::sliding_window_state{{{10, 1}}, 1, 10}));
    // The sliding window's block goes with its node (LeakSanitizer would tell).
    t.erase(b);
}

TEST(KeyTable, GrowingKeepsEveryNodeWhereItWas) {
    key_table t;
    std::vector<node*> nodes;
    for (int i = 0; i < 20'000; ++i) {
        nodes.push_back(&add(t, key_of(i)));
        ASSERT_GE(t.bucket_count(), t.size()); // at most one key per bucket on average
    }
    EXPECT_EQ(t.size(), 20'000u);
    EXPECT_EQ(t.bucket_count(), 32'768u);
    for (int i = 0; i < 20'000; ++i) {
        ASSERT_EQ(look_up(t, key_of(i)), nodes[i]) << i;
    }
    EXPECT_EQ(look_up(t, key_of(20'000)), nullptr);
}

TEST(KeyTable, KeysOfOneShardSpreadOverTheBuckets) {
    // The store gives a shard the keys whose hash % 64 is its index: their low bits are alike.
    key_table t;
    int held = 0;
    for (int i = 0; held < 10'000; ++i) {
        const auto key = key_of(i);
        if (key_table::hash(key) % 64 == 5) {
            add(t, key);
            ++held;
        }
    }
    ASSERT_EQ(t.bucket_count(), 16'384u);
    // Spread evenly, the longest chain of 10,000 keys in 16,384 buckets is about 7; with the
    // buckets picked by the hash's low bits, 1 in 64 would be used, about 40 keys in each.
    EXPECT_LE(t.longest_chain_for_test(), 12u);
}

TEST(KeyTable, ErasingUnlinksFromTheChainAndTheRecencyList) {
    key_table t;
    for (int i = 0; i < 100; ++i) {
        add(t, key_of(i));
    }
    for (int i = 0; i < 100; i += 3) {
        t.erase(*look_up(t, key_of(i)));
    }
    EXPECT_EQ(t.size(), 66u);
    std::vector<std::string> expected;
    for (int i = 0; i < 100; ++i) {
        if (i % 3 == 0) {
            EXPECT_EQ(look_up(t, key_of(i)), nullptr) << i;
        } else {
            ASSERT_NE(look_up(t, key_of(i)), nullptr) << i;
            expected.push_back(key_of(i));
        }
    }
    EXPECT_EQ(by_recency(t), expected);
    // The ends of the list too.
    t.erase(*t.oldest());
    t.erase(*t.newest());
    expected.erase(expected.begin());
    expected.pop_back();
    EXPECT_EQ(by_recency(t), expected);
}

TEST(KeyTable, TouchingMakesTheNewest) {
    key_table t;
    node& a = add(t, "a");
    node& b = add(t, "b");
    add(t, "c");
    EXPECT_EQ(t.oldest(), &a);
    t.touch(a);
    EXPECT_EQ(by_recency(t), (std::vector<std::string>{"b", "c", "a"}));
    t.touch(a); // already the newest
    t.touch(b);
    EXPECT_EQ(by_recency(t), (std::vector<std::string>{"c", "a", "b"}));
    // Evicting by recency, as the store does when full.
    t.erase(*t.oldest());
    EXPECT_EQ(look_up(t, "c"), nullptr);
    EXPECT_EQ(by_recency(t), (std::vector<std::string>{"a", "b"}));
    t.erase(*t.oldest());
    t.erase(*t.oldest());
    EXPECT_EQ(t.oldest(), nullptr);
    EXPECT_EQ(t.newest(), nullptr);
    EXPECT_EQ(t.size(), 0u);
}

TEST(KeyTable, EraseIfForgetsExactlyTheMatchingKeys) {
    key_table t;
    for (int i = 0; i < 1000; ++i) {
        add(t, key_of(i)).set_idle_at_ms(i);
    }
    const auto erased =
        t.erase_if([](const node& n) { return static_cast<int>(n.idle_at_ms()) % 10 != 0; });
    EXPECT_EQ(erased, 900u);
    EXPECT_EQ(t.size(), 100u);
    std::vector<std::string> expected;
    for (int i = 0; i < 1000; ++i) {
        EXPECT_EQ(look_up(t, key_of(i)) != nullptr, i % 10 == 0) << i;
        if (i % 10 == 0) {
            expected.push_back(key_of(i));
        }
    }
    EXPECT_EQ(by_recency(t), expected);
    EXPECT_EQ(t.erase_if([](const node&) { return false; }), 0u);
    EXPECT_EQ(t.size(), 100u);
}

TEST(KeyTable, ShrinkingGivesTheBucketsOfDroppedKeysBack) {
    key_table t;
    for (int i = 0; i < 10'000; ++i) {
        add(t, key_of(i)).set_idle_at_ms(i);
    }
    ASSERT_EQ(t.bucket_count(), 16'384u);
    shrink(t); // still full enough
    EXPECT_EQ(t.bucket_count(), 16'384u);
    t.erase_if([](const node& n) { return n.idle_at_ms() >= 10; });
    EXPECT_EQ(t.bucket_count(), 16'384u); // erasing alone keeps them
    shrink(t);
    EXPECT_EQ(t.bucket_count(), 32u); // 10 keys fill more than a quarter of 32
    for (int i = 0; i < 10; ++i) {
        EXPECT_NE(look_up(t, key_of(i)), nullptr) << i;
    }
    EXPECT_EQ(look_up(t, key_of(10)), nullptr);
    t.erase_if([](const node& n) { return n.idle_at_ms() >= 2; });
    shrink(t);
    EXPECT_EQ(t.bucket_count(), 16u); // never below the first allocation
    EXPECT_NE(look_up(t, key_of(1)), nullptr);

    t.erase_if([](const node&) { return true; });
    shrink(t);
    EXPECT_EQ(t.bucket_count(), 0u);
    EXPECT_EQ(look_up(t, key_of(0)), nullptr);
    node& again = add(t, key_of(0)); // and it grows again
    EXPECT_EQ(look_up(t, key_of(0)), &again);
    EXPECT_EQ(t.bucket_count(), 16u);
}

TEST(KeyTable, ShrinkingStopsWhereAQuarterIsFilled) {
    key_table t;
    for (int i = 0; i < 4'000; ++i) {
        add(t, key_of(i));
    }
    ASSERT_EQ(t.bucket_count(), 4'096u);
    int left = 4'000;
    t.erase_if([&left](const node&) { return left-- > 300; }); // keep 300
    ASSERT_EQ(t.size(), 300u);
    shrink(t);
    // Halved while 300 keys fill at most a quarter: 4096, 2048, then 1024 (300 x 4 > 1024).
    EXPECT_EQ(t.bucket_count(), 1'024u);
}

// The periodic sweep walks a table a slice at a time: each call looks at no more buckets than
// it is given, and the walk, once done, has looked at each key once.
TEST(KeyTable, AWalkLooksAtABoundedNumberOfBucketsAndAtEachKeyOnce) {
    key_table t;
    for (int i = 0; i < 1000; ++i) {
        add(t, key_of(i));
    }
    ASSERT_EQ(t.bucket_count(), 1'024u);
    key_table::walk_position pos;
    key_table::retired gone;
    std::size_t looked_at = 0;
    int calls = 0;
    while (!pos.done) {
        const auto buckets = t.unlink_if(
            pos, 100, [&looked_at](const node&) { return ++looked_at % 2 == 0; }, gone);
        EXPECT_LE(buckets, 100u);
        EXPECT_EQ(t.size() + gone.size(), 1000u);
        ++calls;
        if (calls == 1) {
            EXPECT_LT(looked_at, 1000u) << "the first call looked at every bucket";
        }
    }
    EXPECT_EQ(calls, 11); // 10 x 100 buckets, then 24
    EXPECT_EQ(looked_at, 1000u);
    EXPECT_EQ(gone.size(), 500u);
    EXPECT_EQ(t.size(), 500u);
    // What was taken out is still there to free later, and no longer in the table.
    ASSERT_NE(gone.last(), nullptr);
    const std::string last(gone.last()->key());
    EXPECT_EQ(look_up(t, last), nullptr);
    gone.clear();
    EXPECT_EQ(gone.size(), 0u);
    EXPECT_EQ(t.unlink_if(
                  pos, 100, [](const node&) { return true; }, gone),
              0u)
        << "done";
}

// A walk's place is a point of the hash's space: when the table grows or shrinks between two
// slices, the walk goes on where it was, and still looks at every key it had not reached once.
TEST(KeyTable, AWalkGoesOnAcrossARehash) {
    for (const bool grow : {true, false}) {
        key_table t;
        for (int i = 0; i < 1000; ++i) {
            add(t, key_of(i)).set_idle_at_ms(i);
        }
        key_table::walk_position pos;
        key_table::retired gone;
        std::vector<int> seen(1000);
        const auto note = [&seen](const node& n) {
            ++seen[static_cast<std::size_t>(n.idle_at_ms())];
            return false;
        };
        t.unlink_if(pos, 300, note, gone);
        if (grow) {
            for (int i = 1000; i < 3000; ++i) {
                add(t, key_of(i)).set_idle_at_ms(-1);
            }
            ASSERT_EQ(t.bucket_count(), 4'096u);
        } else {
            t.erase_if([](const node& n) { return static_cast<int>(n.idle_at_ms()) % 8 != 0; });
            shrink(t);
            ASSERT_EQ(t.bucket_count(), 256u);
        }
        while (!pos.done) {
            t.unlink_if(
                pos, 300, [&note](const node& n) { return n.idle_at_ms() >= 0 && note(n); }, gone);
        }
        for (int i = 0; i < 1000; ++i) {
            if (grow) {
                EXPECT_EQ(seen[i], 1) << i;
            } else if (i % 8 == 0) {
                EXPECT_GE(seen[i], 1) << i; // a halving may show a walked bucket again
            }
        }
    }
}

TEST(KeyTable, AShrinkLeavesTheOldBucketsToFreeLater) {
    key_table t;
    for (int i = 0; i < 100; ++i) {
        add(t, key_of(i));
    }
    key_table::retired gone;
    t.shrink(gone);
    EXPECT_FALSE(gone.holds_buckets()) << "full enough: nothing replaced";
    t.erase_if([](const node&) { return true; });
    t.shrink(gone);
    EXPECT_EQ(t.bucket_count(), 0u);
    EXPECT_TRUE(gone.holds_buckets());
    gone.clear();
    EXPECT_FALSE(gone.holds_buckets());
}

} // namespace
} // namespace sluice::store
