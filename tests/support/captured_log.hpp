// SPDX-License-Identifier: Apache-2.0
#pragma once

// What the default logger writes while a `captured_log` lives, for tests of log lines.

#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::test {

/// What the default logger writes while this lives, one message a line (no pattern).
class captured_log {
public:
    captured_log()
        : previous_(spdlog::default_logger()) {
        auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text_);
        sink->set_pattern("%v");
        spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
    }

    captured_log(const captured_log&) = delete;
    captured_log& operator=(const captured_log&) = delete;

    ~captured_log() { spdlog::set_default_logger(previous_); }

    /// Read it once the lines looked for are written: the sink writes under its own lock.
    std::string text() const { return text_.str(); }

    /// The lines that contain `part`.
    std::vector<std::string> lines_with(std::string_view part) const {
        std::vector<std::string> lines;
        std::istringstream in(text());
        for (std::string line; std::getline(in, line);) {
            if (line.find(part) != std::string::npos) {
                lines.push_back(line);
            }
        }
        return lines;
    }

private:
    std::ostringstream text_;
    std::shared_ptr<spdlog::logger> previous_;
};

} // namespace sluice::test
