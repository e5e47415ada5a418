// SPDX-License-Identifier: Apache-2.0
// The dispatch over the algorithms (src/limiter/algorithm.cpp).
#include "limiter_test_util.hpp"

#include <gtest/gtest.h>

#include <variant>

namespace sluice::limiter::test {
namespace {

TEST(Algorithm, StateOfAnotherAlgorithmCountsAsNone) {
    state s = fixed_window_state{5, 0};
    auto l = token(2, 1);
    auto d = acquire(s, true, l, 0);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, 1);
    EXPECT_TRUE(std::holds_alternative<token_bucket_state>(s));
}

} // namespace
} // namespace sluice::limiter::test
