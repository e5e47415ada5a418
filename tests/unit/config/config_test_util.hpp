// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/loader.hpp"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config::test {

/// Every config test names its source "t.yaml", so messages read "t.yaml:LINE: ...".
inline const std::string source = "t.yaml";

/// The minimal valid start (lines 1-2), for tests that append from line 3.
inline const std::string base = "upstream:\n  url: http://127.0.0.1:9000\n";

inline config load(std::string_view yaml, const environment& env = process_environment) {
    return load_string(yaml, source, env);
}

/// The lines of the config_error that loading `yaml` throws; a test failure if it loads.
inline std::vector<std::string> problems_of(std::string_view yaml,
                                            const environment& env = process_environment) {
    try {
        load(yaml, env);
    } catch (const config_error& e) {
        std::vector<std::string> lines;
        std::istringstream in(e.what());
        for (std::string line; std::getline(in, line);) {
            lines.push_back(line);
        }
        return lines;
    }
    ADD_FAILURE() << "expected a config_error for:\n" << yaml;
    return {};
}

/// Whether one problem line is at `line`, names `key`, and contains `text`.
inline ::testing::AssertionResult has_problem(const std::vector<std::string>& lines,
                                              int line,
                                              std::string_view key,
                                              std::string_view text) {
    const auto prefix = source + ":" + std::to_string(line) + ": key '" + std::string(key) + "': ";
    for (const auto& l : lines) {
        if (l.rfind(prefix, 0) == 0 && l.find(text) != std::string::npos) {
            return ::testing::AssertionSuccess();
        }
    }
    auto failure = ::testing::AssertionFailure()
                   << "no problem starting '" << prefix << "' and containing '" << text << "' in:";
    for (const auto& l : lines) {
        failure << "\n  " << l;
    }
    return failure;
}

} // namespace sluice::config::test
