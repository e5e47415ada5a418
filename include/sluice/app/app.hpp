// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/app/command_line.hpp"

#include <string_view>

namespace sluice::app {

/**
 * Does what the command line asks: prints help or `version`, checks the configuration, or runs
 * the proxy until SIGINT/SIGTERM (then drains in-flight requests for up to
 * `server.drain_timeout`). SIGHUP reloads the configuration; an invalid one is logged and the
 * current one kept.
 *
 * Returns the exit status. Throws `config::config_error` for an invalid configuration and
 * `std::exception` for anything else that stops start-up (a port in use); main reports both.
 */
int run(const command_line& command, std::string_view version);

} // namespace sluice::app
