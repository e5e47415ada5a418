// SPDX-License-Identifier: Apache-2.0
#include "http/buffered_body.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace sluice::http::detail {
namespace {

TEST(BufferedBody, CountsWhatItAllocatesAndGivesItBackWhenReleased) {
    metrics::gauge allocated{0};
    buffered_body body(allocated);
    EXPECT_EQ(allocated.load(), 0);

    body.add_room(10'000);
    std::memset(body.room_data(), 'x', body.room());
    EXPECT_GE(allocated.load(), 10'000);
    const auto grown = allocated.load();

    body.fill(4'000); // a read that filled less than its room: the room stays, allocated
    EXPECT_EQ(body.size(), 4'000u);
    EXPECT_EQ(body.room(), 6'000u);
    EXPECT_EQ(body.view(), std::string(4'000, 'x'));
    EXPECT_EQ(allocated.load(), grown);

    body.release();
    EXPECT_EQ(body.size(), 0u);
    EXPECT_EQ(body.room(), 0u);
    EXPECT_EQ(allocated.load(), 0);
}

// Room is added without touching what the body or its room holds: only the new bytes are
// zero-filled (a room made again for every piece of a body cost a memset of it per piece).
TEST(BufferedBody, AddedRoomLeavesTheBodyAndItsRoomAsTheyWere) {
    metrics::gauge allocated{0};
    buffered_body body(allocated);
    body.add_room(100);
    std::memset(body.room_data(), 'y', body.room());
    body.fill(10);
    body.add_room(50);
    EXPECT_EQ(body.view(), std::string(10, 'y'));
    ASSERT_EQ(body.room(), 140u);
    EXPECT_EQ(std::string(body.room_data(), 90), std::string(90, 'y'));
    EXPECT_EQ(std::string(body.room_data() + 90, 50), std::string(50, '\0'));
    EXPECT_EQ(body.reserved(), 150u);
}

TEST(BufferedBody, ABodyThatFitsInTheObjectCountsNothing) {
    metrics::gauge allocated{0};
    buffered_body body(allocated);
    body.add_room(5);
    body.fill(5);
    EXPECT_EQ(allocated.load(), 0);
}

TEST(BufferedBody, GivesBackWhatItHeldWhenDestroyed) {
    metrics::gauge allocated{0};
    {
        buffered_body first(allocated);
        buffered_body second(allocated);
        first.add_room(1'000);
        second.add_room(3'000);
        EXPECT_GE(allocated.load(), 4'000);
        second.release();
        EXPECT_GE(allocated.load(), 1'000);
        EXPECT_LT(allocated.load(), 3'000);
    }
    EXPECT_EQ(allocated.load(), 0);
}

} // namespace
} // namespace sluice::http::detail
