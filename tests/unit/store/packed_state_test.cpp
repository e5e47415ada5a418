// SPDX-License-Identifier: Apache-2.0
// The memory store's packed limiter states (src/store/packed_state.cpp): every state comes back
// exactly as it went in, bit for bit, its algorithm included.
#include "store/packed_state.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace sluice::store {
namespace {

using namespace sluice::limiter;

constexpr double infinity = std::numeric_limits<double>::infinity();

bool same_bits(double a, double b) {
    return std::memcmp(&a, &b, sizeof a) == 0;
}

/// Packs `s` into a fresh packed state, unpacks it, frees it; the unpacked copy.
state round_trip(state s) {
    packed_state packed;
    std::uint8_t kind = fresh_kind;
    pack(state(s), packed, kind);
    EXPECT_EQ(kind, s.index());
    auto back = unpack(packed, kind);
    clear(packed, kind);
    return back;
}

TEST(PackedState, AFreshOneIsAFreshState) {
    packed_state packed;
    EXPECT_EQ(unpack(packed, fresh_kind), state{});
}

TEST(PackedState, EveryAlgorithmComesBackAsItWent) {
    const std::vector<state> states{
        leaky_bucket_state{7, {1'700'000'000'123.0, 0.5714285714285714}},
        token_bucket_state{-3, 42.5},
        fixed_window_state{std::numeric_limits<std::int64_t>::max(), 3'600'000},
        concurrency_state{std::numeric_limits<std::int64_t>::min()},
        concurrency_state{3, (std::uint64_t{1} << 53) - 1}, // an epoch, exact up to 2^53
        sliding_window_state{{{100, 1}, {250.5, 4}}, 1, 300},
    };
    for (const auto& s : states) {
        EXPECT_EQ(round_trip(s), s) << "alternative " << s.index();
    }
}

TEST(PackedState, TimesKeepTheirBits) {
    for (double ms : {-0.0,
                      infinity,
                      -infinity,
                      std::numeric_limits<double>::denorm_min(),
                      std::nextafter(1e15, 2e15)}) {
        const auto back = round_trip(leaky_bucket_state{1, ms});
        ASSERT_TRUE(std::holds_alternative<leaky_bucket_state>(back));
        EXPECT_TRUE(same_bits(std::get<leaky_bucket_state>(back).last_leak.whole, ms)) << ms;
        const auto fraction = round_trip(leaky_bucket_state{1, {0, ms}});
        EXPECT_TRUE(same_bits(std::get<leaky_bucket_state>(fraction).last_leak.fraction, ms)) << ms;
    }
    const auto back = round_trip(token_bucket_state{1, {-0.0, -0.0}});
    EXPECT_TRUE(same_bits(std::get<token_bucket_state>(back).last_refill.whole, -0.0));
    EXPECT_TRUE(same_bits(std::get<token_bucket_state>(back).last_refill.fraction, -0.0));
}

TEST(PackedState, ASlidingWindowMovesInAndOutOfItsBlock) {
    const sliding_window_state log{{{10, 1}, {20, 2}, {30, 3}}, 1, 30};
    packed_state packed;
    std::uint8_t kind = fresh_kind;
    pack(state(log), packed, kind);
    const auto* block = packed.sliding;

    // A copy leaves the block as it was; taking empties it and keeps it.
    EXPECT_EQ(unpack(packed, kind), state(log));
    auto taken = take(packed, kind);
    EXPECT_EQ(taken, state(log));
    EXPECT_TRUE(packed.sliding->log.empty());

    // Put back: the same block holds it again.
    std::get<sliding_window_state>(taken).log.push_back({40, 4});
    pack(std::move(taken), packed, kind);
    EXPECT_EQ(packed.sliding, block);
    EXPECT_EQ(std::get<sliding_window_state>(unpack(packed, kind)).log.size(), 4u);

    // Another algorithm (a reload changed the limit) frees the block (LeakSanitizer would tell).
    pack(state(fixed_window_state{2, 1000}), packed, kind);
    EXPECT_EQ(kind, state(fixed_window_state{}).index());
    EXPECT_EQ(unpack(packed, kind), state(fixed_window_state{2, 1000}));
    clear(packed, kind);
    EXPECT_EQ(kind, fresh_kind);
    EXPECT_EQ(unpack(packed, kind), state{});
}

TEST(PackedState, TakingAnotherAlgorithmLeavesItAsItWas) {
    packed_state packed;
    std::uint8_t kind = fresh_kind;
    pack(state(concurrency_state{2}), packed, kind);
    EXPECT_EQ(take(packed, kind), state(concurrency_state{2}));
    EXPECT_EQ(unpack(packed, kind), state(concurrency_state{2}));
}

} // namespace
} // namespace sluice::store
