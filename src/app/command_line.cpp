// SPDX-License-Identifier: Apache-2.0
#include "sluice/app/command_line.hpp"

#include <vector>

namespace sluice::app {

command_line parse_command_line(std::span<const std::string_view> args) {
    command_line result;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const auto arg = args[i];
        if (arg == "--config" || arg == "-c") {
            if (i + 1 >= args.size() || args[i + 1].empty()) {
                throw command_line_error(std::string(arg) + " needs a file name");
            }
            result.config_path = std::string(args[++i]);
        } else if (arg.starts_with("--config=")) {
            result.config_path = std::string(arg.substr(9));
            if (result.config_path.empty()) {
                throw command_line_error("--config= needs a file name");
            }
        } else if (arg == "--check-config") {
            result.check_config = true;
        } else if (arg == "--version" || arg == "-V") {
            result.show_version = true;
        } else if (arg == "--help" || arg == "-h") {
            result.show_help = true;
        } else {
            throw command_line_error("unknown argument '" + std::string(arg) + "'");
        }
    }
    return result;
}

command_line parse_command_line(int argc, const char* const* argv) {
    std::vector<std::string_view> args;
    for (int i = 1; i < argc; ++i) {
        args.emplace_back(argv[i]);
    }
    return parse_command_line(args);
}

std::string usage(std::string_view program) {
    std::string text = "usage: ";
    text += program;
    text += " [--config FILE] [--check-config] [--version] [--help]\n"
            "\n"
            "A reverse proxy that rate-limits clients in front of fragile backends.\n"
            "\n"
            "  -c, --config FILE   configuration file (default: config/sluice.yaml)\n"
            "      --check-config  validate the configuration, print its warnings and exit\n"
            "                      (status 0 when valid, 1 otherwise)\n"
            "  -V, --version       print the version and exit\n"
            "  -h, --help          print this help and exit\n"
            "\n"
            "Signals: SIGHUP reloads the configuration; SIGINT and SIGTERM stop accepting,\n"
            "let in-flight requests finish (up to server.drain-timeout) and exit.\n";
    return text;
}

} // namespace sluice::app
