// SPDX-License-Identifier: Apache-2.0
#include "sluice/core/escaped_exception.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace sluice {
namespace {

class LogEscaped : public ::testing::Test {
protected:
    void SetUp() override {
        previous_ = spdlog::default_logger();
        auto sink = std::make_shared<spdlog::sinks::ostream_sink_st>(text_);
        sink->set_pattern("%l %v");
        spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink));
    }

    void TearDown() override { spdlog::set_default_logger(previous_); }

    std::ostringstream text_;
    std::shared_ptr<spdlog::logger> previous_;
};

TEST_F(LogEscaped, NamesTheCoroutineAndTheException) {
    log_escaped{"accept loop"}(std::make_exception_ptr(std::runtime_error("out of memory")));
    EXPECT_EQ(text_.str(), "error accept loop ended by an exception: out of memory\n");
}

TEST_F(LogEscaped, AnExceptionOfAnotherTypeIsLoggedToo) {
    log_escaped{"signal handler"}(std::make_exception_ptr(42));
    EXPECT_EQ(text_.str(),
              "error signal handler ended by an exception: an exception of unknown type\n");
}

TEST_F(LogEscaped, ACoroutineThatEndedWellLogsNothing) {
    log_escaped{"accept loop"}(nullptr);
    EXPECT_EQ(text_.str(), "");
}

TEST_F(LogEscaped, AThrottledOneWritesOneLineForManyExceptions) {
    log_throttle throttle(std::chrono::hours(1));
    const log_escaped log{"session", &throttle};
    for (int i = 0; i < 100; ++i) {
        log(std::make_exception_ptr(std::logic_error("bug")));
    }
    EXPECT_EQ(text_.str(), "error session ended by an exception: bug\n");
}

} // namespace
} // namespace sluice
