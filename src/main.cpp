// SPDX-License-Identifier: Apache-2.0
#include "sluice/app/app.hpp"
#include "sluice/app/command_line.hpp"
#include "sluice/app/logging.hpp"
#include "sluice/config/loader.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <csignal>
#include <exception>

namespace {

int run(int argc, char** argv) {
    sluice::app::command_line command;
    try {
        command = sluice::app::parse_command_line(argc, argv);
    } catch (const sluice::app::command_line_error& e) {
        spdlog::error("{} (try --help)", e.what());
        return 2;
    }
    try {
        return sluice::app::run(command, SLUICE_VERSION);
    } catch (const sluice::config::config_error& e) {
        spdlog::error("invalid configuration:\n{}", e.what());
    } catch (const std::exception& e) {
        spdlog::error("cannot start: {}", e.what());
    }
    return 1;
}

} // namespace

int main(int argc, char** argv) {
    // hiredis writes to Redis with write(2), which raises SIGPIPE when Redis has just gone:
    // the default action would kill the proxy instead of letting the failure mode apply (Asio's
    // own sockets send with MSG_NOSIGNAL). nginx ignores SIGPIPE for the same reason.
    std::signal(SIGPIPE, SIG_IGN);
    sluice::app::init_logging();
    const int status = run(argc, argv);
    // The last lines (an error that ends start-up, "stopped") out before the exit, unless the
    // log's reader has stopped: then the exit goes on without them after 1 s.
    sluice::app::flush_logging(std::chrono::seconds(1));
    return status;
}
