// SPDX-License-Identifier: Apache-2.0
// The bytes of a call of src/redis/limits.lua (src/store/limits_call.cpp), without Redis: what
// the store writes is what the script's header says it reads, and what it reads back is what
// the script replies. (tests/unit/store/redis_store_test.cpp runs both against a real Redis.)
#include "store/limits_call.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::store::limits_call {
namespace {

using std::chrono::milliseconds;

/// A batch's request as write_decide_call reads it.
struct request {
    const checks* request_checks;
    bool give_backs;
};

/// The arguments of one RESP command (an array of bulk strings), or nothing if it is not one.
std::vector<std::string> arguments_of(std::string_view resp) {
    std::vector<std::string> args;
    const auto number = [&resp](char kind) -> std::size_t {
        if (resp.empty() || resp.front() != kind) {
            return std::string::npos;
        }
        const auto end = resp.find("\r\n");
        const auto n = std::stoul(std::string(resp.substr(1, end - 1)));
        resp.remove_prefix(end + 2);
        return n;
    };
    const auto argc = number('*');
    for (std::size_t i = 0; argc != std::string::npos && i < argc; ++i) {
        const auto size = number('$');
        if (size == std::string::npos || resp.size() < size + 2 || resp.substr(size, 2) != "\r\n") {
            return {};
        }
        args.emplace_back(resp.substr(0, size));
        resp.remove_prefix(size + 2);
    }
    return resp.empty() ? args : std::vector<std::string>{};
}

/// The packed groups' numbers: 32-bit little-endian words.
std::vector<std::uint32_t> words_of(std::string_view packed) {
    std::vector<std::uint32_t> words;
    for (std::size_t i = 0; i + 4 <= packed.size(); i += 4) {
        std::uint32_t w = 0;
        for (std::size_t b = 0; b < 4; ++b) {
            w |= static_cast<std::uint32_t>(static_cast<unsigned char>(packed[i + b])) << (8 * b);
        }
        words.push_back(w);
    }
    EXPECT_EQ(packed.size() % 4, 0u);
    return words;
}

/// A packed reply of signed 64-bit little-endian fields.
std::string reply_of(const std::vector<std::int64_t>& fields) {
    std::string packed;
    for (const auto f : fields) {
        const auto bits = static_cast<std::uint64_t>(f);
        for (int b = 0; b < 8; ++b) {
            packed.push_back(static_cast<char>((bits >> (8 * b)) & 0xff));
        }
    }
    return packed;
}

config::limit leaky(std::int64_t capacity, double flow_rate, config::shaping_mode mode) {
    config::limit l;
    l.capacity = capacity;
    l.flow_rate = flow_rate;
    l.mode = mode;
    return l;
}

config::limit fixed_window(std::int64_t count, milliseconds window) {
    config::limit l;
    l.algo = config::algorithm::fixed_window;
    l.limit_count = count;
    l.window = window;
    return l;
}

constexpr std::uint32_t tentative = 1u << 30;
constexpr std::uint32_t amount = 1u << 31;
constexpr std::uint32_t negative = 1u << 30;

TEST(LimitsCall, EachDistinctKeyAndLimitGoesOnceAndEachRequestAsItsNumbers) {
    const auto bucket = leaky(50, 0.7, config::shaping_mode::shape);
    const auto window = fixed_window(10, milliseconds{60'000});
    const checks a{{"k1", &bucket, 1}};
    const checks b{{"k1", &bucket, 1}};
    const checks c{{"k2", &bucket, 3}};
    const checks d{{"k2", &window, 1}, {"k1", &bucket, 1}};
    const std::vector<request> requests{{&a, false}, {&b, false}, {&c, false}, {&d, true}};
    std::string command;
    definition_texts texts;

    const auto reply_size = write_decide_call(
        command, "FCALL", "f", requests, 1000.5, milliseconds{60'000}, texts, "p:7:");

    // Six fields of 8 bytes per check, two more per check of the tentative request.
    EXPECT_EQ(reply_size, (3 * 6 + 2 * 8) * 8u);
    const auto args = arguments_of(command);
    const std::vector<std::string> head{
        "FCALL", "f",  "2",     "k1", "k2", "1000.5", "60000", "2",
        "1",     "50", "0.7",   "0",  "-1", "0", // LEAKY_BUCKET, shape, no max_delay, not dry-run
        "3",     "10", "60000", "0",  "-1", "0"};
    ASSERT_EQ(args.size(), head.size() + 2) << command;
    EXPECT_EQ(std::vector<std::string>(args.begin(), args.begin() + head.size()), head);
    EXPECT_EQ(args.back(), "p:7:");
    // a and b: one key, k1 with the bucket; c: k2 with the bucket, cost 3; d, tentative: k2
    // with the window, then k1 with the bucket.
    const std::vector<std::uint32_t> packed{
        1, 1, 1, 1, 1, 1, 1, 2, 1 | amount, 3, 0, tentative | 2, 2, 2, 1, 1};
    EXPECT_EQ(words_of(args[head.size()]), packed);
}

TEST(LimitsCall, AmountsAndTokensArePackedAsTheScriptReadsThem) {
    std::string packed;
    append_entry(packed, 3, 2, true, -5);
    append_entry(packed, 4, 1, true, (std::int64_t{1} << 53));
    append_entry(packed, 5, 1, false, 1);
    append_token(packed, give_back_token{-1, (std::int64_t{1} << 40) + 7});
    // Key 3, definition 2, minus 5; key 4, definition 1, 2^53; key 5, definition 1, no amount;
    // then the token: -1 and 2^40 + 7.
    const std::vector<std::uint32_t> expected{3,
                                              2 | amount | negative,
                                              5,
                                              0,
                                              4,
                                              1 | amount,
                                              0,
                                              1u << 21,
                                              5,
                                              1,
                                              0xffffffff,
                                              0xffffffff,
                                              7,
                                              1u << 8};
    EXPECT_EQ(words_of(packed), expected);
}

TEST(LimitsCall, ARequestsDecisionsAreReadFromItsFieldsWithThePolicyBeside) {
    const auto bucket = leaky(50, 5, config::shaping_mode::shape);
    const auto window = fixed_window(10, milliseconds{60'000});
    const checks request{{"k1", &bucket, 60}, {"k2", &window, 1}};
    // A request before this one took the first six fields.
    const auto packed =
        reply_of({9, 9, 9, 9, 9, 9, 0, 49, 10'000, 1'200, 0, 0, 1, 7, 30'000, 0, 0, 3});
    outcome out;
    out.local = true;
    out.slots.push_back({"stale", "lease", milliseconds{1}});

    decisions_at(packed, 6, request, reply_fields, out);

    ASSERT_EQ(out.decisions.size(), 2u);
    EXPECT_TRUE(out.slots.empty());
    EXPECT_FALSE(out.local);
    const auto& first = out.decisions[0];
    EXPECT_FALSE(first.allowed);
    EXPECT_EQ(first.remaining, 49);
    EXPECT_EQ(first.reset_after, milliseconds{10'000});
    EXPECT_EQ(first.retry_after, milliseconds{1'200});
    EXPECT_EQ(first.limit, 50);
    EXPECT_EQ(first.window, milliseconds{10'000}); // 50 slots of 200 ms
    EXPECT_TRUE(first.never_fits);                 // a cost of 60 in a bucket of 50
    const auto& second = out.decisions[1];
    EXPECT_TRUE(second.allowed);
    EXPECT_EQ(second.remaining, 7);
    EXPECT_EQ(second.reset_after, milliseconds{30'000});
    EXPECT_EQ(second.limit, 10);
    EXPECT_EQ(second.window, milliseconds{60'000});
    EXPECT_FALSE(second.never_fits);
    EXPECT_FALSE(admitted(request, out));
}

TEST(LimitsCall, ADelayOutsideWhatItsLimitCanGiveIsRefused) {
    // 50 slots of 200 ms: a delay of at most 51 slots and a millisecond.
    const auto shaped = leaky(50, 5, config::shaping_mode::shape);
    const auto policed = leaky(50, 5, config::shaping_mode::police);
    EXPECT_EQ(delay_bound(shaped), milliseconds{10'201});
    EXPECT_EQ(delay_bound(policed), milliseconds{0});
    const checks on_shaped{{"k", &shaped, 1}};
    const checks on_policed{{"k", &policed, 1}};
    const auto with_delay = [](std::int64_t delay) {
        return reply_of({1, 0, 0, 0, delay, 0});
    };
    const auto within = [&](const checks& c, std::int64_t delay) {
        return delays_within_bounds(with_delay(delay), 0, c, reply_fields);
    };
    EXPECT_TRUE(within(on_shaped, 0));
    EXPECT_TRUE(within(on_shaped, 10'201));
    EXPECT_FALSE(within(on_shaped, 10'202));
    EXPECT_FALSE(within(on_shaped, -1));
    EXPECT_TRUE(within(on_policed, 0));
    EXPECT_FALSE(within(on_policed, 1));
}

TEST(LimitsCall, GiveBacksAreTheLastAdmittedCheckOfEachKeyAndNoSlot) {
    const auto bucket = leaky(50, 5, config::shaping_mode::police);
    const auto window = fixed_window(10, milliseconds{60'000});
    config::limit concurrency;
    concurrency.algo = config::algorithm::concurrency;
    concurrency.limit_count = 2;
    const checks request{{"k1", &window, 1}, {"k1", &bucket, 4}, {"k2", &concurrency, 1}};
    constexpr std::size_t stride = reply_fields + token_fields;
    const auto packed = reply_of({1, 9,  0, 0, 0, 0, 111, 0,   // k1, the window: not its last
                                  1, 40, 0, 0, 0, 0, 222, 333, // k1, the bucket
                                  1, 1,  0, 0, 0, 0, 0,   0}); // k2, a slot
    outcome out;
    decisions_at(packed, 0, request, stride, out);
    ASSERT_TRUE(admitted(request, out));

    const auto entries = give_backs_at(packed, 0, request, out, stride);

    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].key, "k1");
    EXPECT_EQ(entries[0].limit, &bucket);
    EXPECT_EQ(entries[0].amount, 4);
    EXPECT_EQ(entries[0].token, (give_back_token{222, 333}));

    // Refused: nothing was charged, so nothing goes back.
    const auto refused_packed =
        reply_of({1, 9, 0, 0, 0, 0, 111, 0, 0, 40, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0});
    outcome refused;
    decisions_at(refused_packed, 0, request, stride, refused);
    EXPECT_TRUE(give_backs_at(refused_packed, 0, request, refused, stride).empty());
}

TEST(LimitsCall, ADefinitionIsWrittenAgainWhenItsLimitChangedInPlace) {
    auto l = leaky(50, 5, config::shaping_mode::shape);
    definition_texts texts;
    const std::string before(texts.of(l));
    EXPECT_EQ(std::string(texts.of(l)), before);
    l.flow_rate = 2.5;
    const std::string after(texts.of(l));
    EXPECT_NE(after, before);
    EXPECT_NE(after.find("$3\r\n2.5\r\n"), std::string::npos) << after;
}

} // namespace
} // namespace sluice::store::limits_call
