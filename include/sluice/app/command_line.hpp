// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sluice::app {

/// What `sluice` was asked to do.
struct command_line {
    std::string config_path = "config/sluice.yaml";
    /// --check-config: validate the configuration, print its warnings, exit.
    bool check_config = false;
    bool show_version = false;
    bool show_help = false;
};

/// An argument sluice does not understand; the message says which.
class command_line_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/**
 * Parses the arguments after the program name:
 * `--config FILE` (also `--config=FILE`, `-c FILE`), `--check-config`, `--version` (`-V`),
 * `--help` (`-h`). Throws `command_line_error` for anything else, a missing or empty FILE, or a
 * positional argument.
 */
command_line parse_command_line(std::span<const std::string_view> args);

/// As above, from `main`'s arguments (argv[0] is skipped).
command_line parse_command_line(int argc, const char* const* argv);

/// The --help text.
std::string usage(std::string_view program);

} // namespace sluice::app
