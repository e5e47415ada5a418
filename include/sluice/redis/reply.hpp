// SPDX-License-Identifier: Apache-2.0
#pragma once

// A Redis reply as sluice keeps it: no Asio, no hiredis, so that code reading replies (the
// cluster slot map) builds and fuzzes without either.

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
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

    /**
     * A one-line rendering for test messages and (through log_excerpt, which escapes it) logs,
     * e.g. `[1, "a", nil]`. One longer than `max_bytes` is cut to that and ends in "...";
     * rendering stops there, so a reply as large as Redis allows costs a log line no more.
     */
    std::string describe(std::size_t max_bytes = std::numeric_limits<std::size_t>::max()) const;

    /**
     * The kind of an error reply: the code it starts with ("ERR", "NOSCRIPT", "OOM", ...) when
     * that is one of the codes Redis sends, else "other" (and for a reply that is no error). A
     * fixed set, whatever the text: what a log line about error replies is throttled by, where
     * the text (which may name a key, a line, a number) would give each a throttle of its own.
     * The view is into static storage.
     */
    std::string_view error_kind() const noexcept;

    friend bool operator==(const reply&, const reply&) = default;
};

} // namespace sluice::redis
