// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"

#include <spdlog/common.h>
#include <spdlog/formatter.h>

#include <memory>
#include <string_view>

namespace spdlog {
class logger;
}

namespace sluice::app {

/// Creates the loggers with text format at info level, before any configuration is read, so that
/// start-up errors already go to stderr. Idempotent.
void init_logging();

/**
 * Sets up logging from `config.logging`: the default logger (diagnostics, on stderr) and the
 * access logger (one line per request, on stdout, as container platforms expect). Text lines look
 * like `[2024-05-01 12:00:00.123] [info] message`; JSON lines are one object each, with "time"
 * (UTC, ISO 8601), "level" and "msg" (or the access fields). `level` applies to the diagnostics
 * only; `access_log` alone decides whether the access logger writes. Called at start-up, and
 * again on reload to apply a new level or format. Returns the access logger.
 */
std::shared_ptr<spdlog::logger> setup_logging(const config::logging_settings& settings);

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
