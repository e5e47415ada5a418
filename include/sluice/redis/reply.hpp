// SPDX-License-Identifier: Apache-2.0
#pragma once

// A Redis reply as sluice keeps it: no Asio, no hiredis, so that code reading replies (the
// cluster slot map) builds and fuzzes without either.

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::redis {

/**
 * One Redis reply, owned: hiredis frees its `redisReply` when the callback returns, so every
 * reply is copied into this small tree inside the callback.
 */
struct reply {
    enum class kind {
        nil,
        integer,
        string, // bulk string
        status, // "+OK"
        error,  // "-ERR ...": `str` holds the text
        array,
    };

    kind type = kind::nil;
    std::int64_t integer = 0;
    std::string str;
    std::vector<reply> elements;

    bool is_nil() const noexcept { return type == kind::nil; }

    bool is_error() const noexcept { return type == kind::error; }

    /// A one-line rendering for logs and test messages, e.g. `[1, "a", nil]`.
    std::string describe() const;

    friend bool operator==(const reply&, const reply&) = default;
};

} // namespace sluice::redis
