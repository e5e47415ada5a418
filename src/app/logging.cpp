// SPDX-License-Identifier: Apache-2.0
#include "sluice/app/logging.hpp"

#include "sluice/core/text.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>
#include <string>

namespace sluice::app {
namespace {

// UTC, marked `Z`, as the JSON log's times: a log read on another machine, or across a change
// to daylight saving time, means the same instant.
constexpr const char* text_pattern = "[%Y-%m-%dT%H:%M:%S.%eZ] [%l] %v";
constexpr const char* access_text_pattern = "[%Y-%m-%dT%H:%M:%S.%eZ] [access] %v";

void append(spdlog::memory_buf_t& dest, std::string_view text) {
    dest.append(text.data(), text.data() + text.size());
}

void append_time(spdlog::memory_buf_t& dest, std::chrono::system_clock::time_point time) {
    const auto since_epoch = time.time_since_epoch();
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch - seconds);
    const std::time_t t = seconds.count();
    std::tm utc{};
    gmtime_r(&t, &utc);
    char text[40];
    const auto n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
    append(dest, {text, n});
    fmt::format_to(std::back_inserter(dest), ".{:03}Z", ms.count());
}

} // namespace

void json_formatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
    append(dest, R"({"time":")");
    append_time(dest, msg.time);
    append(dest, R"(","level":")");
    const auto level = spdlog::level::to_string_view(msg.level);
    append(dest, {level.data(), level.size()});
    const std::string_view payload{msg.payload.data(), msg.payload.size()};
    if (raw_fields_) {
        append(dest, R"(","log":"access",)");
        append(dest, payload);
    } else {
        append(dest, R"(","msg":")");
        std::string escaped;
        append_json_escaped(escaped, payload);
        append(dest, escaped);
        append(dest, "\"");
    }
    append(dest, "}\n");
}

std::unique_ptr<spdlog::formatter> json_formatter::clone() const {
    return std::make_unique<json_formatter>(raw_fields_);
}

std::unique_ptr<spdlog::formatter> make_text_formatter(bool access) {
    return std::make_unique<spdlog::pattern_formatter>(access ? access_text_pattern : text_pattern,
                                                       spdlog::pattern_time_type::utc);
}

spdlog::level::level_enum parse_level(std::string_view name) noexcept {
    if (name == "warning") {
        return spdlog::level::warn;
    }
    const auto level = spdlog::level::from_str(std::string(name));
    // from_str answers `off` for names it does not know; only "off" itself means off.
    if (level == spdlog::level::off && name != "off") {
        return spdlog::level::info;
    }
    return level;
}

void init_logging() {
    if (spdlog::get("sluice")) {
        return;
    }
    auto main = std::make_shared<spdlog::logger>("sluice",
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
    main->set_formatter(make_text_formatter(false));
    spdlog::register_logger(main);
    spdlog::set_default_logger(main);
    auto access = std::make_shared<spdlog::logger>(
        "access", std::make_shared<spdlog::sinks::stdout_sink_mt>());
    access->set_formatter(make_text_formatter(true));
    spdlog::register_logger(access);
}

std::shared_ptr<spdlog::logger> setup_logging(const config::logging_settings& settings) {
    init_logging();
    const bool json = settings.format == config::logging_settings::format_kind::json;
    const auto level = parse_level(settings.level);
    auto main = spdlog::get("sluice");
    auto access = spdlog::get("access");
    if (json) {
        main->set_formatter(std::make_unique<json_formatter>(false));
        access->set_formatter(std::make_unique<json_formatter>(true));
    } else {
        main->set_formatter(make_text_formatter(false));
        access->set_formatter(make_text_formatter(true));
    }
    main->set_level(level);
    // logging.level is for the diagnostics; logging.access-log alone turns the access log on or
    // off (`level: warn` must not silence it).
    access->set_level(settings.access_log ? spdlog::level::info : spdlog::level::off);
    // Errors must reach the log even when a crash follows.
    main->flush_on(spdlog::level::warn);
    return access;
}

} // namespace sluice::app
