// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

namespace spdlog {
class logger;
}

namespace sluice::http {

/// What one request came to, for the access log.
struct access_record {
    std::string client;      // the address the request was limited by
    std::string_view method; // points into the request, valid until it is logged
    std::string path;        // the normalized path, or the raw target if it was invalid
    std::string key;         // the first limit's key, empty when no limit applied
    std::string_view decision = "-";
    unsigned status = 0;                         // 0: no response was sent (the client left first)
    std::chrono::milliseconds upstream_time{-1}; // -1: not forwarded
    /// Its shaping hold (the verdict's delay: when it goes on is counted from it).
    std::chrono::milliseconds delay{0};
    /// Its wait for a CONCURRENCY slot. The log's delay_ms is what it waited in sluice, both.
    std::chrono::milliseconds slot_wait{0};
    /// How a forwarded exchange ended when not in full: "client_left" (the client went before
    /// the response was all written: sluice closed the upstream connection at once; or its
    /// connection failed in a WebSocket tunnel), "upstream_broke" (the upstream's response
    /// stopped short, or its connection failed in a tunnel), "idle_timeout" (a tunnel in
    /// which nothing moved for server.idle-timeout); "-" otherwise.
    std::string_view end = "-";
};

/**
 * One access-log line (without the logger's own prefix). Text:
 * `client=203.0.113.7 method=GET path=/v1/x key=rate-limit:203.0.113.7:/v1/x decision=allowed
 * status=200 upstream_ms=3 delay_ms=0 end=-`, with '-' for an empty field, and a space, a
 * control byte, DEL, a byte past ASCII or '%' in a field as %XX. JSON: the same fields as
 * the members of an object *without* the braces (`"client":"…","method":…`), so that the JSON log
 * formatter can add time and level around them.
 */
std::string format_access(const access_record& record, config::logging_settings::format_kind kind);

/**
 * Where the access lines go, in the format in force when each is written: `logging.format`, which
 * the logging setup (app/logging.cpp, which owns the one access_log) sets at start-up and again on
 * a reload. A line's fields and what its logger writes around them (the time, `[access]` or the
 * JSON object) follow that one value, read once per line: each format has its own logger whose
 * formatter never changes, so a line is never text fields inside a JSON object, even for a request
 * that began before a reload changed the format (held by shaping, a long download, a tunnel).
 * Thread-safe: every worker writes, the control thread sets.
 */
class access_log {
public:
    using format_kind = config::logging_settings::format_kind;

    /// `text` and `json`: the loggers of each format, their formatters set, never changed.
    access_log(std::shared_ptr<spdlog::logger> text, std::shared_ptr<spdlog::logger> json) noexcept;

    /// `logging.format` and `logging.access-log`, for the lines written from now on.
    void set(format_kind format, bool enabled) noexcept;

    format_kind format() const noexcept { return format_.load(std::memory_order_relaxed); }

    bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }

    /// Writes `record`'s line in the format in force, if the access log is on.
    void write(const access_record& record) const;

private:
    std::shared_ptr<spdlog::logger> text_;
    std::shared_ptr<spdlog::logger> json_;
    std::atomic<format_kind> format_{format_kind::text};
    std::atomic<bool> enabled_{true};
};

} // namespace sluice::http
