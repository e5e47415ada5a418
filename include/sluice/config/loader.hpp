// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "sluice/config/config.hpp"

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sluice::config {

/// Every problem found in a configuration, one per line, each "FILE:LINE: key 'a.b.c': what".
class config_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Looks up an environment variable by name: its value, or nullopt when it is not set.
using environment = std::function<std::optional<std::string>(const std::string& name)>;

/// The process environment (getenv).
std::optional<std::string> process_environment(const std::string& name);

/**
 * Reads and validates the YAML file at `path`.
 *
 * `${NAME}` and `${NAME:-default}` in a value are replaced from `env` (`$$` is a literal `$`)
 * before the value is read. Unknown keys, wrong types, out-of-range values, missing required
 * keys and unset variables are all errors; validation collects every one of them before
 * throwing a single `config_error`. Non-fatal findings go to `config::warnings`. Called only at
 * start-up and on reload.
 */
config load_file(const std::string& path, const environment& env = process_environment);

/// As `load_file`, from text in memory; `source` names it in messages.
config load_string(std::string_view yaml,
                   const std::string& source = "<string>",
                   const environment& env = process_environment);

/// "KEY (FILE:LINE)" where `cfg`'s file set KEY, "KEY (not in FILE)" where it did not, or KEY
/// alone for a configuration built in code: for messages about a key after its load.
std::string located_key(const config& cfg, std::string_view key);

} // namespace sluice::config
