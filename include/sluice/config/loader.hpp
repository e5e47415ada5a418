// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"

#include <stdexcept>
#include <string>
#include <string_view>

namespace sluice::config {

/// Every problem found in a configuration, one per line, each "FILE:LINE: key 'a.b.c': what".
class config_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/**
 * Reads and validates the YAML file at `path`.
 *
 * Unknown keys, wrong types, out-of-range values and missing required keys are all errors;
 * validation collects every one of them before throwing a single `config_error`. Non-fatal
 * findings go to `config::warnings`. Called only at start-up and on reload.
 */
config load_file(const std::string& path);

/// As `load_file`, from text in memory; `source` names it in messages.
config load_string(std::string_view yaml, const std::string& source = "<string>");

} // namespace sluice::config
