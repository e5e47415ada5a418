// SPDX-License-Identifier: Apache-2.0
#pragma once

// Converting hiredis replies: private to src/redis.

#include "sluice/redis/client.hpp"

struct redisReply;

namespace sluice::redis::detail {

/// A deep copy of `r`, which hiredis frees when the reply callback returns. Recursive in the
/// nesting depth of arrays (one level for everything sluice sends).
reply copy_reply(const redisReply& r);

} // namespace sluice::redis::detail
