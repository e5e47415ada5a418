// SPDX-License-Identifier: Apache-2.0
#include "sluice/app/logging.hpp"

#include <gtest/gtest.h>
#include <spdlog/details/log_msg.h>
#include <spdlog/logger.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <ctime>
#include <string>

namespace sluice::app {
namespace {

std::string render_with(spdlog::formatter& formatter, std::string_view payload) {
    spdlog::details::log_msg msg(
        "test", spdlog::level::warn, spdlog::string_view_t(payload.data(), payload.size()));
    msg.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'700'000'000'123));
    spdlog::memory_buf_t out;
    formatter.format(msg, out);
    return {out.data(), out.size()};
}

std::string render(bool raw_fields, std::string_view payload) {
    json_formatter formatter(raw_fields);
    return render_with(formatter, payload);
}

TEST(JsonFormatter, WritesOneObjectPerLineWithEscapedMessage) {
    EXPECT_EQ(render(false, R"(bad "key")"),
              "{\"time\":\"2023-11-14T22:13:20.123Z\",\"level\":\"warning\","
              "\"msg\":\"bad \\\"key\\\"\"}\n");
}

TEST(JsonFormatter, SplicesAccessFields) {
    EXPECT_EQ(render(true, R"("status":200)"),
              "{\"time\":\"2023-11-14T22:13:20.123Z\",\"level\":\"warning\",\"log\":\"access\","
              "\"status\":200}\n");
}

// The text log's times are UTC, marked Z, as the JSON log's, whatever the machine's zone.
TEST(TextFormatter, WritesUtcTimesMarkedZ) {
    const char* saved = std::getenv("TZ");
    const std::string restore = saved != nullptr ? saved : "";
    ::setenv("TZ", "XYZ+05", 1); // POSIX form: 5 h behind UTC, no tzdata needed
    ::tzset();
    EXPECT_EQ(render_with(*make_text_formatter(false), "hello"),
              "[2023-11-14T22:13:20.123Z] [warning] hello\n");
    EXPECT_EQ(render_with(*make_text_formatter(true), "status=200"),
              "[2023-11-14T22:13:20.123Z] [access] status=200\n");
    if (saved != nullptr) {
        ::setenv("TZ", restore.c_str(), 1);
    } else {
        ::unsetenv("TZ");
    }
    ::tzset();
}

TEST(ParseLevel, KnowsTheConfigNames) {
    EXPECT_EQ(parse_level("trace"), spdlog::level::trace);
    EXPECT_EQ(parse_level("debug"), spdlog::level::debug);
    EXPECT_EQ(parse_level("info"), spdlog::level::info);
    EXPECT_EQ(parse_level("warn"), spdlog::level::warn);
    EXPECT_EQ(parse_level("error"), spdlog::level::err);
    EXPECT_EQ(parse_level("critical"), spdlog::level::critical);
    EXPECT_EQ(parse_level("off"), spdlog::level::off);
    EXPECT_EQ(parse_level("nonsense"), spdlog::level::info);
}

config::logging_settings logging_with(std::string level, bool access_log) {
    config::logging_settings settings;
    settings.level = std::move(level);
    settings.access_log = access_log;
    return settings;
}

// logging.level is for the diagnostics; the access log is on or off by logging.access-log alone.
TEST(SetupLogging, AccessLogFollowsAccessLogNotLevel) {
    for (const char* level : {"trace", "info", "warn", "error", "off"}) {
        const auto& on = setup_logging(logging_with(level, true));
        EXPECT_TRUE(on.enabled()) << "level " << level;
        EXPECT_EQ(spdlog::default_logger()->level(), parse_level(level)) << "level " << level;
        const auto& off = setup_logging(logging_with(level, false));
        EXPECT_FALSE(off.enabled()) << "level " << level;
    }
    setup_logging(logging_with("info", true));
}

// The access log's format is the one setup_logging was last given (a reload's), the one value a
// line's format is read from when it is written.
TEST(SetupLogging, TheAccessLogTakesTheFormatSetLast) {
    auto settings = logging_with("info", true);
    settings.format = config::logging_settings::format_kind::json;
    EXPECT_EQ(setup_logging(settings).format(), config::logging_settings::format_kind::json);
    settings.format = config::logging_settings::format_kind::text;
    EXPECT_EQ(setup_logging(settings).format(), config::logging_settings::format_kind::text);
}

} // namespace
} // namespace sluice::app
