// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"
#include "sluice/http/access_log.hpp"
#include "sluice/metrics/metrics.hpp"

#include <spdlog/common.h>
#include <spdlog/formatter.h>

#include <chrono>
#include <memory>
#include <string_view>

namespace sluice::app {

/**
 * Creates the loggers with text format at info level, before any configuration is read, so that
 * start-up errors already go to stderr. Idempotent.
 *
 * No thread that logs waits for the log's reader: a line is formatted on the thread that logs it
 * and queued, and a thread per descriptor (stdout, stderr) writes it. When a reader falls behind
 * by more than 1 MiB of lines (it stopped: a log driver that blocks, a full pipe), further lines
 * are dropped, and counted (`counting_dropped_log_lines`), as is a line whose write fails. Lines
 * reach each descriptor in the order they were logged.
 */
void init_logging();

/**
 * Waits until the lines logged so far are written, for at most `bound`: call it before the
 * process exits, so that its last lines (an error at start-up, "stopped") go out. A reader that
 * has stopped cannot be waited for: then the lines still queued are lost. True when all went out.
 */
bool flush_logging(std::chrono::milliseconds bound);

/// Counts the log lines dropped (init_logging) in `dropped` while it lives.
class counting_dropped_log_lines {
public:
    explicit counting_dropped_log_lines(metrics::counter& dropped);
    ~counting_dropped_log_lines();

    counting_dropped_log_lines(const counting_dropped_log_lines&) = delete;
    counting_dropped_log_lines& operator=(const counting_dropped_log_lines&) = delete;
};

/**
 * Sets up logging from `config.logging`: the default logger (diagnostics, on stderr) and the
 * access log (one line per request, on stdout, as container platforms expect). Text lines look
 * like `[2024-05-01T12:00:00.123Z] [info] message`; JSON lines are one object each, with "time"
 * (UTC, ISO 8601), "level" and "msg" (or the access fields). `level` applies to the diagnostics
 * only; `access_log` alone decides whether the access log writes. Called at start-up, and again
 * on reload to apply a new level or format, to the lines written from then on (an access line
 * of a request that began before is written whole in the new format). Returns the access log,
 * which lives as long as the process.
 */
http::access_log& setup_logging(const config::logging_settings& settings);

/// The spdlog level for a config level name (trace debug info warn error critical off);
/// info for anything else (the loader has validated it).
spdlog::level::level_enum parse_level(std::string_view name) noexcept;

/**
 * The text format's formatter: `[2023-11-14T22:13:20.123Z] [warning] message`, the time in UTC
 * whatever the machine's time zone; `[access]` in place of the level for the access log.
 */
std::unique_ptr<spdlog::formatter> make_text_formatter(bool access);

/**
 * Formats a record as one JSON object per line. With `raw_fields`, the message is taken to be
 * JSON members already (the access log's `"client":…`) and spliced in; otherwise it becomes the
 * escaped "msg" string.
 */
class json_formatter final : public spdlog::formatter {
public:
    explicit json_formatter(bool raw_fields) noexcept
        : raw_fields_(raw_fields) {}

    void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;

    std::unique_ptr<spdlog::formatter> clone() const override;

private:
    bool raw_fields_;
};

} // namespace sluice::app
