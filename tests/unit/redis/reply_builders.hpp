// SPDX-License-Identifier: Apache-2.0
#pragma once

// Replies built by hand, for tests of code that reads them.

#include "sluice/redis/reply.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sluice::test {

inline redis::reply integer_reply(std::int64_t v) {
    redis::reply r;
    r.type = redis::reply::kind::integer;
    r.integer = v;
    return r;
}

/// A bulk string, or with `kind` a status or an error reply of that text.
inline redis::reply string_reply(std::string text,
                                 redis::reply::kind kind = redis::reply::kind::string) {
    redis::reply r;
    r.type = kind;
    r.str = std::move(text);
    return r;
}

inline redis::reply error_reply(std::string text) {
    return string_reply(std::move(text), redis::reply::kind::error);
}

inline redis::reply array_reply(std::vector<redis::reply> elements) {
    redis::reply r;
    r.type = redis::reply::kind::array;
    r.elements = std::move(elements);
    return r;
}

} // namespace sluice::test
