// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/keyed_hash.hpp"

#include <gtest/gtest.h>

#include <string>

namespace sluice {
namespace {

// The reference vectors of the SipHash paper (Aumasson and Bernstein, appendix A, and its
// reference code's vectors.h): key 00 01 .. 0f, message 00 01 .. (n - 1), SipHash-2-4.
TEST(SipHash, MatchesTheReferenceVectors) {
    const siphash_key key{0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};
    std::string message;
    EXPECT_EQ(siphash(key, message, 2, 4), 0x726fdb47dd0e0e31ULL);
    for (char c = 0; c < 15; ++c) {
        message += c;
    }
    EXPECT_EQ(siphash(key, message, 2, 4), 0xa129ca6149be45e5ULL);
}

TEST(SipHash, TheKeyChangesEveryHash) {
    const siphash_key one{1, 2};
    const siphash_key other{1, 3};
    for (const std::string& text :
         {std::string(), std::string("rate-limit:203.0.113.7:/api"), std::string(100, 'a')}) {
        EXPECT_NE(siphash(one, text, 1, 3), siphash(other, text, 1, 3)) << text;
        EXPECT_EQ(siphash(one, text, 1, 3), siphash(one, text, 1, 3)) << text;
    }
}

TEST(KeyedHash, IsOneFunctionWithinAProcess) {
    EXPECT_EQ(keyed_hash("rate-limit:203.0.113.7:/api"), keyed_hash("rate-limit:203.0.113.7:/api"));
    EXPECT_NE(keyed_hash("rate-limit:203.0.113.7:/api"), keyed_hash("rate-limit:203.0.113.8:/api"));
    EXPECT_EQ(keyed_string_hash{}("x"), keyed_hash("x"));
}

} // namespace
} // namespace sluice
