// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string_view>

namespace sluice::redis {

/// A Lua script embedded at build time, with the SHA1 that EVALSHA names it by.
struct script {
    std::string_view text;
    std::string_view sha1; // 40 lowercase hex digits
};

/**
 * src/redis/limits.lua: decides every limit of one request atomically (see the script's header
 * for its KEYS/ARGV layout and its reply). Generated from the .lua file by the build.
 */
extern const script limits_script;

/// src/redis/slots.lua: gives back or renews CONCURRENCY slots (see its header).
extern const script slots_script;

} // namespace sluice::redis
