// SPDX-License-Identifier: Apache-2.0
// How a script call names its script, and what a refusal says about that name.
#include "reply_builders.hpp"
#include "sluice/redis/reply.hpp"
#include "sluice/redis/scripts.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>

namespace sluice::redis {
namespace {

using test::error_reply;

TEST(ScriptCall, EachWayNamesTheScriptItsOwnWay) {
    const auto [fcall, function] = script_call_head(script_call::fcall, limits_script);
    EXPECT_EQ(fcall, "FCALL");
    EXPECT_EQ(function, limits_script.function_name);
    const auto [evalsha, sha1] = script_call_head(script_call::evalsha, limits_script);
    EXPECT_EQ(evalsha, "EVALSHA");
    EXPECT_EQ(sha1, limits_script.sha1);
    const auto [eval, text] = script_call_head(script_call::eval, limits_script);
    EXPECT_EQ(eval, "EVAL");
    EXPECT_EQ(text, limits_script.text);
}

TEST(ScriptCall, TheLimitsLibraryIsTheScriptRegisteringItsEntryUnderAVersionedName) {
    const std::string name = "sluice_limits_" + std::string(limits_script.sha1);
    EXPECT_EQ(limits_script.function_name, name);
    const std::string_view library = limits_script.library;
    EXPECT_TRUE(library.starts_with("#!lua name=" + name + "\n"));
    EXPECT_TRUE(library.ends_with("redis.register_function('" + name + "', decide_batch)\n"));
    // The script's text but its last line (the EVAL entry), which the registration replaces.
    const std::string_view text = limits_script.text;
    ASSERT_TRUE(text.ends_with("\nreturn decide_batch(KEYS, ARGV)\n"));
    const auto prelude =
        text.substr(0, text.size() - std::string_view("return decide_batch(KEYS, ARGV)\n").size());
    EXPECT_NE(library.find(prelude), std::string_view::npos);
    // slots.lua is called by EVALSHA alone.
    EXPECT_TRUE(slots_script.library.empty());
    EXPECT_TRUE(slots_script.function_name.empty());
}

TEST(ScriptCall, RefusalsAreReadFromTheReplyToTheWayTheCallWasMade) {
    // Redis 7 without the library (never loaded here, or FUNCTION FLUSH).
    EXPECT_EQ(refusal_of(script_call::fcall, error_reply("ERR Function not found")),
              script_refusal::function_missing);
    // Redis 6 (and a Redis that renamed FCALL away), in both quotings Redis has used.
    EXPECT_EQ(
        refusal_of(script_call::fcall,
                   error_reply("ERR unknown command 'FCALL', with args beginning with: 'x' ")),
        script_refusal::functions_unusable);
    EXPECT_EQ(refusal_of(script_call::fcall, error_reply("ERR unknown command `FCALL`, with args")),
              script_refusal::functions_unusable);
    // An ACL that forbids FCALL.
    EXPECT_EQ(
        refusal_of(script_call::fcall,
                   error_reply("NOPERM this user has no permissions to run the 'fcall' command")),
        script_refusal::functions_unusable);
    EXPECT_EQ(refusal_of(script_call::evalsha, error_reply("NOSCRIPT No matching script.")),
              script_refusal::noscript);

    // What the script itself answers, or any other error, is no refusal of the way.
    EXPECT_EQ(
        refusal_of(script_call::fcall, error_reply("ERR sluice: bad request group at byte 1")),
        script_refusal::none);
    EXPECT_EQ(refusal_of(script_call::fcall, error_reply("OOM command not allowed")),
              script_refusal::none);
    // A refusal of another way than the call's: EVAL has no fallback, NOSCRIPT is EVALSHA's.
    EXPECT_EQ(refusal_of(script_call::eval, error_reply("NOSCRIPT No matching script.")),
              script_refusal::none);
    EXPECT_EQ(refusal_of(script_call::evalsha, error_reply("ERR Function not found")),
              script_refusal::none);
    EXPECT_EQ(
        refusal_of(script_call::evalsha, error_reply("NOPERM no permissions to run 'evalsha'")),
        script_refusal::none);

    reply ok;
    ok.type = reply::kind::string;
    ok.str = "NOSCRIPT"; // a string reply, not an error
    EXPECT_EQ(refusal_of(script_call::evalsha, ok), script_refusal::none);
}

// An error reply's kind is the code Redis starts it with, one of a fixed set: a log line
// throttled by kind has a bounded number of throttles, whatever texts Redis (or a script) sends.
TEST(ReplyErrorKind, IsTheLeadingCodeOfAFixedSetOrOther) {
    EXPECT_EQ(
        error_reply("ERR Error running script (call to f_1): @user_script:3: boom").error_kind(),
        "ERR");
    EXPECT_EQ(error_reply("NOSCRIPT No matching script. Please use EVAL.").error_kind(),
              "NOSCRIPT");
    EXPECT_EQ(error_reply("OOM command not allowed when used memory > 'maxmemory'.").error_kind(),
              "OOM");
    EXPECT_EQ(error_reply("BUSY Redis is busy running a script.").error_kind(), "BUSY");
    EXPECT_EQ(error_reply("NOPERM this user has no permissions").error_kind(), "NOPERM");
    EXPECT_EQ(error_reply("READONLY You can't write against a read only replica.").error_kind(),
              "READONLY");
    EXPECT_EQ(error_reply("ERR").error_kind(), "ERR");
    EXPECT_EQ(error_reply("").error_kind(), "other");
    EXPECT_EQ(error_reply("err lowercase is not Redis's").error_kind(), "other");
    EXPECT_EQ(error_reply("ERRX close but not a code").error_kind(), "other");
    std::set<std::string_view> kinds;
    for (int i = 0; i < 1000; ++i) {
        kinds.insert(error_reply("CODE" + std::to_string(i) + " text").error_kind());
        kinds.insert(error_reply("ERR text " + std::to_string(i)).error_kind());
    }
    EXPECT_EQ(kinds, (std::set<std::string_view>{"ERR", "other"}));
}

} // namespace
} // namespace sluice::redis
