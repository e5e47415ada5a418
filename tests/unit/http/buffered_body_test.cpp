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

    body.resize(10'000);
    std::memset(body.data(), 'x', body.size());
    EXPECT_GE(allocated.load(), 10'000);
    const auto grown = allocated.load();

    body.resize(4'000); // a read that filled less than its room: the allocation stays
    EXPECT_EQ(body.size(), 4'000u);
    EXPECT_EQ(body.view(), std::string(4'000, 'x'));
    EXPECT_EQ(allocated.load(), grown);

    body.release();
    EXPECT_EQ(body.size(), 0u);
    EXPECT_EQ(allocated.load(), 0);
}

TEST(BufferedBody, ABodyThatFitsInTheObjectCountsNothing) {
    metrics::gauge allocated{0};
    buffered_body body(allocated);
    body.resize(5);
    EXPECT_EQ(allocated.load(), 0);
}

TEST(BufferedBody, GivesBackWhatItHeldWhenDestroyed) {
    metrics::gauge allocated{0};
    {
        buffered_body first(allocated);
        buffered_body second(allocated);
        first.resize(1'000);
        second.resize(3'000);
        EXPECT_GE(allocated.load(), 4'000);
        second.release();
        EXPECT_GE(allocated.load(), 1'000);
        EXPECT_LT(allocated.load(), 3'000);
    }
    EXPECT_EQ(allocated.load(), 0);
}

} // namespace
} // namespace sluice::http::detail
