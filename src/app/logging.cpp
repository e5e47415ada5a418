// SPDX-License-Identifier: Apache-2.0
#include "sluice/app/logging.hpp"

#include "app/log_queue.hpp"
#include "sluice/core/text.hpp"
#include "sluice/http/access_log.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>
#include <mutex>
#include <string>
#include <unistd.h>

namespace sluice::app {
namespace {

// UTC, marked `Z`, as the JSON log's times: a log read on another machine, or across a change
// to daylight saving time, means the same instant.
constexpr const char* text_pattern = "[%Y-%m-%dT%H:%M:%S.%eZ] [%l] %v";
constexpr const char* access_text_pattern = "[%Y-%m-%dT%H:%M:%S.%eZ] [access] %v";

/// Bytes of lines that may wait for each descriptor: some 7,000 access lines, so that a reader's
/// pause of a moment costs nothing (at 40,000 requests a second, about 0.2 s). What comes past
/// that is dropped.
constexpr std::size_t queue_capacity = 1 << 20;

/**
 * The log's two descriptors, each with its queue and its writing thread: stdout (the access log)
 * and stderr (the diagnostics), apart, so that an access-log reader that stalls does not hold
 * back the diagnostics of the same moment ("stopping", a warning). Made once, never destroyed
 * (log_queue says why); reachable through this pointer until the process ends.
 */
struct log_queues {
    log_queue out{STDOUT_FILENO, queue_capacity};
    log_queue err{STDERR_FILENO, queue_capacity};
};

log_queues& queues() {
    static log_queues* const made = new log_queues;
    return *made;
}

/**
 * An spdlog sink that formats each line on the thread that logs it, as spdlog's own sinks do, and
 * hands it to a log_queue, which never waits for the descriptor. The sink's mutex guards its
 * formatter (a reload sets another), never a write. In place of spdlog's stdout and stderr
 * sinks, which write and flush under one process-wide mutex (console_mutex), so that a reader
 * that stopped reading stopped every thread that logs; and in place of its async logger, whose
 * thread pool is joined at exit (a thread stuck in a write, never) behind a blocking post.
 */
class queue_sink final : public spdlog::sinks::base_sink<std::mutex> {
public:
    explicit queue_sink(log_queue& queue) noexcept
        : queue_(queue) {}

private:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        spdlog::memory_buf_t line;
        formatter_->format(msg, line);
        queue_.push({line.data(), line.size()});
    }

    // A line is on its way once queued: flush_logging waits for the queues, with a bound.
    void flush_() override {}

    log_queue& queue_;
};

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

namespace {

std::shared_ptr<spdlog::logger> make_access_logger(std::unique_ptr<spdlog::formatter> formatter) {
    auto logger =
        std::make_shared<spdlog::logger>("access", std::make_shared<queue_sink>(queues().out));
    logger->set_formatter(std::move(formatter));
    return logger;
}

/// The access log: a logger per format on stdout's one queue (so their lines keep their order),
/// made once, never destroyed, as the queues.
http::access_log& access_log() {
    static http::access_log* const made =
        new http::access_log(make_access_logger(make_text_formatter(true)),
                             make_access_logger(std::make_unique<json_formatter>(true)));
    return *made;
}

} // namespace

void init_logging() {
    access_log();
    if (spdlog::get("sluice")) {
        return;
    }
    auto main =
        std::make_shared<spdlog::logger>("sluice", std::make_shared<queue_sink>(queues().err));
    main->set_formatter(make_text_formatter(false));
    spdlog::register_logger(main);
    spdlog::set_default_logger(main);
}

http::access_log& setup_logging(const config::logging_settings& settings) {
    init_logging();
    const bool json = settings.format == config::logging_settings::format_kind::json;
    auto main = spdlog::get("sluice");
    // A diagnostic line's text does not depend on the format: its formatter may change at once.
    if (json) {
        main->set_formatter(std::make_unique<json_formatter>(false));
    } else {
        main->set_formatter(make_text_formatter(false));
    }
    main->set_level(parse_level(settings.level));
    // logging.level is for the diagnostics; logging.access-log alone turns the access log on or
    // off (`level: warn` must not silence it).
    auto& access = access_log();
    access.set(settings.format, settings.access_log);
    return access;
}

bool flush_logging(std::chrono::milliseconds bound) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    auto& q = queues();
    const bool err = q.err.finish(deadline);
    const bool out = q.out.finish(deadline);
    return err && out;
}

counting_dropped_log_lines::counting_dropped_log_lines(metrics::counter& dropped) {
    queues().out.count_dropped_in(&dropped);
    queues().err.count_dropped_in(&dropped);
}

counting_dropped_log_lines::~counting_dropped_log_lines() {
    queues().out.count_dropped_in(nullptr);
    queues().err.count_dropped_in(nullptr);
}

} // namespace sluice::app
