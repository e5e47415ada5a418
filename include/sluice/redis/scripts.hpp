// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

namespace sluice::redis {

struct reply;

/// A Lua script embedded at build time, with the SHA1 that EVALSHA names it by.
struct script {
    std::string_view text;
    std::string_view sha1; // 40 lowercase hex digits
    /// The same script as a Redis Function library (Redis 7: `FUNCTION LOAD`), registering the
    /// function `function_name`, which is the library's name too; both empty for a script that
    /// is not made one (see src/redis/embed_lua.cmake).
    std::string_view library;
    std::string_view function_name;
};

/**
 * src/redis/limits.lua: decides every limit of one request atomically (see the script's header
 * for its KEYS/ARGV layout and its reply). Generated from the .lua file by the build, with its
 * Function library.
 */
extern const script limits_script;

/// src/redis/slots.lua: gives back or renews CONCURRENCY slots (see its header).
extern const script slots_script;

/**
 * How a call names its script, in the order tried: FCALL of the Function library (Redis 7; the
 * script's prelude is built once per load, not on every call), EVALSHA (the script cache), EVAL
 * (the source, which loads it into the cache).
 */
enum class script_call : std::uint8_t { fcall, evalsha, eval };

/// The command's first two arguments for `how`: FCALL and the function's name, EVALSHA and the
/// SHA1, or EVAL and the source.
std::pair<std::string_view, std::string_view> script_call_head(script_call how, const script& s);

/// What an error reply says of the way a script was called.
enum class script_refusal : std::uint8_t {
    none,               ///< not about the way: the script ran (or the call failed otherwise)
    function_missing,   ///< FCALL: "Function not found" (never loaded here, or FUNCTION FLUSH)
    functions_unusable, ///< FCALL: unknown command (Redis before 7), or the ACL forbids it
    noscript,           ///< EVALSHA: the script cache does not hold it (SCRIPT FLUSH, failover)
};

/// The refusal in `r`, the reply to a call made `how` (a reply that is no error: none).
script_refusal refusal_of(script_call how, const reply& r);

} // namespace sluice::redis
